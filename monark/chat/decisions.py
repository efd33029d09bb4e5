"""Decisions on proposed writes, each one atomic conditional update on the stored call.

A proposal is decided once, whichever tab, window or instance asks first: the update only
changes a call that is still PROPOSED, and whoever finds it changed gets ``Conflict``. A
proposal is also decided fresh: one nobody decided within ``CHAT_APPROVAL_TTL`` expires,
and one whose target changed since its card was drawn is drawn again and asked again.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update

from monark.chat import store
from monark.chat.calls import before_digest, preview_of
from monark.chat.edits import EDITED_SINCE, shows_current
from monark.chat.models import ToolCall, ToolCallStatus
from monark.chat.tools import ChatToolExecutor
from monark.core.errors import Conflict
from monark.core.models import as_utc, utcnow
from monark.core.rbac import Principal
from monark.extensions import db

DEFAULT_TTL = 7 * 86400.0


class ProposalExpired(Conflict):
    """The proposal waited longer than ``CHAT_APPROVAL_TTL``: it can no longer run."""


CHANGED_MESSAGE = (
    "This changed since the card was drawn, so nothing ran: check the before → after "
    "as it is now, and confirm again."
)


class ProposalChanged(Conflict):
    """The target changed since the card was drawn: the card is drawn again, to ask again
    (``call_ids``: the cards drawn again)."""

    def __init__(self, message: str = CHANGED_MESSAGE, call_ids: list[int] | None = None):
        super().__init__(message)
        self.call_ids = call_ids or []


def ttl_seconds(config: Mapping[str, Any]) -> float:
    """How long a proposal waits for a decision."""
    return float(config.get("CHAT_APPROVAL_TTL") or DEFAULT_TTL)


def cutoff(config: Mapping[str, Any]) -> datetime:
    """Proposals made before this have expired."""
    return utcnow() - timedelta(seconds=ttl_seconds(config))


def is_expired(call: ToolCall, config: Mapping[str, Any]) -> bool:
    """Whether a still-PROPOSED call is past its time."""
    made = as_utc(call.created_at)
    return call.status == ToolCallStatus.PROPOSED and made is not None and made < cutoff(config)


def ttl_text(config: Mapping[str, Any]) -> str:
    """The waiting time in words (``7 days``, ``36 hours``, ``10 minutes``)."""
    seconds = ttl_seconds(config)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if (seconds >= size and seconds % size == 0) or seconds >= 2 * size:
            count = round(seconds / size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    count = round(seconds)
    return f"{count} second{'s' if count != 1 else ''}"


def expired_message(config: Mapping[str, Any]) -> str:
    """What the user reads on Confirm of an expired proposal."""
    return (
        f"This proposal expired: it waited more than {ttl_text(config)} without a decision, "
        "so nothing was changed. Ask the assistant again if it is still wanted."
    )


_ANY_EDIT = object()


def _as_checked(edited_at: Any) -> list[Any]:
    """The condition that the call is still as checked: last edited at ``edited_at``
    (None: never), so an edit that lands after the checks makes the decision lose."""
    if edited_at is _ANY_EDIT:
        return []
    if edited_at is None:
        return [ToolCall.edited_at.is_(None)]
    return [ToolCall.edited_at == edited_at]


def _lost(call_id: int, lost_to_edit: bool) -> Conflict:
    """Why a conditional decision changed nothing: decided meanwhile, or (``lost_to_edit``)
    edited since it was checked, which asks again."""
    current = db.session.get(ToolCall, call_id, populate_existing=True)
    if lost_to_edit and current is not None and current.status == ToolCallStatus.PROPOSED:
        return ProposalChanged(EDITED_SINCE, call_ids=[call_id])
    return Conflict("This action was already confirmed or rejected.")


def decide(
    principal: Principal,
    call: ToolCall,
    status: ToolCallStatus,
    reason: str | None,
    skipped: bool = False,
    edited_at: Any = _ANY_EDIT,
) -> None:
    """PROPOSED → ``status`` as one conditional update: exactly one decision wins.
    ``edited_at``: when the call was last edited as the decision checked it (None: never);
    an edit since then makes it ``ProposalChanged``, nothing decided."""
    changed = db.session.execute(
        update(ToolCall)
        .where(
            ToolCall.id == call.id,
            ToolCall.status == ToolCallStatus.PROPOSED,
            *_as_checked(edited_at),
        )
        .values(
            status=status,
            decided_by_id=principal.user_id,
            decided_at=utcnow(),
            reject_reason=(reason or None) if status == ToolCallStatus.REJECTED else None,
            skipped=skipped,
        )
        .execution_options(synchronize_session=False)
    )
    if changed.rowcount != 1:
        db.session.rollback()
        raise _lost(call.id, edited_at is not _ANY_EDIT)
    db.session.refresh(call)
    store.tool_call_event(
        principal.via_assistant(call.conversation_id),
        call,
        "confirmed" if status == ToolCallStatus.EXECUTING else "rejected",
    )
    db.session.commit()


def check_shown(call: ToolCall, shown: str | None) -> None:
    """``ProposalChanged`` (nothing decided, the card drawn again) when the card that asks
    showed other arguments than the call has now (an edit elsewhere since)."""
    if not shows_current(call, shown):
        raise ProposalChanged(EDITED_SINCE, call_ids=[call.id])


def edit_guard(confirm: bool, checked_edit: Any) -> dict[str, Any]:
    """``decide``'s edit condition for a confirm: it holds only if no edit landed after the
    checks (a reject stands whatever was edited)."""
    return {"edited_at": checked_edit} if confirm else {}


def decide_group(
    principal: Principal,
    calls: list[ToolCall],
    selected: set[int],
    reason: str | None,
    edited_at: Mapping[int, Any] | None = None,
) -> list[ToolCall]:
    """One decision on a step's writes: the ``selected`` ones EXECUTING, the rest REJECTED,
    in one transaction of conditional updates, each audited. Every call must still be
    PROPOSED, or nothing is decided (``Conflict``); a selected one edited since the checks
    (``edited_at``: by call id, as checked) makes it ``ProposalChanged``. The confirmed
    calls, in order."""
    now = utcnow()
    for call in calls:
        confirm = call.id in selected
        checked = (edited_at or {}).get(call.id, _ANY_EDIT) if confirm else _ANY_EDIT
        changed = db.session.execute(
            update(ToolCall)
            .where(
                ToolCall.id == call.id,
                ToolCall.status == ToolCallStatus.PROPOSED,
                *_as_checked(checked),
            )
            .values(
                status=ToolCallStatus.EXECUTING if confirm else ToolCallStatus.REJECTED,
                decided_by_id=principal.user_id,
                decided_at=now,
                reject_reason=None if confirm else (reason or None),
            )
            .execution_options(synchronize_session=False)
        ).rowcount
        if changed != 1:
            db.session.rollback()
            lost = _lost(call.id, checked is not _ANY_EDIT)
            if isinstance(lost, ProposalChanged):
                raise lost
            raise Conflict("These actions were already confirmed or rejected.")
    actor = principal.via_assistant(calls[0].conversation_id) if calls else principal
    for call in calls:
        db.session.refresh(call)
        store.tool_call_event(
            actor, call, "confirmed" if call.status == ToolCallStatus.EXECUTING else "rejected"
        )
    db.session.commit()
    return [c for c in calls if c.status == ToolCallStatus.EXECUTING]


def expire_overdue(principal: Principal, conversation_id: int, config: Mapping[str, Any]) -> int:
    """Expire the conversation's proposals past their time (each once, with its event);
    how many expired."""
    overdue = db.session.scalars(
        select(ToolCall).where(
            ToolCall.conversation_id == conversation_id,
            ToolCall.status == ToolCallStatus.PROPOSED,
            ToolCall.created_at < cutoff(config),
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
            store.tool_call_event(actor, call, "expired")
            expired += 1
    db.session.commit()
    return expired


def redrawn(executor: ChatToolExecutor, principal: Principal, call: ToolCall) -> bool:
    """Read a write's target again, as the user, before it runs: when the card's before
    side no longer holds (its digest, of the whole values, not of what the card kept),
    store the card as it is now (the call stays PROPOSED, to be decided again) and say so."""
    if not call.mutates or not call.preview:
        return False
    shown = call.preview
    fresh = preview_of(executor, principal.via_assistant(call.conversation_id), call)
    if fresh is None or before_digest(fresh) == before_digest(shown):
        db.session.rollback()  # the preview's reads: leave nothing open
        return False
    changed = db.session.execute(
        update(ToolCall)
        .where(ToolCall.id == call.id, ToolCall.status == ToolCallStatus.PROPOSED)
        .values(preview=fresh)
        .execution_options(synchronize_session=False)
    ).rowcount
    if changed != 1:
        db.session.rollback()
        raise Conflict("This action was already confirmed or rejected.")
    store.tool_call_event(principal.via_assistant(call.conversation_id), call, "redrawn")
    db.session.commit()
    return True


def check_fresh(executor: ChatToolExecutor, principal: Principal, call: ToolCall) -> None:
    """``ProposalChanged`` when the call's card had to be drawn again (``redrawn``)."""
    if redrawn(executor, principal, call):
        raise ProposalChanged(call_ids=[call.id])
