"""A proposal past its time, for people: whether a card's call is past it, how long one
waits, in words, and what Confirm of an expired one answers. When one expires is chat's
(``chat.decisions``: ``cutoff``, ``expire_overdue``); this is what the host says of it."""

from __future__ import annotations

from monark.chat import decisions
from monark.chat.models import ToolCall, ToolCallStatus
from monark.core.errors import Conflict
from monark.core.models import as_utc
from monark.core.rbac import Principal


class ProposalExpired(Conflict):
    """The proposal waited longer than ``CHAT_APPROVAL_TTL``: it can no longer run."""


def is_expired(call: ToolCall) -> bool:
    """Whether a still-PROPOSED call is past its time."""
    made = as_utc(call.created_at)
    return call.status == ToolCallStatus.PROPOSED and made is not None and made < decisions.cutoff()


def ttl_text() -> str:
    """The waiting time in words (``7 days``, ``36 hours``, ``10 minutes``)."""
    seconds = decisions.ttl_seconds()
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
        decisions.expire_overdue(principal, call.conversation_id)
        raise ProposalExpired(expired_message())
