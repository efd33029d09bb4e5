"""Writes decided by another member: hand a proposal over, the Approvals inbox, four eyes.

A requester may hand a proposed write to a member whose role holds the tool's permission
("Ask someone to approve"): one conditional update on the still-PROPOSED call stores who is
asked, by whom and when. That member finds it in their Approvals inbox, with an API key's
held writes (``ConversationKind.API``, see ``monark.api.approvals``), and decides it as
themselves: the write runs as the approver via the assistant, on the requester's request
(``Principal.on_request_of``), and the requester's thread continues the next time they
open it (``begin_continuation``). An org's four-eyes tools (``Org.chat_four_eyes``) can
only be confirmed by another member than the one who asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select, update

from monark.chat import decisions, lease, store, turns
from monark.chat.calls import run_tool_call
from monark.chat.gates import check_gates
from monark.chat.hooks import TurnHooks
from monark.chat.loop import TurnResult, advance_conversation
from monark.chat.models import (
    PENDING_STATUSES,
    Conversation,
    ConversationKind,
    Message,
    MessageRole,
    MessageStatus,
    ToolCall,
    ToolCallStatus,
)
from monark.chat.tools import ChatToolExecutor
from monark.chat.turns import Turn
from monark.core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from monark.core.events import record_event
from monark.core.models import Membership, Org, User, utcnow
from monark.core.rbac import ROLE_PERMISSIONS, Principal
from monark.extensions import db

NO_REQUEST = "No such approval request."
ALREADY_DECIDED = "This action was already confirmed or rejected."


def permission_of(executor: ChatToolExecutor, name: str) -> str | None:
    """The permission a tool's write needs (None for a tool nobody registered)."""
    return next((s.permission for s in executor.specs() if s.name == name), None)


def holders(org_id: int, permission: str) -> list[tuple[int, str]]:
    """The org's members whose role grants ``permission``, as ``(user_id, name)`` by name."""
    roles = [role for role, granted in ROLE_PERMISSIONS.items() if permission in granted]
    rows = db.session.execute(
        select(User.id, User.name)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.org_id == org_id, Membership.role.in_(roles))
        .order_by(User.name, User.id)
    )
    return [(row.id, row.name) for row in rows]


def approvers(principal: Principal, executor: ChatToolExecutor, name: str) -> list[tuple[int, str]]:
    """Whom the requester may ask to approve a call of tool ``name``: the other members
    who hold its permission."""
    permission = permission_of(executor, name)
    if permission is None:
        return []
    return [m for m in holders(principal.org_id, permission) if m[0] != principal.user_id]


def four_eyes_tools(org_id: int) -> list[str]:
    """The org's tools whose writes need another member's approval."""
    org = db.session.get(Org, org_id)
    return list(org.chat_four_eyes or []) if org is not None else []


def user_name(user_id: int | None) -> str | None:
    """A member's name, for "Waiting for <name>"."""
    return db.session.scalar(select(User.name).where(User.id == user_id)) if user_id else None


def awaits_another(principal: Principal, call: ToolCall) -> bool:
    """Whether the call is not the requester's to confirm: handed to someone else, or of
    a four-eyes tool."""
    handed = call.approver_id is not None and call.approver_id != principal.user_id
    return handed or call.name in four_eyes_tools(principal.org_id)


def check_may_confirm(principal: Principal, call: ToolCall) -> None:
    """Refuse the requester's own Confirm of a call handed to someone else, or of a
    four-eyes tool (``Forbidden``); rejecting (withdrawing) it stays theirs."""
    if call.approver_id is not None and call.approver_id != principal.user_id:
        raise Forbidden(
            f"Waiting for {user_name(call.approver_id) or 'another member'} to approve this: "
            "you can still reject it."
        )
    if call.name in four_eyes_tools(principal.org_id):
        raise Forbidden(
            f"{call.name} needs another member's approval in this organization (four eyes): "
            "ask someone to approve it."
        )


