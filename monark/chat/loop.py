"""The agent loop: re-entrant, stateless between steps (each reloads the conversation, so
a turn resumes anywhere), with a confirm gate on every write."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import monark.core.metrics as metrics
from monark.chat import store
from monark.chat.calls import precheck, preview_of, run_tool_call, validate
from monark.chat.compaction import fit
from monark.chat.hooks import TurnHooks
from monark.chat.host import Charge
from monark.chat.llm.common import held
from monark.chat.llm.types import TOO_LONG, LlmRequest
from monark.chat.models import (
    CALL_NAME_MAX,
    PENDING_STATUSES,
    CallEvent,
    Conversation,
    Message,
    MessageRole,
    MessageStatus,
    ToolCall,
    ToolCallStatus,
)
from monark.chat.runtime import runtime
from monark.chat.setup import TurnSetup
from monark.chat.streaming import Step, stream_step
from monark.chat.transcript import build_llm_messages
from monark.core.bounds import clip
from monark.core.rbac import Principal
from monark.extensions import db


def step_limit_note(steps: int) -> str:
    """The note a turn leaves when it used its steps."""
    return f"I stopped after {steps} steps without finishing. Send a message to let me continue."


class TurnStatus(StrEnum):
    """How a turn ended (the ``done`` event of its stream says it too)."""

    DONE = "done"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    STEP_LIMIT = "step_limit"
    PAUSED = "paused"  # a budget ran out (the note says which, and who can lift it)
    ERROR = "error"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"  # its process died: a watcher finds it gone


@dataclass
class TurnResult:
    status: TurnStatus
    conversation_id: int
    error: str | None = None
    message_ids: list[int] = field(default_factory=list)


def _steps_this_turn(rows: Sequence[store.TranscriptMessage]) -> int:
    """Model steps since the user last spoke or decided (confirming never eats the steps)."""
    steps = 0
    for row in reversed(rows):
        if row.role == MessageRole.USER:
            break
        if row.role == MessageRole.ASSISTANT:
            if any(call.decided_by_user for call in row.tool_calls):
                break
            steps += 1
    return steps


def _stop_before_step(
    setup: TurnSetup,
    principal: Principal,
    conversation: Conversation,
    hooks: TurnHooks,
    result: TurnResult,
) -> list[store.TranscriptMessage] | None:
    """The transcript to send, or None when a call waits, spend paused it, or steps ran out."""
    rows = store.load_transcript(conversation.id, conversation.head_id)
    if any(c.status in PENDING_STATUSES for row in rows for c in row.tool_calls):
        result.status = TurnStatus.AWAITING_CONFIRMATION
        return None
    if setup.paused:
        return _end_with_note(
            principal, conversation, hooks, result, setup.paused, TurnStatus.PAUSED
        )
    if _steps_this_turn(rows) < setup.max_steps:
        return rows
    note = step_limit_note(setup.max_steps)
    return _end_with_note(principal, conversation, hooks, result, note, TurnStatus.STEP_LIMIT)


def _end_with_note(
    principal: Principal,
    conversation: Conversation,
    hooks: TurnHooks,
    result: TurnResult,
    text: str,
    status: TurnStatus,
) -> None:
    """End the turn with a note in the thread saying why."""
    note = store.add_message(
        conversation, principal, author_kind="system", role=MessageRole.NOTE, text=text
    )
    db.session.commit()
    hooks.on_message_saved(note)
    result.status = status
    result.message_ids.append(note.id)
    return None


def _open_reply(
    setup: TurnSetup, principal: Principal, conversation: Conversation, hooks: TurnHooks
) -> Message:
    """The reply this step streams into, stored empty first (a crash keeps what came), loaded."""
    message = store.add_message(
        conversation,
        principal.via_assistant(conversation.id),
        author_kind="agent",
        role=MessageRole.ASSISTANT,
        text="",
        status=MessageStatus.STREAMING,
        provider=setup.provider_name,
        model=setup.model,
    )
    store.end_transaction(message)
    hooks.on_message_saved(message)
    return message


def _request(
    setup: TurnSetup, conversation: Conversation, rows: list[store.TranscriptMessage]
) -> LlmRequest:
    """The step's request: the rows as the model sees them now."""
    return setup.request(build_llm_messages(rows, setup.specs, conversation.context_stub_before))


