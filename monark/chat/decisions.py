"""A proposal settles exactly once: one conditional update on the stored call.

Whichever tab, window or instance asks first wins: the update only changes a call that is
still PROPOSED (and whatever precondition the caller hands it still holds), and whoever
finds it changed gets a ``Conflict``. A proposal nobody settled within
``CHAT_APPROVAL_TTL`` expires (``expire_overdue``). How a write is decided (who may, what
the card showed, the target re-read) and what people read of it (whether a card's call is
past its time) is the host's business (``monark.approvals``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm.attributes import set_committed_value

import monark.core.metrics as metrics
from monark.chat import store
from monark.chat.calls import kept
from monark.chat.models import CallEvent, ToolCall, ToolCallStatus
from monark.core.errors import Conflict
from monark.core.models import as_utc, utcnow
from monark.core.rbac import Principal
from monark.core.settings import chat_settings
from monark.extensions import db

ALREADY_DECIDED = "This action was already confirmed or rejected."


def ttl_seconds() -> float:
    """How long a proposal waits for a decision."""
    return chat_settings().approval_ttl


def cutoff() -> datetime:
    """Proposals made before this have expired."""
    return utcnow() - timedelta(seconds=ttl_seconds())


@dataclass(frozen=True)
class Settlement:
    """How one proposal settles: its new status, the reason of a rejection, and the
    conditions (``holds``, SQL on ``ToolCall``) that must still be true as it settles;
    ``result``: what a question's call settles SUCCEEDED with (the user's answer)."""

    call: ToolCall
    status: ToolCallStatus
    reason: str | None = None
    skipped: bool = False
    holds: tuple[Any, ...] = ()
    result: Any = None


def _already(call: ToolCall) -> Conflict:
    return Conflict(ALREADY_DECIDED)


_EVENTS = {
    ToolCallStatus.EXECUTING: CallEvent.CONFIRMED,
    ToolCallStatus.SUCCEEDED: CallEvent.ANSWERED,
}
_SETTLED = ("status", "decided_by_id", "decided_at", "reject_reason", "skipped")


def settle(
    principal: Principal,
    settlements: Sequence[Settlement],
    lost: Callable[[ToolCall], Conflict] = _already,
) -> None:
    """PROPOSED → each settlement's status, in one transaction of conditional updates (one
    per outcome), each audited: all of them or none (``lost(call)`` names why the first
    that changed nothing lost: decided meanwhile, or its precondition broken)."""
    now = utcnow()
    outcomes: dict[tuple[Any, ...], list[Settlement]] = {}
    for s in settlements:
        reason = (s.reason or None) if s.status == ToolCallStatus.REJECTED else None
        outcomes.setdefault((s.status, reason, s.skipped), []).append(s)
    for (status, reason, skipped), group in outcomes.items():
        values = {
            "status": status,
            "decided_by_id": principal.user_id,
            "decided_at": now,
            "reject_reason": reason,
            "skipped": skipped,
        }
        changed = db.session.execute(
            update(ToolCall)
            .where(
                ToolCall.status == ToolCallStatus.PROPOSED,
                or_(*(and_(ToolCall.id == s.call.id, *s.holds) for s in group)),
            )
            .values(**values)
            .execution_options(synchronize_session=False)
        ).rowcount
        if changed != len(group):
            failed = next((s for s in group if not _changed(s, status, now)), group[0])
            db.session.rollback()
            raise lost(failed.call)
        for s in group:
            for name in _SETTLED:  # as stored now, without reading it back
                set_committed_value(s.call, name, values[name])
            if s.result is not None:  # won above: the answer is its result
                kept_result = kept(s.result)
                db.session.execute(
                    update(ToolCall)
                    .where(ToolCall.id == s.call.id)
                    .values(result=kept_result)
                    .execution_options(synchronize_session=False)
                )
                set_committed_value(s.call, "result", kept_result)
    for s in settlements:
        if s.status != ToolCallStatus.EXECUTING:  # a confirmed one is counted when it has run
            metrics.tool_call(s.call.name, s.status)
    store.tool_call_events(
        (
            principal.via_assistant(s.call.conversation_id),
            s.call,
            _EVENTS.get(s.status, CallEvent.REJECTED),
        )
        for s in settlements
    )
    db.session.commit()


def _changed(s: Settlement, status: ToolCallStatus, when: datetime) -> bool:
    """Whether the update above settled ``s``'s call (read in its transaction, before the
    rollback): the one that did not is the one that lost."""
    row = db.session.execute(
        select(ToolCall.status, ToolCall.decided_at).where(ToolCall.id == s.call.id)
    ).one_or_none()
    return row is not None and row.status == status and as_utc(row.decided_at) == as_utc(when)


def expire_overdue(principal: Principal, conversation_id: int) -> int:
    """Expire the conversation's proposals past their time (each once, with its event);
    how many expired."""
    overdue = db.session.scalars(
        select(ToolCall).where(
            ToolCall.conversation_id == conversation_id,
            ToolCall.status == ToolCallStatus.PROPOSED,
            ToolCall.created_at < cutoff(),
        )
    ).all()
    actor = principal.via_assistant(conversation_id)
    expired = 0
    for call in overdue:
        changed = db.session.execute(
            update(ToolCall)
            .where(ToolCall.id == call.id, ToolCall.status == ToolCallStatus.PROPOSED)
            .values(status=ToolCallStatus.EXPIRED, decided_at=utcnow())
            .execution_options(synchronize_session=False)
        ).rowcount
        if changed == 1:
            store.tool_call_event(actor, call, CallEvent.EXPIRED)
            expired += 1
    db.session.commit()
    return expired