def check_may_edit(principal: Principal, call: ToolCall) -> None:
    """Refuse the requester's edit of a call handed to someone else (``Conflict``): the
    approver decides what they reviewed, so only they may change it now."""
    if call.approver_id is not None and call.approver_id != principal.user_id:
        raise Conflict(
            f"Waiting for {user_name(call.approver_id) or 'another member'} to approve this: "
            "only they may edit it now. Reject it to withdraw."
        )


def hand_over(
    principal: Principal,
    call_id: int,
    approver_id: int,
    executor: ChatToolExecutor,
    config: Mapping[str, Any],
) -> ToolCall:
    """Ask member ``approver_id`` to decide the requester's proposed write: one conditional
    update on the still-PROPOSED call, audited."""
    call = store.get_tool_call(principal, call_id)
    if not call.mutates or call.status != ToolCallStatus.PROPOSED:
        raise Conflict(ALREADY_DECIDED)
    if decisions.is_expired(call, config):
        decisions.expire_overdue(principal, call.conversation_id, config)
        raise decisions.ProposalExpired(decisions.expired_message(config))
    if approver_id not in {uid for uid, _ in approvers(principal, executor, call.name)}:
        raise ValidationFailed(
            "Choose a member who may approve this.",
            [{"field": "approver_id", "message": "Not a member who holds this permission."}],
        )
    changed = db.session.execute(
        update(ToolCall)
        .where(ToolCall.id == call.id, ToolCall.status == ToolCallStatus.PROPOSED)
        .values(approver_id=approver_id, handed_by_id=principal.user_id, handed_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if changed.rowcount != 1:
        db.session.rollback()
        raise Conflict(ALREADY_DECIDED)
    record_event(
        principal.via_assistant(call.conversation_id),
        "chat.tool_call.handed_over",
        "tool_call",
        call.id,
        {
            "conversation_id": call.conversation_id,
            "tool_call_id": call.id,
            "tool": call.name,
            "approver_id": approver_id,
        },
    )
    db.session.commit()
    db.session.refresh(call)
    return call


# ---- the inbox -------------------------------------------------------------------------------


def _requests(principal: Principal):
    """Calls of the org that may wait in someone's inbox: handed to this member, or an API
    key's held writes."""
    return (
        select(ToolCall, Conversation)
        .join(Conversation, Conversation.id == ToolCall.conversation_id)
        .where(
            ToolCall.org_id == principal.org_id,
            Conversation.org_id == principal.org_id,
            Conversation.archived.is_(False),
            (
                (ToolCall.approver_id == principal.user_id)
                & (Conversation.kind == ConversationKind.AI)
            )
            | (Conversation.kind == ConversationKind.API),
        )
    )


def _may_decide(principal: Principal, executor: ChatToolExecutor, call: ToolCall) -> bool:
    permission = permission_of(executor, call.name)
    return permission is not None and principal.can(permission)


def inbox(
    principal: Principal, executor: ChatToolExecutor, config: Mapping[str, Any]
) -> list[tuple[ToolCall, Conversation]]:
    """What waits for this member's decision, oldest first: handed to them, or held from an
    API key, and only what their role may approve."""
    rows = db.session.execute(
        _requests(principal)
        .where(
            ToolCall.status == ToolCallStatus.PROPOSED,
            ToolCall.created_at >= decisions.cutoff(config),
        )
        .order_by(ToolCall.id)
    ).all()
    return [(c, conv) for c, conv in rows if _may_decide(principal, executor, c)]


def inbox_count(principal: Principal, executor: ChatToolExecutor, config: Mapping[str, Any]) -> int:
    """How many requests wait for this member (the header's badge)."""
    if principal.user_id is None:
        return 0
    return len(inbox(principal, executor, config))


def get_request(
    principal: Principal, executor: ChatToolExecutor, call_id: int
) -> tuple[ToolCall, Conversation]:
    """One request of this member's inbox, decided or not: ``NotFound`` for another org's,
    or one handed to someone else; ``Forbidden`` when their role may not approve it."""
    row = db.session.execute(_requests(principal).where(ToolCall.id == call_id)).one_or_none()
    if row is None or not row[0].mutates:
        raise NotFound(NO_REQUEST)
    call, conversation = row
    if not _may_decide(principal, executor, call):
        raise Forbidden(
            f"Your role ({principal.role}) lacks {permission_of(executor, call.name)}: "
            "you cannot approve this."
        )
    return call, conversation


def approve(
    approver: Principal,
    call_id: int,
    confirm: bool,
    reason: str | None,
    executor: ChatToolExecutor,
    config: Mapping[str, Any],
    shown: str | None = None,
) -> ToolCall:
    """The approver's decision on a call handed to them: confirm runs the write as the
    approver via the assistant, on the requester's request; reject stores the reason.
    ``shown``: the token of the arguments the approver's card showed (an edit since, by
    the requester or in another tab, refuses the confirm: ``ProposalChanged``).
    Exactly once (the conditional update), holding the requester's conversation meanwhile
    (``Conflict`` while a turn runs there)."""
    call, conversation = get_request(approver, executor, call_id)
    if conversation.kind != ConversationKind.AI:
        raise NotFound(NO_REQUEST)
    actor = approver.on_request_of(call.handed_by_id or conversation.creator_id)
    conversation_id = conversation.id
    reason = " ".join((reason or "").split())[:500] or None
    if call.status != ToolCallStatus.PROPOSED:
        raise Conflict(ALREADY_DECIDED)
    turn_id = turns.claim(conversation_id, config)
    raised = True
    try:
        db.session.refresh(call)
        if call.status == ToolCallStatus.EXPIRED or decisions.is_expired(call, config):
            decisions.expire_overdue(actor, conversation_id, config)
            raise decisions.ProposalExpired(decisions.expired_message(config))
        checked_edit = call.edited_at
        if confirm and call.status == ToolCallStatus.PROPOSED:
            decisions.check_shown(call, shown)
            decisions.check_fresh(executor, actor, call)
        status = ToolCallStatus.EXECUTING if confirm else ToolCallStatus.REJECTED
        decisions.decide(actor, call, status, reason, **decisions.edit_guard(confirm, checked_edit))
        if confirm:
            run_tool_call(actor, call, executor, TurnHooks())
        raised = False
    finally:
        db.session.rollback()
        lease.release(conversation_id, turn_id, settle_first=raised)
    db.session.refresh(call)
    return call


# ---- the requester's thread, after someone else decided -------------------------------------


def needs_continuation(conversation_id: int) -> bool:
    """Whether the model has yet to hear of a decision another member took: the last step
    is a complete reply whose calls are all settled, one of them by its approver."""
    last = db.session.execute(
        select(Message.id, Message.role, Message.status)
        .where(Message.conversation_id == conversation_id, Message.role != MessageRole.SUMMARY)
        .order_by(Message.seq.desc())
        .limit(1)
    ).one_or_none()
    if last is None or (last.role, last.status) != (MessageRole.ASSISTANT, MessageStatus.COMPLETE):
        return False
    calls = db.session.execute(
        select(ToolCall.status, ToolCall.approver_id, ToolCall.decided_by_id).where(
            ToolCall.message_id == last.id
        )
    ).all()
    settled = all(c.status not in PENDING_STATUSES for c in calls)
    by_approver = any(c.approver_id is not None and c.decided_by_id == c.approver_id for c in calls)
    return bool(calls) and settled and by_approver


def begin_continuation(
    principal: Principal, conversation_id: int, config: Mapping[str, Any]
) -> Turn | None:
    """A turn that tells the model what another member decided, when it has yet to hear it
    (None otherwise, or while another turn holds the conversation)."""
    store.get_conversation(principal, conversation_id)
    if not check_gates(principal, config).open:
        return None
    if not needs_continuation(conversation_id):
        return None
    try:
        turn_id = turns.claim(conversation_id, config)
    except Conflict:
        return None
    if not needs_continuation(conversation_id):  # another tab started it first
        turns.release(conversation_id, turn_id)
        return None

    def work(hooks: TurnHooks) -> TurnResult:
        return advance_conversation(principal, conversation_id, hooks, config)

    return Turn(principal, conversation_id, turn_id, work)
