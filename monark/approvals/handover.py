"""Writes decided by another member: hand a proposal over, and the requester's continuation.

A requester may hand a proposed write to a member whose role holds the tool's permission
and who sees its target as the card shows it ("Ask someone to approve"): one conditional
update on the still-PROPOSED, not yet handed call stores who is asked, by whom and when.
That member finds it in their Approvals inbox (``approvals.inbox``) and decides it as
themselves (``decision.decide``): the write runs as the approver via the assistant, on the
requester's request (``Principal.on_request_of``), and the requester's thread continues
(``begin_continuation``). Under four eyes, an approver who edits the call hands it back:
whoever last set its arguments never confirms it.
"""

from __future__ import annotations

from sqlalchemy import select, update

from monark.approvals import notices, own_calls
from monark.approvals.decision import Decision, Runner, decide, user_name
from monark.approvals.expiry import refuse_if_expired
from monark.approvals.inbox import NO_REQUEST, get_request, holders, permission_of
from monark.approvals.shown import before_digest
from monark.chat import decisions, store
from monark.chat.calls import preview_of
from monark.chat.executor import ChatToolExecutor
from monark.chat.hooks import TurnHooks
from monark.chat.loop import TurnResult, TurnStatus, advance_conversation
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
from monark.chat.runtime import runtime
from monark.chat.turn import lease, run
from monark.chat.turn.run import Turn
from monark.core.errors import Conflict, NotFound, ValidationFailed
from monark.core.events import record_event
from monark.core.models import utcnow
from monark.core.rbac import Principal
from monark.extensions import db

ALREADY_DECIDED = decisions.ALREADY_DECIDED


def approvers(
    executor: ChatToolExecutor,
    call: ToolCall,
    conversation: Conversation | None = None,
    holding: list[tuple[int, str, str]] | None = None,
) -> list[tuple[int, str]]:
    """Whom the requester may ask to approve ``call``: the other members who hold its
    tool's permission and see its target as its card shows it (a private record only the
    requester may read is no one else's to approve). ``conversation`` (the call's) and
    ``holding`` (``holders`` of its permission) spare their reads when already loaded."""
    permission = permission_of(executor, call.name)
    if permission is None:
        return []
    if conversation is not None:
        requester = conversation.creator_id
    else:
        requester = db.session.scalar(
            select(Conversation.creator_id).where(Conversation.id == call.conversation_id)
        )
    if holding is None:
        holding = holders(call.org_id, permission)
    members = [m for m in holding if m[0] != requester]
    if not call.preview:  # no card to compare with: the permission decides alone
        return [(uid, name) for uid, name, _ in members]
    shown = before_digest(call.preview)
    return [
        (uid, name)
        for uid, name, role in members
        if _sees_as_shown(executor, Principal.for_user(uid, call.org_id, role), call, shown)
    ]


