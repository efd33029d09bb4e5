"""The agent loop: re-entrant, stateless between steps, with a confirm gate on every write.

Each step reloads the conversation from the database, so a turn can resume after a
confirmation, a restart or on another instance with nothing kept in memory.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from flask import current_app
from sqlalchemy import update

from monark.chat import lease, store
from monark.chat.gates import assistant_name
from monark.chat.hooks import TurnHooks
from monark.chat.llm.types import (
    Block,
    LlmMessage,
    LlmProvider,
    LlmRequest,
    ProviderError,
    StopReason,
    TextBlock,
    TextDelta,
    ToolCallRequested,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
    UsageReport,
)
from monark.chat.models import (
    Conversation,
    Message,
    MessageRole,
    MessageStatus,
    ToolCall,
    ToolCallStatus,
)
from monark.chat.prompt import system_prompt
from monark.chat.runtime import llm_provider, tool_executor
from monark.chat.tools import ChatToolExecutor, ToolOutcome, ToolSpec
from monark.core.models import Org, utcnow
from monark.core.rbac import Principal
from monark.core.text import scrub, storable
from monark.core.uow import unit_of_work
from monark.extensions import db

MAX_STEPS = 8
RESULT_LIMIT = 20_000
REJECTED_TEXT = "The user rejected this action; it was not carried out."
STEP_LIMIT_NOTE = (
    f"I stopped after {MAX_STEPS} steps without finishing. Send a message to let me continue."
)


class TurnStatus(StrEnum):
    """How a turn ended (the ``done`` event of its stream says it too)."""

    DONE = "done"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    STEP_LIMIT = "step_limit"
    ERROR = "error"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"  # its process died: a watcher finds it gone


@dataclass
class TurnResult:
    status: TurnStatus
    conversation_id: int
    error: str | None = None
    message_ids: list[int] = field(default_factory=list)


# ---- what the model sees -----------------------------------------------------------------


def _result_text(call: ToolCall | store.TranscriptCall) -> tuple[str, bool]:
    if call.status == ToolCallStatus.SUCCEEDED:
        text = scrub(json.dumps(call.result, ensure_ascii=False, sort_keys=True, default=str))
        if len(text) > RESULT_LIMIT:
            text = text[:RESULT_LIMIT] + " …(truncated)"
        return text, False
    if call.status == ToolCallStatus.REJECTED:
        reason = f" Their reason: {call.reject_reason}" if call.reject_reason else ""
        return REJECTED_TEXT + reason, True
    return f"Error: {call.error or 'the tool failed.'}", True


def build_llm_messages(rows: Sequence[Message | store.TranscriptMessage]) -> list[LlmMessage]:
    """Map stored rows to the model's message list.

    An assistant message with tool calls is followed by a user message carrying exactly
    the matching tool_result blocks; consecutive same-role turns are merged; notes and
    empty messages are left out.
    """
    turns: list[tuple[str, list[Block]]] = []

    def push(role: str, blocks: list[Block]) -> None:
        if not blocks:
            return
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, list(blocks)))

    for row in rows:
        if row.role == MessageRole.USER:
            blocks: list[Block] = [TextBlock(b["text"]) for b in row.content if b.get("text")]
            blocks.append(TextBlock(row.text))
            push("user", blocks)
        elif row.role == MessageRole.ASSISTANT:
            calls = row.tool_calls if row.status == MessageStatus.COMPLETE else []
            # Trailing whitespace is trimmed: the API refuses it at the end of a final
            # assistant turn (a stopped reply that a retry continues).
            blocks = [TextBlock(row.text.rstrip())] if row.text.strip() else []
            blocks += [ToolUseBlock(c.provider_call_id, c.name, c.input) for c in calls]
            push("assistant", blocks)
            results = []
            for call in calls:
                text, is_error = _result_text(call)
                results.append(ToolResultBlock(call.provider_call_id, text, is_error))
            push("user", results)
    return [LlmMessage(role, tuple(blocks)) for role, blocks in turns]  # type: ignore[arg-type]


def tool_definitions(specs: list[ToolSpec]) -> list[ToolDefinition]:
    """Tool definitions in a stable order, so the cached prefix stays byte-identical."""
    return [
        ToolDefinition(s.name, s.description, s.input_schema)
        for s in sorted(specs, key=lambda s: s.name)
    ]


# ---- running tools -----------------------------------------------------------------------


def _outcome_values(outcome: ToolOutcome, duration_ms: int) -> dict[str, Any]:
    if outcome.ok:
        return {
            "status": ToolCallStatus.SUCCEEDED,
            "result": storable(outcome.result),
            "error": None,
            "duration_ms": duration_ms,
        }
    return {
        "status": ToolCallStatus.FAILED,
        "error": storable(outcome.error or "The tool failed."),
        "result": {"details": storable(outcome.details)} if outcome.details else None,
        "duration_ms": duration_ms,
    }


def _store_outcome(actor: Principal, call: ToolCall, values: dict[str, Any]) -> bool:
    """The call's status and result, and its event, in the current session's transaction.
    False when the call is no longer EXECUTING (a turn that took the conversation over
    settled it meanwhile): then nothing may be kept."""
    changed = db.session.execute(
        update(ToolCall)
        .where(ToolCall.id == call.id, ToolCall.status == ToolCallStatus.EXECUTING)
        .values(**values)
        .execution_options(synchronize_session=False)
    ).rowcount
    if changed != 1:
        return False
    store.tool_call_event(
        actor, call, "succeeded" if values["status"] == ToolCallStatus.SUCCEEDED else "failed"
    )
    return True


def run_tool_call(
    principal: Principal, call: ToolCall, executor: ChatToolExecutor, hooks: TurnHooks
) -> None:
    """Run one call as the user via the assistant; store SUCCEEDED or FAILED and commit.

    A write's SUCCEEDED is stored in the tool's own transaction: either both are kept or
    neither, so a call a crash leaves EXECUTING changed nothing (see ``lease.settle``).
    """
    actor = principal.via_assistant(call.conversation_id)
    db.session.commit()  # nothing of ours pending while the tool's own transaction runs
    started = time.perf_counter()
    stored = False
    try:
        # The tool's writes are kept only if it succeeds (the unit rolls back otherwise).
        with unit_of_work(read_only=not call.mutates) as unit:
            outcome = executor.execute(actor, call.name, dict(call.input))
            if not outcome.ok:
                unit.fail()
            elif call.mutates:
                duration = int((time.perf_counter() - started) * 1000)
                stored = _store_outcome(actor, call, _outcome_values(outcome, duration))
                if not stored:  # settled as interrupted meanwhile: keep its word, undo
                    unit.fail()
                    outcome = ToolOutcome(ok=False, error=lease.INTERRUPTED_CALL)
    except Exception as err:  # the tool boundary: a failure becomes a result the model sees
        current_app.logger.exception("tool %s failed", call.name)
        stored = False
        # The exception's text may hold SQL or internals: it goes to the log, not the model.
        outcome = ToolOutcome(
            ok=False,
            error=f"The tool failed unexpectedly ({type(err).__name__}); the server logged it.",
        )
    if not stored:
        duration = int((time.perf_counter() - started) * 1000)
        _store_outcome(actor, call, _outcome_values(outcome, duration))
        db.session.commit()
    db.session.refresh(call)
    hooks.on_tool_call(call)


def _preview(executor: ChatToolExecutor, actor: Principal, call: ToolCall) -> dict | None:
    try:
        return storable(executor.preview(actor, call.name, dict(call.input)))
    except Exception:  # a preview is a courtesy; the call itself must still be stored
        current_app.logger.exception("previewing %s failed", call.name)
        return None


def _precheck(executor: ChatToolExecutor, actor: Principal, call: ToolCall) -> None:
    try:
        outcome = executor.precheck(actor, call.name, dict(call.input))
    except Exception:  # a check that breaks must not block the call: the user still decides
        current_app.logger.exception("prechecking %s failed", call.name)
        return
    if outcome is not None and not outcome.ok:
        call.status = ToolCallStatus.FAILED
        call.error = storable(outcome.error or "The arguments are invalid.")
        call.result = {"details": storable(outcome.details)} if outcome.details else None


# ---- streaming one step ------------------------------------------------------------------

STOP_POLL_SECONDS = 0.2
_END = object()


@dataclass
class _Step:
    text: list[str] = field(default_factory=list)
    calls: list[ToolCallRequested] = field(default_factory=list)
    usage: UsageReport = field(default_factory=UsageReport)
    stop_reason: str | None = None
    error: ProviderError | None = None
    stopped: bool = False


def _pump(provider: LlmProvider, request: LlmRequest) -> queue.SimpleQueue:
    """Read the provider in a thread of its own, so that a provider that hangs can neither
    hold the turn past Stop nor past its silence limit: the turn stops waiting, and the
    reader ends when the provider answers or its own timeout fires."""
    events: queue.SimpleQueue = queue.SimpleQueue()

    def read() -> None:
        try:
            for event in provider.stream(request):
                events.put(event)
                if request.stop.is_set():
                    break
        except Exception as err:  # providers report errors as events; this one raised
            events.put(ProviderError(f"The model provider failed ({type(err).__name__})."))
        finally:
            events.put(_END)

    threading.Thread(target=read, name="llm-stream", daemon=True).start()
    return events


def _drain(events: queue.SimpleQueue, first: Any) -> list[Any]:
    """``first`` and whatever else is already waiting (one batch, no waiting)."""
    batch = [first]
    while True:
        try:
            batch.append(events.get_nowait())
        except queue.Empty:
            return batch


def _apply(step: _Step, event: Any) -> str:
    """Fold one provider event into the step; returns its text (cleaned), if any."""
    if isinstance(event, TextDelta):
        text = storable(event.text)
        step.text.append(text)
        return text
    if isinstance(event, ToolCallRequested):
        step.calls.append(
            ToolCallRequested(storable(event.id), storable(event.name), storable(event.input))
        )
    elif isinstance(event, UsageReport):
        step.usage = event
    elif isinstance(event, StopReason):
        step.stop_reason = storable(event.reason)
        step.stopped = event.reason == "stopped"
    elif isinstance(event, ProviderError):
        step.error = ProviderError(storable(event.message), event.kind)
    return ""


def _stream_step(
    provider: LlmProvider, request: LlmRequest, hooks: TurnHooks, silence: float
) -> _Step:
    """Stream one model step; text goes to the hooks as it comes, batched when it comes
    faster than the turn passes it on. Stops on Stop, and after ``silence`` seconds with
    nothing from the provider."""
    step = _Step()
    events = _pump(provider, request)
    last = time.monotonic()
    while True:
        try:
            first = events.get(timeout=STOP_POLL_SECONDS)
        except queue.Empty:
            first = None
        if hooks.should_stop() and not step.stopped:
            request.stop.set()
            step.stopped = True
            return step
        if first is None:
            if time.monotonic() - last > silence:
                request.stop.set()
                step.error = ProviderError(
                    f"The model sent nothing for {silence:g} seconds; it may be overloaded."
                )
                return step
            continue
        last = time.monotonic()
        text: list[str] = []
        ended = False
        for event in _drain(events, first):
            if event is _END:
                ended = True
                break
            text.append(_apply(step, event))
        joined = "".join(text)
        if joined:
            hooks.on_text_delta(joined)
        if ended:
            return step


# ---- the loop ----------------------------------------------------------------------------


def _steps_this_turn(rows: Sequence[Message | store.TranscriptMessage]) -> int:
    steps = 0
    for row in reversed(rows):
        if row.role == MessageRole.USER:
            break
        if row.role == MessageRole.ASSISTANT:
            steps += 1
    return steps


@dataclass
class _Setup:
    """What every step of a turn uses: the tools, the system prompt, the limits."""

    executor: ChatToolExecutor
    specs: dict[str, ToolSpec]
    tools: list[ToolDefinition]
    system: str
    model: str
    max_tokens: int
    silence: float

    @classmethod
    def load(cls, principal: Principal, config: Mapping[str, Any]) -> _Setup:
        executor = tool_executor()
        specs = {s.name: s for s in executor.specs()}
        org = db.session.get(Org, principal.org_id)
        return cls(
            executor=executor,
            specs=specs,
            tools=tool_definitions(list(specs.values())),
            system=system_prompt(assistant_name(org, config)),
            model=config.get("CHAT_LLM_MODEL", ""),
            max_tokens=int(config.get("CHAT_LLM_MAX_TOKENS", 4096)),
            silence=float(config.get("CHAT_LLM_TIMEOUT", 60)),
        )


def _stop_before_step(
    principal: Principal, conversation: Conversation, hooks: TurnHooks, result: TurnResult
) -> list[store.TranscriptMessage] | None:
    """The transcript to send, or None when the turn must stop first: a call still waits
    for the user, or the turn used its steps (a note says so)."""
    if store.pending_calls(conversation.id):
        result.status = TurnStatus.AWAITING_CONFIRMATION
        return None
    rows = store.load_transcript(conversation.id)
    if _steps_this_turn(rows) < MAX_STEPS:
        return rows
    note = store.add_message(
        conversation, principal, author_kind="system", role="note", text=STEP_LIMIT_NOTE
    )
    db.session.commit()
    hooks.on_message_saved(note)
    result.status = TurnStatus.STEP_LIMIT
    result.message_ids.append(note.id)
    return None


def _open_reply(
    principal: Principal, conversation: Conversation, model: str, hooks: TurnHooks
) -> Message:
    """The assistant message this step streams into, stored (empty) before the first token:
    its text is saved as it streams, so a crash keeps what came."""
    message = store.add_message(
        conversation,
        principal.via_assistant(conversation.id),
        author_kind="agent",
        role=MessageRole.ASSISTANT,
        text="",
        status=MessageStatus.STREAMING,
        model=model,
    )
    db.session.commit()
    hooks.on_message_saved(message)
    return message


def _proposed_calls(
    setup: _Setup, actor: Principal, conversation: Conversation, requested: list
) -> list[ToolCall]:
    """Tool calls for what the model asked, with their previews and checks."""
    stored: list[ToolCall] = []
    for position, asked in enumerate(requested):
        spec = setup.specs.get(asked.name)
        call = ToolCall(
            org_id=conversation.org_id,
            conversation_id=conversation.id,
            position=position,
            provider_call_id=asked.id,
            name=asked.name,
            input=asked.input,
            # A tool nobody registered fails safe: it is treated as a write.
            mutates=spec.mutates if spec is not None else True,
            status=ToolCallStatus.PROPOSED,
        )
        # Previews and checks may read through the dispatcher, so they run before this
        # step writes anything (SQLite allows one writer at a time).
        call.preview = _preview(setup.executor, actor, call)
        if call.mutates:
            _precheck(setup.executor, actor, call)
        stored.append(call)
    return stored


def _store_step(
    setup: _Setup,
    principal: Principal,
    conversation_id: int,
    message: Message,
    step: _Step,
    hooks: TurnHooks,
) -> list[ToolCall]:
    """Finish the streamed message (text, status, usage) and store its calls."""
    conversation = store.get_conversation(principal, conversation_id)
    text = "".join(step.text)
    if step.error:  # keep what streamed; with nothing at all it is an error message
        status = MessageStatus.INCOMPLETE if text else MessageStatus.ERROR
    else:
        status = MessageStatus.INCOMPLETE if step.stopped else MessageStatus.COMPLETE
    actor = principal.via_assistant(conversation.id)
    # Calls of a broken-off reply are dropped: the model would see a call without result.
    requested = step.calls if status == MessageStatus.COMPLETE else []
    calls = _proposed_calls(setup, actor, conversation, requested)
    message.text = text
    message.status = status
    message.error = step.error.message if step.error else None
    message.stop_reason = step.stop_reason
    message.input_tokens = step.usage.input_tokens
    message.output_tokens = step.usage.output_tokens
    message.cache_read_tokens = step.usage.cache_read_tokens
    message.cache_creation_tokens = step.usage.cache_creation_tokens
    conversation.last_activity_at = utcnow()
    for call in calls:
        call.message_id = message.id
        db.session.add(call)
    db.session.flush()
    for call in calls:
        if call.mutates:
            # A write whose arguments cannot work failed at once: no card to confirm.
            store.tool_call_event(
                actor, call, "proposed" if call.status == ToolCallStatus.PROPOSED else "failed"
            )
    db.session.commit()
    hooks.on_message_saved(message)
    return calls


def _run_reads(
    setup: _Setup, principal: Principal, calls: list[ToolCall], hooks: TurnHooks
) -> None:
    """Run the step's reads now; writes wait for the user."""
    for call in calls:
        if call.mutates:
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
    config: Mapping[str, Any] | None = None,
) -> TurnResult:
    """Run model steps until the turn ends, a write awaits confirmation, or a limit hits."""
    hooks = hooks or TurnHooks()
    config = config if config is not None else current_app.config
    setup = _Setup.load(principal, config)
    provider = llm_provider(config)
    result = TurnResult(TurnStatus.DONE, conversation_id)
    while True:
        if hooks.should_stop():  # Stop during a tool call: no new model step
            result.status = TurnStatus.STOPPED
            return result
        conversation = store.get_conversation(principal, conversation_id)
        rows = _stop_before_step(principal, conversation, hooks, result)
        if rows is None:
            return result
        request = LlmRequest(
            model=setup.model,
            system=setup.system,
            messages=build_llm_messages(rows),
            tools=setup.tools,
            max_tokens=setup.max_tokens,
        )
        message = _open_reply(principal, conversation, request.model, hooks)
        result.message_ids.append(message.id)
        # Reading the message back began a transaction: end it, so no connection is held
        # while the model streams (the objects stay attached and reload on next use).
        db.session.rollback()
        step = _stream_step(provider, request, hooks, setup.silence)
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
