"""The agent loop: re-entrant, stateless between steps, with a confirm gate on every write.

Each step reloads the conversation from the database, so a turn can resume after a
confirmation, a restart or on another instance with nothing kept in memory.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from flask import current_app

from monark.chat import store
from monark.chat.hooks import TurnHooks
from monark.chat.llm import get_llm_provider
from monark.chat.llm.types import (
    Block,
    LlmMessage,
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
from monark.chat.models import Message, ToolCall
from monark.chat.prompt import system_prompt
from monark.chat.tools import ChatToolExecutor, ToolOutcome, ToolSpec, get_chat_tool_executor
from monark.core.gates import assistant_name
from monark.core.models import Org
from monark.core.rbac import Principal
from monark.core.uow import unit_of_work
from monark.extensions import db

MAX_STEPS = 8
RESULT_LIMIT = 20_000
REJECTED_TEXT = "The user rejected this action; it was not carried out."
STEP_LIMIT_NOTE = (
    f"I stopped after {MAX_STEPS} steps without finishing. Send a message to let me continue."
)

TurnStatus = Literal["done", "awaiting_confirmation", "step_limit", "error", "stopped"]


@dataclass
class TurnResult:
    status: TurnStatus
    conversation_id: int
    error: str | None = None
    message_ids: list[int] = field(default_factory=list)


# ---- what the model sees -----------------------------------------------------------------


def _result_text(call: ToolCall | store.TranscriptCall) -> tuple[str, bool]:
    if call.status == "SUCCEEDED":
        text = json.dumps(call.result, ensure_ascii=False, sort_keys=True, default=str)
        if len(text) > RESULT_LIMIT:
            text = text[:RESULT_LIMIT] + " …(truncated)"
        return text, False
    if call.status == "REJECTED":
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
        if row.role == "user":
            blocks: list[Block] = [TextBlock(b["text"]) for b in row.content if b.get("text")]
            blocks.append(TextBlock(row.text))
            push("user", blocks)
        elif row.role == "assistant":
            calls = row.tool_calls if row.status == "complete" else []
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


def run_tool_call(
    principal: Principal, call: ToolCall, executor: ChatToolExecutor, hooks: TurnHooks
) -> None:
    """Run one call as the user via the assistant; store SUCCEEDED or FAILED and commit."""
    actor = principal.via_assistant(call.conversation_id)
    db.session.commit()  # nothing of ours pending while the tool's own transaction runs
    started = time.perf_counter()
    try:
        # The tool's writes are kept only if it succeeds (the unit rolls back otherwise).
        with unit_of_work(read_only=not call.mutates) as unit:
            outcome = executor.execute(actor, call.name, dict(call.input))
            if not outcome.ok:
                unit.fail()
    except Exception as err:  # the tool boundary: a failure becomes a result the model sees
        current_app.logger.exception("tool %s failed", call.name)
        # The exception's text may hold SQL or internals: it goes to the log, not the model.
        outcome = ToolOutcome(
            ok=False,
            error=f"The tool failed unexpectedly ({type(err).__name__}); the server logged it.",
        )
    call.duration_ms = int((time.perf_counter() - started) * 1000)
    if outcome.ok:
        call.status, call.result, call.error = "SUCCEEDED", outcome.result, None
    else:
        call.status = "FAILED"
        call.error = outcome.error or "The tool failed."
        call.result = {"details": outcome.details} if outcome.details else None
    store.tool_call_event(actor, call, "succeeded" if outcome.ok else "failed")
    db.session.commit()
    hooks.on_tool_call(call)


def _describe(executor: ChatToolExecutor, actor: Principal, call: ToolCall) -> dict | None:
    try:
        return executor.describe(actor, call.name, dict(call.input))
    except Exception:  # a preview is a courtesy; the call itself must still be stored
        current_app.logger.exception("describing %s failed", call.name)
        return None


def _precheck(executor: ChatToolExecutor, actor: Principal, call: ToolCall) -> None:
    try:
        outcome = executor.precheck(actor, call.name, dict(call.input))
    except Exception:  # a check that breaks must not block the call: the user still decides
        current_app.logger.exception("prechecking %s failed", call.name)
        return
    if outcome is not None and not outcome.ok:
        call.status = "FAILED"
        call.error = outcome.error or "The arguments are invalid."
        call.result = {"details": outcome.details} if outcome.details else None


# ---- the loop ----------------------------------------------------------------------------


@dataclass
class _Step:
    text: list[str] = field(default_factory=list)
    calls: list[ToolCallRequested] = field(default_factory=list)
    usage: UsageReport = field(default_factory=UsageReport)
    stop_reason: str | None = None
    error: ProviderError | None = None
    stopped: bool = False


def _stream_step(request: LlmRequest, hooks: TurnHooks, config: Mapping[str, Any]) -> _Step:
    step = _Step()
    for event in get_llm_provider(dict(config)).stream(request):
        if isinstance(event, TextDelta):
            step.text.append(event.text)
            hooks.on_text_delta(event.text)
        elif isinstance(event, ToolCallRequested):
            step.calls.append(event)
        elif isinstance(event, UsageReport):
            step.usage = event
        elif isinstance(event, StopReason):
            step.stop_reason = event.reason
            step.stopped = event.reason == "stopped"
        elif isinstance(event, ProviderError):
            step.error = event
        if hooks.should_stop() and not step.stopped:
            request.stop.set()
            step.stopped = True
            break
    return step


def _steps_this_turn(rows: Sequence[Message | store.TranscriptMessage]) -> int:
    steps = 0
    for row in reversed(rows):
        if row.role == "user":
            break
        if row.role == "assistant":
            steps += 1
    return steps


def advance_conversation(
    principal: Principal,
    conversation_id: int,
    hooks: TurnHooks | None = None,
    config: Mapping[str, Any] | None = None,
) -> TurnResult:
    """Run model steps until the turn ends, a write awaits confirmation, or a limit hits."""
    hooks = hooks or TurnHooks()
    config = config if config is not None else current_app.config
    executor = get_chat_tool_executor()
    specs = {s.name: s for s in executor.specs()}
    tools = tool_definitions(list(specs.values()))
    org = db.session.get(Org, principal.org_id)
    system = system_prompt(assistant_name(org, config))
    result = TurnResult("done", conversation_id)

    while True:
        conversation = store.get_conversation(principal, conversation_id)
        if store.pending_calls(conversation.id):
            result.status = "awaiting_confirmation"
            return result
        rows = store.load_transcript(conversation.id)
        if _steps_this_turn(rows) >= MAX_STEPS:
            note = store.add_message(
                conversation, principal, author_kind="system", role="note", text=STEP_LIMIT_NOTE
            )
            db.session.commit()
            hooks.on_message_saved(note)
            result.status = "step_limit"
            result.message_ids.append(note.id)
            return result
        request = LlmRequest(
            model=config.get("CHAT_LLM_MODEL", ""),
            system=system,
            messages=build_llm_messages(rows),
            tools=tools,
            max_tokens=int(config.get("CHAT_LLM_MAX_TOKENS", 4096)),
        )
        store.renew_turn(conversation.id)
        # Ending the transaction hands the connection back to the pool: none is held while
        # the model streams (the objects stay attached and reload on next use).
        db.session.commit()

        step = _stream_step(request, hooks, config)

        conversation = store.get_conversation(principal, conversation_id)
        text = "".join(step.text)
        if step.error:  # keep what streamed; with nothing at all it is an error message
            status = "incomplete" if text else "error"
        else:
            status = "incomplete" if step.stopped else "complete"
        actor = principal.via_assistant(conversation.id)
        # Calls of a broken-off reply are dropped: the model would see a call without result.
        requested_calls = step.calls if status == "complete" else []
        stored: list[ToolCall] = []
        for position, requested in enumerate(requested_calls):
            spec = specs.get(requested.name)
            call = ToolCall(
                org_id=conversation.org_id,
                conversation_id=conversation.id,
                position=position,
                provider_call_id=requested.id,
                name=requested.name,
                input=requested.input,
                # A tool nobody registered fails safe: it is treated as a write.
                mutates=spec.mutates if spec is not None else True,
                status="PROPOSED",
            )
            # Previews and checks may read through the dispatcher, so they run before this
            # step writes anything (SQLite allows one writer at a time).
            call.preview = _describe(executor, actor, call)
            if call.mutates:
                _precheck(executor, actor, call)
            stored.append(call)
        message = store.add_message(
            conversation,
            actor,
            author_kind="agent",
            role="assistant",
            text=text,
            status=status,
            error=step.error.message if step.error else None,
            model=request.model,
            stop_reason=step.stop_reason,
            input_tokens=step.usage.input_tokens,
            output_tokens=step.usage.output_tokens,
            cache_read_tokens=step.usage.cache_read_tokens,
            cache_creation_tokens=step.usage.cache_creation_tokens,
        )
        result.message_ids.append(message.id)
        for call in stored:
            call.message_id = message.id
            db.session.add(call)
        db.session.flush()
        for call in stored:
            if call.mutates:
                # A write whose arguments cannot work failed at once: no card to confirm.
                store.tool_call_event(
                    actor, call, "proposed" if call.status == "PROPOSED" else "failed"
                )
        db.session.commit()
        hooks.on_message_saved(message)

        if step.error:
            result.status, result.error = "error", step.error.message
            return result
        if step.stopped:
            result.status = "stopped"
            return result
        if not stored:
            return result
        for call in stored:
            if call.mutates:
                hooks.on_tool_call(call)
            else:
                call.status = "EXECUTING"
                db.session.commit()
                hooks.on_tool_call(call)
                run_tool_call(principal, call, executor, hooks)
        if any(c.status == "PROPOSED" for c in stored):
            result.status = "awaiting_confirmation"
            return result