def _sees_as_shown(
    executor: ChatToolExecutor, member: Principal, call: ToolCall, shown: str
) -> bool:
    """Whether ``member`` reads the call's target as its card shows it."""
    drawn = preview_of(executor, member.via_assistant(call.conversation_id), call)
    db.session.rollback()  # the preview's reads
    return drawn is not None and before_digest(drawn) == shown


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
) -> ToolCall:
    """Ask member ``approver_id`` to decide the requester's proposed write: one conditional
    update on the still-PROPOSED call that nobody else was asked to decide (one handed to
    a member who can no longer approve it may be handed again), audited."""
    call = own_calls.get_tool_call(principal, call_id)
    if not call.mutates or call.status != ToolCallStatus.PROPOSED:
        raise Conflict(ALREADY_DECIDED)
    refuse_if_expired(principal, call)
    offered = {uid for uid, _ in approvers(executor, call)} - {principal.user_id}
    if call.approver_id is not None and call.approver_id in offered | {approver_id}:
        raise Conflict(
            f"This was already handed to {user_name(call.approver_id) or 'another member'}."
        )
    if approver_id not in offered:
        raise ValidationFailed(
            "Choose a member who may approve this.",
            [{"field": "approver_id", "message": "Not a member who holds this permission."}],
        )
    as_read = (
        ToolCall.approver_id.is_(None)
        if call.approver_id is None
        else ToolCall.approver_id == call.approver_id
    )
    changed = db.session.execute(
        update(ToolCall)
        .where(ToolCall.id == call.id, ToolCall.status == ToolCallStatus.PROPOSED, as_read)
        .values(approver_id=approver_id, handed_by_id=principal.user_id, handed_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if changed.rowcount != 1:  # lost a race: say to what, as it stands now
        db.session.rollback()
        now = own_calls.get_tool_call(principal, call_id)
        if now.status == ToolCallStatus.PROPOSED and now.approver_id is not None:
            who = user_name(now.approver_id) or "another member"
            raise Conflict(f"This was already handed to {who}.")
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
    notices.handed_to(call, approver_id, principal.user_id)
    db.session.commit()
    db.session.refresh(call)
    return call


def hand_back(principal: Principal, call: ToolCall) -> None:
    """Four eyes: the approver who edited a call handed to them gives it back to the one
    who asked (in the edit's own transaction), who may now confirm what they set."""
    db.session.execute(
        update(ToolCall)
        .where(ToolCall.id == call.id, ToolCall.approver_id == principal.user_id)
        .values(approver_id=None, handed_at=None)
        .execution_options(synchronize_session=False)
    )
    record_event(
        principal.via_assistant(call.conversation_id),
        "chat.tool_call.handed_back",
        "tool_call",
        call.id,
        {"conversation_id": call.conversation_id, "tool_call_id": call.id, "tool": call.name},
    )


def approve(
    approver: Principal,
    call_id: int,
    decision: Decision,
    executor: ChatToolExecutor,
) -> ToolCall:
    """The approver's decision on a call handed to them (``decide``): confirm runs the
    write as the approver via the assistant, on the requester's request; reject stores
    the reason. It runs as a turn of the requester's conversation (``Conflict`` while
    another holds it), so their open panel follows it on the turn's progress log."""
    call, conversation = get_request(approver, executor, call_id)
    if conversation.kind != ConversationKind.AI:
        raise NotFound(NO_REQUEST)
    if call.status != ToolCallStatus.PROPOSED:
        raise Conflict(ALREADY_DECIDED)
    runner = Runner(approver.on_request_of(call.handed_by_id or conversation.creator_id), executor)
    conversation_id = conversation.id
    turn_id = lease.claim(conversation_id)

    def work(hooks: TurnHooks) -> TurnResult:
        decided = get_request(approver, executor, call_id)[0]
        db.session.refresh(decided)
        for confirmed in decide(runner, [decided], decision):
            hooks.on_tool_call(confirmed)
            runner.run(confirmed, hooks)
        hooks.on_tool_call(decided)
        return TurnResult(TurnStatus.DONE, conversation_id)

    run.run_turn(Turn(runner.actor, conversation_id, turn_id, work))
    return db.session.get(ToolCall, call_id, populate_existing=True)  # type: ignore[return-value]


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


def begin_continuation(principal: Principal, conversation_id: int) -> Turn | None:
    """A turn that tells the model what another member decided, when it has yet to hear it
    (None otherwise, or while another turn holds the conversation)."""
    store.get_conversation(principal, conversation_id)
    if not runtime().access.check(principal).open:
        return None
    if not needs_continuation(conversation_id):
        return None
    try:
        turn_id = lease.claim(conversation_id)
    except Conflict:
        return None
    if not needs_continuation(conversation_id):  # another tab started it first
        lease.give_back(conversation_id, turn_id)
        return None

    def work(hooks: TurnHooks) -> TurnResult:
        return advance_conversation(principal, conversation_id, hooks)

    return Turn(principal, conversation_id, turn_id, work)
