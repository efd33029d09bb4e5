"""A proposal past its time (``CHAT_APPROVAL_TTL``): when one expires, expiring it (each
once, with its event), and what people read of it (how long one waits, in words, and what
Confirm of an expired one answers)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select, update

from monark.chat import store
from monark.chat.models import CallEvent, ToolCall, ToolCallStatus
from monark.core.errors import Conflict
from monark.core.models import as_utc, utcnow
from monark.core.rbac import Principal
from monark.core.settings import chat_settings
from monark.extensions import db


def ttl_seconds() -> float:
    """How long a proposal waits for a decision."""
    return chat_settings().approval_ttl


def cutoff() -> datetime:
    """Proposals made before this have expired."""
    return utcnow() - timedelta(seconds=ttl_seconds())


class ProposalExpired(Conflict):
    """The proposal waited longer than ``CHAT_APPROVAL_TTL``: it can no longer run."""


def is_expired(call: ToolCall) -> bool:
    """Whether a still-PROPOSED call is past its time."""
    made = as_utc(call.created_at)
    return call.status == ToolCallStatus.PROPOSED and made is not None and made < cutoff()


def ttl_text() -> str:
    """The waiting time in words (``7 days``, ``36 hours``, ``10 minutes``)."""
    seconds = ttl_seconds()
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if (seconds >= size and seconds % size == 0) or seconds >= 2 * size:
            count = round(seconds / size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    count = round(seconds)
    return f"{count} second{'s' if count != 1 else ''}"


def expired_message() -> str:
    """What the user reads on Confirm of an expired proposal."""
    return (
        f"This proposal expired: it waited more than {ttl_text()} without a decision, "
        "so nothing was changed. Ask the assistant again if it is still wanted."
    )


def refuse_if_expired(principal: Principal, call: ToolCall) -> None:
    """``ProposalExpired`` (the conversation's overdue proposals expired first) when
    ``call`` is past its time."""
    if is_expired(call):
        expire_overdue(principal, call.conversation_id)
        raise ProposalExpired(expired_message())


def expire_overdue(principal: Principal, conversation_id: int) -> int:
    """Expire the conversation's proposals past ``CHAT_APPROVAL_TTL``, each once; how many."""
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
