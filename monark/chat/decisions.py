"""A proposal settles exactly once: one conditional update, won while the call is PROPOSED
and the caller's precondition holds (how a write is decided: ``monark.approvals``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
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
from monark.extensions import db

ALREADY_DECIDED = "This action was already confirmed or rejected."


@dataclass(frozen=True)
class Settlement:
    """How one proposal settles, what must still hold (``holds``, SQL), a question's answer."""

    call: ToolCall
    status: ToolCallStatus
    reason: str | None = None
    skipped: bool = False
    holds: tuple[Any, ...] = ()
    result: Any = None


_EVENTS = {
    ToolCallStatus.EXECUTING: CallEvent.CONFIRMED,
    ToolCallStatus.SUCCEEDED: CallEvent.ANSWERED,
}
_SETTLED = ("status", "decided_by_id", "decided_at", "reject_reason", "skipped")


def settle(
    principal: Principal,
    settlements: Sequence[Settlement],
    lost: Callable[[ToolCall], Conflict] = lambda call: Conflict(ALREADY_DECIDED),
) -> None:
    """PROPOSED → each settlement's status, all or none, audited (``lost``: the error)."""
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
    """Whether the update above settled ``s``'s call (read before the rollback)."""
    row = db.session.execute(
        select(ToolCall.status, ToolCall.decided_at).where(ToolCall.id == s.call.id)
    ).one_or_none()
    return row is not None and row.status == status and as_utc(row.decided_at) == as_utc(when)
