"""An API key's held writes: held (202), decided in the Approvals inbox, their status.

A write through /api/v1 with such a key, or of a tool the org holds to four eyes through
any key, does not run. Its request is rehearsed first through the dispatcher
(``dispatch.rehearse``: the view itself, as the key, rolled back, so the route's own
models and checks answer a bad request at once and it is never held); then it is stored
with the stored-call machinery, as one message with its ``ToolCall`` (PROPOSED, the
flattened arguments the assistant's tools use, the route's own preview) in the key's
conversation of kind ``API``, and answered ``202 Accepted``. Members whose role holds the
route's permission see it in their Approvals inbox; a confirm runs it in-process as the
key (its ceiling applies again), recording who approved it; ``GET /api/v1/approvals/{id}``
(the ``approvals_get`` tool, ``api.hold_status``) tells the agent how it ended.
"""

from __future__ import annotations

from typing import Any

from flask import current_app, url_for
from sqlalchemy import select, update

from monark.api import held
from monark.api import schemas as s
from monark.api.dispatch import DispatchResponse, dispatch_route, rehearse
from monark.api.routes import V1_ROUTES
from monark.approvals import edits, inbox, notices
from monark.approvals.decision import Decision, Runner
from monark.approvals.decision import decide as approvals_decide
from monark.approvals.policy import ApprovalPolicy
from monark.approvals.shown import kept_preview
from monark.chat import store
from monark.chat.decisions import ALREADY_DECIDED
from monark.chat.executor import ChatToolExecutor, ToolOutcome
from monark.chat.hooks import TurnHooks
from monark.chat.loop import TurnResult, TurnStatus
from monark.chat.models import (
    CallEvent,
    Conversation,
    ConversationKind,
    ToolCall,
    ToolCallStatus,
)
from monark.chat.runtime import tool_executor
from monark.chat.turn import lease, run
from monark.chat.turn.run import Turn
from monark.core.errors import AppError, Conflict, Forbidden, NotFound
from monark.core.keys import key_principal
from monark.core.models import ApiKey
from monark.core.rbac import Principal
from monark.core.routes import RouteDescriptor
from monark.extensions import db

KEY_GONE = "The API key was revoked (or its creator left) before this was approved: nothing ran."
DECIDING = "Another of this key's writes is being approved right now: try again in a moment."


def writes_held(principal: Principal, tool: str) -> bool:
    """Whether this write of ``tool`` waits for approval: the principal is an API key
    marked "writes need approval", or the org holds the tool to four eyes (a key's write
    of such a tool is always held, for a member who did not create the key to decide)."""
    if principal.actor_kind != "api_key":
        return False
    if ApprovalPolicy.of(principal.org_id).four_eyes(tool):
        return True
    return bool(
        db.session.scalar(
            select(ApiKey.writes_need_approval).where(
                ApiKey.id == principal.actor_id, ApiKey.org_id == principal.org_id
            )
        )
    )


def hold_request(principal: Principal, route: RouteDescriptor) -> ToolCall:
    """Hold this request's write: rehearsed as the key first (``dispatch.rehearse``), so
    what the view would refuse (a bad value, a record the key cannot see, a missing
    permission) is refused now, with the view's own error, instead of being held for a
    member to approve something that cannot work; then stored with the arguments the view
    parsed."""
    db.session.rollback()  # hold no read transaction of the request's while the run writes
    rehearsal = rehearse(principal)
    if not rehearsal.ok:
        raise Refused(rehearsal.status, rehearsal.body)
    return hold(principal, route, rehearsal.arguments or {})


class Refused(AppError):
    """The dry run's error answer, passed on with the view's own status, code and details."""

    def __init__(self, status: int, body: Any):
        error = body.get("error") if isinstance(body, dict) else None
        error = error if isinstance(error, dict) else {}
        super().__init__(
            str(error.get("message") or f"The request failed with HTTP {status}."),
            list(error.get("details") or []),
        )
        self.status = status
        self.code = str(error.get("code") or "error")


def hold(principal: Principal, route: RouteDescriptor, arguments: dict[str, Any]) -> ToolCall:
    """Store the key's write as a pending approval, with the card its route draws."""
    try:
        drawn = route.preview(principal, arguments) if route.preview else None
    except Exception:  # a preview is a courtesy; the held write must still be stored
        current_app.logger.exception("previewing %s failed", route.name)
        drawn = None
    db.session.rollback()  # the preview's reads
    # Bounded as every stored card is: the inbox shows it within CHAT_CARD_MAX, and the
    # target's check at Confirm compares like with like.
    preview = kept_preview(drawn or {"headline": f"run {route.name}"}) or {}
    key = held.lock_key(principal.actor_id)
    conversation = held.key_conversation(principal, key)
    call = held.store_held(
        principal,
        conversation,
        f"{key.name} wants to {preview.get('headline')}",
        name=route.name,
        input=arguments,
        preview=preview,
    )
    notices.key_write_held(call, route.permission)
    db.session.commit()
    return call


def pending_answer(call: ToolCall) -> s.ApprovalPending:
    """The 202 answer: the approval's id, where to check it, and what it means."""
    status_url = url_for("api.approvals_get", approval_id=call.id, _external=True)
    return s.ApprovalPending(
        id=call.id,
        tool=call.name,
        status_url=status_url,
        message=(
            f"Not done yet: this write (approval {call.id}) waits for a member's approval in "
            "Monark's Approvals inbox, and nothing has changed until then. Check its outcome "
            f"later with approvals_get (approval_id {call.id}) or GET {status_url}; do not "
            "send the same write again."
        ),
    )


# ---- deciding one (the Approvals inbox) -----------------------------------------------------


