"""What the model sees of a conversation: stored rows as provider-neutral messages."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from monark.chat import store
from monark.chat.executor import RESULT_LIMIT, ToolSpec
from monark.chat.llm.types import (
    Block,
    LlmMessage,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)
from monark.chat.models import Message, MessageRole, MessageStatus, ToolCall, ToolCallStatus
from monark.chat.runtime import runtime
from monark.core.text import scrub

REJECTED_TEXT = "The user rejected this action; it was not carried out."
EXPIRED_TEXT = (
    "Nobody decided on this proposal in time, so it expired and nothing was changed. "
    "Propose it again if the user still wants it."
)
SET_ASIDE_OPENING = (
    "The user set aside an earlier version of the conversation from here (they regenerated "
    "a reply or edited their message). These changes were made in it and stay done: nothing "
    "undid them and nothing runs them again. Do not make them again unless the user asks; "
    "say so if the user's request is already met by them:"
)
SET_ASIDE_INPUT_LIMIT = 400  # characters of a set-aside write's arguments the model reads
SUMMARY_OPENING = (
    "Summary of the earlier conversation (its messages are no longer shown to you; "
    "the user still sees them):\n\n"
)


def _summary(result: Any, spec: ToolSpec | None) -> Any:
    """What the model reads of a successful result: the tool's summary, or all of it."""
    if spec is None or spec.summarize is None:
        return result
    try:
        return spec.summarize(result)
    except Exception:  # a summary is a courtesy: the whole result is still right
        return result


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, with a marker the model reads when cut."""
    if len(text) <= limit:
        return text
    left = len(text) - limit
    return (
        text[:limit] + f" …[cut here: {left:,} more characters of this result are not "
        "shown. Ask for less: a smaller limit, a filter, fewer fields, or an aggregate.]"
    )


def _result_text(call: ToolCall | store.TranscriptCall, spec: ToolSpec | None) -> tuple[str, bool]:
    text, is_error = _outcome_text(call, spec)
    note = ""  # an edited call: the host tells the model what changed
    if call.original_input:
        ran = call.status in (ToolCallStatus.SUCCEEDED, ToolCallStatus.FAILED)
        note = runtime().prompt.edit_note(call.original_input, call.input, ran)
    limit = spec.result_limit if spec is not None else RESULT_LIMIT
    return cut(scrub(note) + text, limit), is_error


def _outcome_text(call: ToolCall | store.TranscriptCall, spec: ToolSpec | None) -> tuple[str, bool]:
    if call.status == ToolCallStatus.SUCCEEDED:
        shown = _summary(call.result, spec)
        return scrub(json.dumps(shown, ensure_ascii=False, sort_keys=True, default=str)), False
    if call.status == ToolCallStatus.REJECTED:
        reason = f" Their reason: {call.reject_reason}" if call.reject_reason else ""
        return REJECTED_TEXT + reason, True
    if call.status == ToolCallStatus.EXPIRED:
        return EXPIRED_TEXT, True
    return f"Error: {call.error or 'the tool failed.'}", True


def stub_text(call: ToolCall | store.TranscriptCall) -> str:
    """The one line the model reads instead of an old tool result."""
    return (
        f"[result of {call.name} #{call.provider_call_id} omitted to save space; "
        "call the tool again if you need it]"
    )


def summary_through(row: Message | store.TranscriptMessage) -> int:
    """The last message id a summary row covers (it and every message before it)."""
    return next((int(b["through"]) for b in row.content if "through" in b), 0)


def shown_rows(
    rows: Sequence[Message | store.TranscriptMessage],
) -> tuple[Message | store.TranscriptMessage | None, list[Message | store.TranscriptMessage]]:
    """The latest summary (if any) and the rows after what it covers, less summaries."""
    summary = next((r for r in reversed(rows) if r.role == MessageRole.SUMMARY), None)
    through = summary_through(summary) if summary is not None else 0
    return summary, [r for r in rows if r.id > through and r.role != MessageRole.SUMMARY]


def _set_aside_turn(calls: Sequence[store.TranscriptCall]) -> list[tuple[str, list[Block]]]:
    """A user line telling the writes done in versions set aside (none: nothing)."""
    lines = [SET_ASIDE_OPENING]
    for call in calls:
        asked = json.dumps(call.input, ensure_ascii=False, sort_keys=True, default=str)
        lines.append(f"- {call.name} {cut(scrub(asked), SET_ASIDE_INPUT_LIMIT)}: done")
    return [("user", [TextBlock("\n".join(lines))])] if calls else []


def row_turns(
    row: Message | store.TranscriptMessage,
    specs: Mapping[str, ToolSpec] | None = None,
    stub_before: int | None = None,
) -> list[tuple[str, list[Block]]]:
    """What one stored row adds to the model's messages, as ``(role, blocks)`` pieces, with
    a user line around it naming the writes done in versions the user set aside there."""
    before = _set_aside_turn(getattr(row, "set_aside", ()))
    after = _set_aside_turn(getattr(row, "left_after", ()))
    return before + _own_turns(row, specs, stub_before) + after


def _own_turns(
    row: Message | store.TranscriptMessage,
    specs: Mapping[str, ToolSpec] | None,
    stub_before: int | None,
) -> list[tuple[str, list[Block]]]:
    if row.role == MessageRole.USER:
        blocks: list[Block] = [TextBlock(b["text"]) for b in row.content if b.get("text")]
        return [("user", [*blocks, TextBlock(row.text)])]
    if row.role == MessageRole.NOTE:
        # An undo's note: told after what the model read, so the cached prefix holds.
        said = [TextBlock(b["text"]) for b in row.content if b.get("undo_of") and b.get("text")]
        return [("user", said)] if said else []
    if row.role != MessageRole.ASSISTANT:
        return []
    calls = row.tool_calls if row.status == MessageStatus.COMPLETE else []
    # Trailing whitespace is refused at the end of a final assistant turn (a retry's).
    blocks = [TextBlock(row.text.rstrip())] if row.text.strip() else []
    # What the model asked for, as it asked (an edit is told in the call's result).
    blocks += [
        ToolUseBlock(c.provider_call_id, c.name, c.original_input or c.input, c.provider_meta)
        for c in calls
    ]
    stubbed = stub_before is not None and row.id < stub_before
    results: list[Block] = []
    for call in calls:
        text, is_error = _result_text(call, (specs or {}).get(call.name))
        if stubbed and len(text) > len(stub := stub_text(call)):
            text = stub
        results.append(ToolResultBlock(call.provider_call_id, text, is_error, name=call.name))
    return [("assistant", blocks), ("user", results)]


def build_llm_messages(
    rows: Sequence[Message | store.TranscriptMessage],
    specs: Mapping[str, ToolSpec] | None = None,
    stub_before: int | None = None,
) -> list[LlmMessage]:
    """Stored rows as the model's messages: same-role turns merged, the latest summary first
    instead of the rows it covers, results of rows before ``stub_before`` as stubs."""
    turns: list[tuple[str, list[Block]]] = []

    def push(role: str, blocks: list[Block]) -> None:
        if not blocks:
            return
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, list(blocks)))

    summary, shown = shown_rows(rows)
    if summary is not None:
        push("user", [TextBlock(SUMMARY_OPENING + summary.text)])
    for row in shown:
        for role, blocks in row_turns(row, specs, stub_before):
            push(role, blocks)
    return [LlmMessage(role, tuple(blocks)) for role, blocks in turns]  # type: ignore[arg-type]


def tool_definitions(specs: list[ToolSpec]) -> list[ToolDefinition]:
    """Tool definitions in a stable order, so the cached prefix stays byte-identical."""
    return [
        ToolDefinition(s.name, s.description, s.input_schema)
        for s in sorted(specs, key=lambda s: s.name)
    ]
