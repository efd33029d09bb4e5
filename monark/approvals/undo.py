"""Undo a done write from its stored before-state.

A confirmed or allowed write whose tool declares an undo hook keeps, with the call and in
the write's own unit of work, what undoing it takes (``ToolCall.undo``, see
``chat.calls.run_tool_call``): the reverse call, how to read the target again and the
target's state right after the write. Undo then:

1. refuses unless the call is a done write with an undo, not an undo itself, and not undone;
2. re-reads the target as the user (through the executor, so their visibility applies): if
   any field the write touched differs from its after-state, it refuses and says what changed;
3. stores the undo as a call of its own, ``undo_of_id`` = the call it undoes, on a note
   message of its own (the thread shows it as a small card where it happened; the original
   assistant message, which the model already read, is left as it was, so the cached
   prefix holds). The unique constraint on ``undo_of_id`` makes two undos of one call
   impossible across processes: the second insert fails, and answers 409;
4. runs the reverse call through the executor as the user, exactly like a confirmed write
   (the route's view checks the permission again, its events and audit apply), and audits
   ``chat.tool_call.undone`` naming the original call.

The note's ``content`` is what the model reads at its next step: a user-side line saying
the user undid the call (``chat.transcript``). An undo that fails gives its claim back
(``undo_of_id`` cleared) so it may be tried again, and the model reads nothing of it.

Undo of a ``records_delete`` creates the record again with its values and visibility through
``records_create``: records are hard-deleted, and the create route is the user's own path,
so the record comes back with a **new id** (ids are never reused).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from monark.approvals import allowances, own_calls
from monark.approvals.policy import ApprovalPolicy
from monark.approvals.shown import kept_preview
from monark.approvals.standalone import standalone_write
from monark.chat import store
from monark.chat.calls import run_tool_call
from monark.chat.executor import ChatToolExecutor
from monark.chat.hooks import TurnHooks
from monark.chat.models import CallEvent, MessageRole, ToolCall, ToolCallStatus
from monark.chat.runtime import tool_executor
from monark.chat.turn import lease
from monark.core.errors import Conflict, Forbidden
from monark.core.models import utcnow
from monark.core.rbac import Principal
from monark.extensions import db

_MISSING = object()


class AlreadyUndone(Conflict):
    """The call was undone already (or is being undone, here or on another instance)."""


class TargetChanged(Conflict):
    """The target changed since the write: undoing would overwrite someone's later change."""


class NothingToUndo(Conflict):
    """The call is no done write that keeps an undo."""


def undo_of(call_id: int) -> ToolCall | None:
    """The call that undoes ``call_id`` (done, or running), if any."""
    return db.session.scalar(select(ToolCall).where(ToolCall.undo_of_id == call_id))


def undone_ids(call_ids: list[int]) -> set[int]:
    """Which of these calls were undone."""
    if not call_ids:
        return set()
    return set(
        db.session.scalars(select(ToolCall.undo_of_id).where(ToolCall.undo_of_id.in_(call_ids)))
    )


def undoable(call: ToolCall) -> bool:
    """Whether a call is a done write that keeps what undoing it takes."""
    return (
        call.mutates
        and call.status == ToolCallStatus.SUCCEEDED
        and call.undo_of_id is None
        and isinstance(call.undo, dict)
        and isinstance(call.undo.get("reverse"), dict)
    )


def four_eyes_refusal(call: ToolCall, policy: ApprovalPolicy | None = None) -> str | None:
    """Why an undo may not run alone: its write is of a four-eyes tool of the org (the
    undo of an update is an update), which needs another member's approval (``policy``:
    the org's, when read already)."""
    reverse = call.undo.get("reverse") if isinstance(call.undo, dict) else None
    tool = str(reverse.get("tool")) if isinstance(reverse, dict) else None
    if not tool:
        return None
    if policy is None:
        policy = ApprovalPolicy.of(call.org_id)
    if policy.four_eyes(tool):
        return (
            f"This cannot be undone here: undoing it runs {tool}, which needs another "
            "member's approval in this organization (four eyes). Ask the assistant to put "
            "it back, and ask someone to approve that."
        )
    return None


def _at(data: Any, path: list[Any]) -> Any:
    for step in path:
        if isinstance(data, dict) and step in data:
            data = data[step]
        else:
            return _MISSING
    return data


def _shown(value: Any) -> str:
    return "nothing" if value is None or value is _MISSING else repr(value)


def changes_since(
    executor: ChatToolExecutor, actor: Principal, plan: Mapping[str, Any]
) -> list[str]:
    """What differs now from the target's state right after the write, read as the user
    (a target gone or out of their sight counts as a change)."""
    read = plan.get("read")
    if not isinstance(read, dict):
        return []
    outcome = executor.execute(actor, str(read.get("tool")), dict(read.get("arguments") or {}))
    db.session.rollback()  # the read: leave nothing open
    if not outcome.ok:
        return [f"it can no longer be read ({outcome.error or 'not found'})"]
    changed = []
    for expected in plan.get("after") or []:
        now = _at(outcome.result, list(expected.get("path") or []))
        if now != expected.get("value"):
            label = expected.get("label") or ".".join(map(str, expected.get("path") or []))
            changed.append(f"{label} is now {_shown(now)} (it was {_shown(expected.get('value'))})")
    return changed