class _AsKey:
    """Runs an approved write as the key (the executor's ``execute``), whoever decided it."""

    def __init__(self, executor: ChatToolExecutor, principal: Principal):
        self.executor = executor
        self.principal = principal

    def execute(self, actor: Principal, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        outcome = self.executor.execute(self.principal, name, arguments)
        outcome.undo = None  # a key's approved write keeps no undo (it lives on panel cards)
        return outcome


def check_approver_could_make_it(
    approver: Principal,
    key: Principal,
    call: ToolCall,
    arguments: dict[str, Any] | None = None,
) -> None:
    """``Forbidden`` when the key could make this write but the approver could not (a
    record only the key's role may see, say): approving it would change what they cannot
    see. Both are dry runs, rolled back; when the key's fails too, the write is left to
    fail when it runs, saying why. ``arguments``: the call's as an edit would leave them
    (default: as stored)."""
    route = next((r for r in V1_ROUTES if r.name == call.name), None)
    if route is None:
        return
    arguments = dict(call.input if arguments is None else arguments)
    refused = _dry_run(approver.via_assistant(call.conversation_id), route, arguments)
    if refused.ok or not _dry_run(key, route, arguments).ok:
        return
    raise Forbidden(
        "You could not make this change yourself, so you cannot approve it "
        f"({refused.error_message()}): a member who may make it can."
    )


def check_editor_could_make_it(
    editor: Principal,
    call: ToolCall,
    conversation: Conversation | None,
    edited: dict[str, Any] | None = None,
) -> None:
    """``Forbidden`` when the member editing a key's held write could not make it
    themselves, as it stands or as ``edited`` would leave it. The write runs as the key,
    so without this an edit could add what only the key's role may do (a private record
    made public by a member who cannot read it) for an approver to pass unnoticed."""
    if conversation is None or conversation.kind != ConversationKind.API:
        return
    key = key_principal(conversation.org_id, conversation.api_key_id or 0)
    if key is None:  # revoked: its held writes are rejected, and nothing runs as it
        return
    arguments = None if edited is None else edits.arguments_after(tool_executor(), call, edited)
    check_approver_could_make_it(editor, key, call, arguments)


def edit_request(
    editor: Principal, call: ToolCall, conversation: Conversation | None, edited: dict[str, Any]
) -> list[str]:
    """An inbox request's edit (``approvals.edits``): for a key's held write, only by a
    member who could make it themselves as edited."""
    check_editor_could_make_it(editor, call, conversation, edited)
    return edits.edit_call(tool_executor(), editor, call, edited)


def _dry_run(principal: Principal, route: RouteDescriptor, arguments: dict) -> DispatchResponse:
    """The write run as ``principal`` and rolled back, after the caller's reads are."""
    db.session.rollback()  # hold no read transaction of the request's while the run writes
    return dispatch_route(principal, route, arguments, dry_run=True)


def decide(
    approver: Principal,
    call_id: int,
    confirm: bool,
    reason: str | None,
    shown: str | None = None,
) -> ToolCall:
    """A member's decision on a key's held write, exactly once (``approvals.decide``, with
    a runner that runs it as the key, whose role caps it as when it asked, with the
    approver recorded); reject keeps the reason for the agent. ``shown``: the token of
    what the approver's card showed.

    It runs as a turn of the key's conversation (``chat.turn``): under its lease, renewed
    while the write runs, so a decision whose process dies is settled like a turn (see
    ``cut_off.settle``), and released, settling what it left, if it breaks off."""
    executor = tool_executor()
    call, conversation = inbox.get_request(approver, executor, call_id)
    if conversation.kind != ConversationKind.API:
        raise NotFound(inbox.NO_REQUEST)
    if call.status != ToolCallStatus.PROPOSED:
        raise Conflict(ALREADY_DECIDED)
    conversation_id = conversation.id
    try:
        turn_id = lease.claim(conversation_id)
    except Conflict:
        raise Conflict(DECIDING) from None
    decision = Decision(confirm, reason, {call_id: shown} if shown else {})

    def work(hooks: TurnHooks) -> TurnResult:
        _decide(approver, executor, call_id, decision, hooks)
        return TurnResult(TurnStatus.DONE, conversation_id)

    run.run_turn(Turn(approver, conversation_id, turn_id, work))
    return db.session.get(ToolCall, call_id, populate_existing=True)  # type: ignore[return-value]


def key_runner(approver: Principal, executor: ChatToolExecutor, key: Principal | None) -> Runner:
    """How a key's approved write runs: as the key, approved by the member, once the
    member could make it themselves (``check_approver_could_make_it``)."""
    if key is None:  # revoked since: decided, then failed, saying why
        return Runner(approver, executor)
    runner = _AsKey(executor, key.approved_by(approver.user_id))
    return Runner(
        approver,
        runner,  # type: ignore[arg-type]
        check=lambda call: check_approver_could_make_it(approver, key, call),
    )


def _decide(
    approver: Principal,
    executor: ChatToolExecutor,
    call_id: int,
    decision: Decision,
    hooks: TurnHooks,
) -> None:
    """The decision itself, under the conversation's lease."""
    call, conversation = inbox.get_request(approver, executor, call_id)
    db.session.refresh(call)
    key = key_principal(conversation.org_id, conversation.api_key_id or 0)
    runner = key_runner(approver, executor, key)
    if not approvals_decide(runner, [call], decision):
        return
    if key is None:
        db.session.execute(
            update(ToolCall)
            .where(ToolCall.id == call.id, ToolCall.status == ToolCallStatus.EXECUTING)
            .values(status=ToolCallStatus.FAILED, error=KEY_GONE)
            .execution_options(synchronize_session=False)
        )
        store.tool_call_event(approver.via_assistant(conversation.id), call, CallEvent.FAILED)
        db.session.commit()
    else:
        runner.run(call, hooks)