def _stream_reply(
    setup: TurnSetup,
    principal: Principal,
    conversation: Conversation,
    rows: list[store.TranscriptMessage],
    request: LlmRequest,
    message: Message,
    hooks: TurnHooks,
) -> Step:
    """Stream the step's reply; one refused as too long is made to fit once and sent again."""
    # No connection is held while the model streams (the reply stays loaded).
    store.end_transaction(message, commit=False)
    step = stream_step(setup.provider, request, hooks, setup.silence)
    if step.error is None or step.error.kind != TOO_LONG or step.text:
        return step
    fitted = fit(setup, principal, conversation, rows, hooks, force=True)
    if not fitted.changed:
        return step
    request = _request(setup, conversation, fitted.rows)
    store.end_transaction(message, commit=False)
    return stream_step(setup.provider, request, hooks, setup.silence)


def _call_id(asked: str) -> str:
    """The provider's call id within ``CALL_NAME_MAX``: a longer one keeps its start and a
    digest, so each call keeps an id of its own (results are paired with calls by it)."""
    if len(asked) <= CALL_NAME_MAX:
        return asked
    digest = hashlib.sha256(asked.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{asked[: CALL_NAME_MAX - 17]}_{digest}"


def _proposed_calls(
    setup: TurnSetup, actor: Principal, conversation: Conversation, requested: list
) -> list[ToolCall]:
    """Tool calls for what the model asked, with their previews and checks."""
    stored: list[ToolCall] = []
    for position, asked in enumerate(requested):
        spec = setup.specs.get(asked.name)
        call = ToolCall(
            org_id=conversation.org_id,
            conversation_id=conversation.id,
            position=position,
            provider_call_id=_call_id(asked.id),
            provider_meta=asked.meta,
            name=clip(asked.name, CALL_NAME_MAX),
            input=asked.input,
            # A tool nobody declared fails closed (``validate``), shown as a refused write.
            mutates=spec.mutates if spec is not None else True,
            status=ToolCallStatus.PROPOSED,
        )
        if refused := validate(spec, call):
            call.status, call.error = ToolCallStatus.FAILED, refused
            stored.append(call)
            continue
        # Before this step writes: they may read in-process, and SQLite has one writer.
        call.preview = preview_of(setup.executor, actor, call)
        if call.mutates:
            precheck(setup.executor, actor, call)
            call.allowed = runtime().gate.runs_at_once(actor, conversation, spec, call)
        stored.append(call)
    return stored


def _store_step(
    setup: TurnSetup,
    principal: Principal,
    conversation_id: int,
    message: Message,
    step: Step,
    hooks: TurnHooks,
) -> list[ToolCall]:
    """Finish the streamed message (text, status, usage) and store its calls."""
    text = "".join(step.text)
    if step.error:  # keep what streamed; with nothing at all it is an error
        status = MessageStatus.INCOMPLETE if text else MessageStatus.ERROR
    else:
        status = MessageStatus.INCOMPLETE if step.stopped else MessageStatus.COMPLETE
    actor = principal.via_assistant(conversation_id)
    # Calls of a broken-off reply are dropped: the model would see a call without result.
    requested = step.calls if status == MessageStatus.COMPLETE else []
    calls: list[ToolCall] = []
    if requested:  # their previews and the gate read the conversation as it is now
        conversation = store.get_conversation(principal, conversation_id)
        calls = _proposed_calls(setup, actor, conversation, requested)
    message.text = text
    message.status = status
    message.error = step.error.message if step.error else None
    message.stop_reason = step.stop_reason
    # Counted in this reply's transaction; a budget used up (by any instance) pauses the turn.
    setup.paused = runtime().meter.charge(
        Charge(message, step.usage, principal, setup.price, setup.budget)
    )
    for call in calls:
        call.message_id = message.id
        db.session.add(call)
    db.session.flush()
    for call in calls:
        if call.mutates or _asks(setup, call) or call.status == ToolCallStatus.FAILED:
            metrics.tool_call(call.name, call.status)  # a read is counted once it has run
            proposed = call.status == ToolCallStatus.PROPOSED
            what = CallEvent.PROPOSED if proposed else CallEvent.FAILED
            store.tool_call_event(actor, call, CallEvent.ALLOWED if call.allowed else what)
    store.end_transaction(message)
    hooks.on_message_saved(message)
    return calls


def _asks(setup: TurnSetup, call: ToolCall) -> bool:
    """Whether ``call`` asks the user a question (it waits for the answer, like a write)."""
    spec = setup.specs.get(call.name)
    return spec is not None and spec.asks_user


def _run_reads(
    setup: TurnSetup, principal: Principal, calls: list[ToolCall], hooks: TurnHooks
) -> None:
    """Run the step's reads and allowed writes now; other writes, and questions, wait."""
    for call in calls:
        waits = (call.mutates and not call.allowed) or _asks(setup, call)
        if waits or call.status != ToolCallStatus.PROPOSED:  # waits, or settled
            hooks.on_tool_call(call)
        elif hooks.should_stop():  # stopped: the reads left are not run, and say so
            call.status, call.error = ToolCallStatus.FAILED, "Stopped before it ran."
            db.session.commit()
            hooks.on_tool_call(call)
        else:
            call.status = ToolCallStatus.EXECUTING
            db.session.commit()
            hooks.on_tool_call(call)
            run_tool_call(principal, call, setup.executor, hooks)


def advance_conversation(
    principal: Principal,
    conversation_id: int,
    hooks: TurnHooks | None = None,
) -> TurnResult:
    """Run model steps until the turn ends, a write awaits confirmation, or a limit hits."""
    hooks = hooks or TurnHooks()
    setup = TurnSetup.load(principal)
    # The turn holds its adapter: dropped from the cache meanwhile, it closes at the end.
    started, outcome = time.monotonic(), "error"  # an exception is an error for /metrics
    try:
        with held(setup.provider):
            result = _run_steps(setup, principal, conversation_id, hooks)
        outcome = str(result.status)
        return result
    finally:
        seconds = time.monotonic() - started
        metrics.turn_ended(setup.provider_name, setup.model, outcome, seconds)


def _run_steps(
    setup: TurnSetup, principal: Principal, conversation_id: int, hooks: TurnHooks
) -> TurnResult:
    """The turn's steps, until it ends, a write awaits confirmation, or a limit hits."""
    result = TurnResult(TurnStatus.DONE, conversation_id)
    while True:
        if hooks.should_stop():  # Stop during a tool call: no new model step
            result.status = TurnStatus.STOPPED
            return result
        conversation = store.get_conversation(principal, conversation_id)
        rows = _stop_before_step(setup, principal, conversation, hooks, result)
        if rows is None:
            return result
        rows = fit(setup, principal, conversation, rows, hooks).rows
        request = _request(setup, conversation, rows)  # before the reply's commit expires it
        message = _open_reply(setup, principal, conversation, hooks)
        result.message_ids.append(message.id)
        step = _stream_reply(setup, principal, conversation, rows, request, message, hooks)
        calls = _store_step(setup, principal, conversation_id, message, step, hooks)
        if step.error:
            result.status, result.error = TurnStatus.ERROR, step.error.message
            return result
        if step.stopped:
            result.status = TurnStatus.STOPPED
            return result
        if not calls:
            return result
        _run_reads(setup, principal, calls, hooks)
        if any(c.status == ToolCallStatus.PROPOSED for c in calls):
            result.status = TurnStatus.AWAITING_CONFIRMATION
            return result