def model_text(call: ToolCall) -> str:
    """What the model reads of an undo (in the next user turn)."""
    summary = (call.undo or {}).get("summary") or "the change was put back"
    return (
        f"[The user undid your earlier call {call.name} #{call.provider_call_id} "
        f"afterwards: {summary}. Treat that change as not made.]"
    )


def _refuse_unless_undoable(call: ToolCall) -> None:
    if call.undo_of_id is not None:
        raise NothingToUndo("This is an undo: it cannot be undone in turn.")
    if not undoable(call):
        raise NothingToUndo("There is nothing to undo for this action.")
    if undo_of(call.id) is not None:
        raise AlreadyUndone("This action was already undone.")


def undo_tool_call(principal: Principal, tool_call_id: int) -> ToolCall:
    """Undo one of the principal's done writes, exactly once; the undo's own call (SUCCEEDED,
    or FAILED saying why). ``AlreadyUndone``, ``TargetChanged``, ``NothingToUndo`` (409) and
    ``Forbidden`` refuse it before anything runs."""
    call = own_calls.get_tool_call(principal, tool_call_id)  # the principal's own conversation
    _refuse_unless_undoable(call)
    executor = tool_executor()
    reverse = call.undo["reverse"]
    specs = {s.name: s for s in executor.specs()}
    spec = specs.get(str(reverse.get("tool")))
    if spec is None:
        raise NothingToUndo("There is nothing to undo for this action.")
    if spec.permission and not principal.can(spec.permission):
        raise Forbidden(
            f"Your role ({principal.role}) lacks {spec.permission}: you cannot undo this."
        )
    if refusal := four_eyes_refusal(call):
        raise Forbidden(refusal)
    actor = principal.via_assistant(call.conversation_id)
    conversation_id = call.conversation_id
    turn_id = lease.claim(conversation_id)  # one thing at a time in a conversation
    try:
        # The undo's note makes the conversation active again: an idle one's allowances
        # end first, as at any claim (``chat.turn.start.claimed``), so an undo never revives them.
        allowances.lapse_idle(principal, conversation_id)
        if changed := changes_since(executor, actor, call.undo):
            raise TargetChanged(
                "This cannot be undone: it changed since — " + "; ".join(changed) + "."
            )
        undo_call = _store_undo(principal, actor, call, reverse)
        run_tool_call(principal, undo_call, executor, TurnHooks())
        if undo_call.status != ToolCallStatus.SUCCEEDED:
            _give_back(undo_call)
        else:
            store.tool_call_event(actor, call, CallEvent.UNDONE)
            db.session.commit()
    finally:
        lease.give_back(conversation_id, turn_id)
    db.session.refresh(undo_call)
    return undo_call


def _store_undo(
    principal: Principal, actor: Principal, call: ToolCall, reverse: Mapping[str, Any]
) -> ToolCall:
    """The undo's note and its call (EXECUTING), committed: the unique ``undo_of_id``
    lets only one undo of a call ever be stored."""
    conversation = store.get_conversation(principal, call.conversation_id)
    summary = call.undo.get("summary") or "put it back"
    headline = (call.preview or {}).get("headline") or call.name
    note = store.add_message(
        conversation,
        principal,
        author_kind="user",
        role=MessageRole.NOTE,
        text=f"Undid: {headline}",
        content=[{"type": "text", "text": model_text(call), "undo_of": call.id}],
    )
    undo_call = standalone_write(
        note,
        f"undo-{call.id}",
        name=str(reverse.get("tool")),
        input=dict(reverse.get("arguments") or {}),
        status=ToolCallStatus.EXECUTING,
        decided_by_id=principal.user_id,
        decided_at=utcnow(),
        preview=kept_preview({"headline": f"undo: {summary}"}),
        undo_of_id=call.id,
    )
    try:
        db.session.flush()
    except IntegrityError:
        db.session.rollback()
        raise AlreadyUndone("This action was already undone.") from None
    store.tool_call_event(actor, undo_call, CallEvent.UNDO_STARTED)
    try:
        db.session.commit()
    except IntegrityError:
        db.session.rollback()
        raise AlreadyUndone("This action was already undone.") from None
    return undo_call


def _give_back(undo_call: ToolCall) -> None:
    """A failed undo keeps its card but lets go of the call it meant to undo (so it may be
    tried again), and the model reads nothing of it."""
    db.session.execute(
        update(ToolCall)
        .where(ToolCall.id == undo_call.id)
        .values(undo_of_id=None, undo={"failed_undo_of": undo_call.undo_of_id})
        .execution_options(synchronize_session=False)
    )
    note = undo_call.message
    note.content = []
    note.text = "Undo failed: nothing was changed."
    db.session.commit()
