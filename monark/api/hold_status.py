"""How a key's held write ended, for the agent: ``GET /api/v1/approvals/{id}`` (the
``approvals_get`` tool). The hold and the decision are ``api.key_holds``."""

from __future__ import annotations

from sqlalchemy import select

from monark.api import cut_off
from monark.api import schemas as s
from monark.approvals import expiry
from monark.chat.models import Conversation, ConversationKind, ToolCall, ToolCallStatus
from monark.chat.turn import lease
from monark.core.errors import NotFound
from monark.core.models import User, as_utc
from monark.core.rbac import Principal
from monark.core.uow import unit_of_work
from monark.extensions import db

STATUS_TEXT = {
    "pending": "Waiting for a member's approval in Monark; nothing has changed yet.",
    "running": "Approved; it is running now.",
    "succeeded": "Approved and done: result holds the route's answer.",
    "failed": "Approved, but it failed when it ran: error says why; nothing was changed.",
    "rejected": "Rejected by a member in Monark; nothing was changed.",
    "expired": "Nobody decided in time, so it expired; nothing was changed.",
}


def _status(call: ToolCall) -> str:
    if call.status == ToolCallStatus.PROPOSED:
        return "expired" if expiry.is_expired(call) else "pending"
    return {
        ToolCallStatus.EXECUTING: "running",
        ToolCallStatus.SUCCEEDED: "succeeded",
        ToolCallStatus.FAILED: "failed",
        ToolCallStatus.REJECTED: "rejected",
    }.get(call.status, "expired")


def find_approval(principal: Principal, approval_id: int) -> ToolCall:
    """A held write the principal may read: the key's own, or for a member any of their
    org's; ``NotFound`` otherwise (another org's, another key's)."""
    row = db.session.execute(
        select(ToolCall, Conversation)
        .join(Conversation, Conversation.id == ToolCall.conversation_id)
        .where(
            ToolCall.id == approval_id,
            ToolCall.org_id == principal.org_id,
            Conversation.org_id == principal.org_id,
            Conversation.kind == ConversationKind.API,
        )
    ).one_or_none()
    if row is None:
        raise NotFound("No such approval.")
    call, conversation = row
    if principal.actor_kind == "api_key" and conversation.api_key_id != principal.actor_id:
        raise NotFound("No such approval.")
    return call


def _shows_result(principal: Principal, call: ToolCall) -> bool:
    """The route's answer goes to the key that asked and to the member who approved it
    (who could make the write themselves, see ``check_approver_could_make_it``); the rest
    of the org reads only how it ended: the answer may hold what only the key's role may
    see (a private record's values, say)."""
    if principal.actor_kind == "api_key":
        return True
    return principal.user_id is not None and principal.user_id == call.decided_by_id


def approval_out(principal: Principal, approval_id: int) -> s.ApprovalOut:
    """What ``approvals_get`` answers: the held write's status and, once decided, its
    result, error or rejection reason."""
    call = find_approval(principal, approval_id)
    if call.status == ToolCallStatus.EXECUTING or call.error == lease.INTERRUPTED_CALL:
        # Its decision may have died: settled in a unit that keeps what it writes (even
        # inside a read, such as the assistant's ``approvals_get``), and answered from
        # what it kept, so the answer never names a request that does not exist.
        with unit_of_work():
            cut_off.settle(principal.org_id, call.conversation_id)
            return _approval_answer(principal, find_approval(principal, approval_id))
    return _approval_answer(principal, call)


def _approval_answer(principal: Principal, call: ToolCall) -> s.ApprovalOut:
    status = _status(call)
    asked_again_as = cut_off.asked_again_as(call) if status == "failed" else None
    decided_by = (
        db.session.scalar(select(User.name).where(User.id == call.decided_by_id))
        if call.decided_by_id
        else None
    )
    return s.ApprovalOut(
        id=call.id,
        tool=call.name,
        status=status,  # type: ignore[arg-type]
        message=STATUS_TEXT[status],
        created_at=as_utc(call.created_at),  # type: ignore[arg-type]
        decided_at=as_utc(call.decided_at),
        decided_by=decided_by,
        result=call.result if status == "succeeded" and _shows_result(principal, call) else None,
        error=call.error if status == "failed" else None,
        reason=call.reject_reason if status == "rejected" else None,
        asked_again_as=asked_again_as,
    )
