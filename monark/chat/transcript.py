"""What the model sees of a conversation: stored rows as provider-neutral messages, and the
tool definitions in a stable order (so the cached request prefix stays byte-identical)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from monark.chat import store
from monark.chat.llm.types import (
    Block,
    LlmMessage,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)
from monark.chat.models import Message, MessageRole, MessageStatus, ToolCall, ToolCallStatus
from monark.chat.tools import RESULT_LIMIT, ToolSpec
from monark.core.text import scrub

REJECTED_TEXT = "The user rejected this action; it was not carried out."


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
    limit = spec.result_limit if spec is not None else RESULT_LIMIT
    if call.status == ToolCallStatus.SUCCEEDED:
        shown = _summary(call.result, spec)
        text = scrub(json.dumps(shown, ensure_ascii=False, sort_keys=True, default=str))
        return cut(text, limit), False
    if call.status == ToolCallStatus.REJECTED:
        reason = f" Their reason: {call.reject_reason}" if call.reject_reason else ""
        return cut(REJECTED_TEXT + reason, limit), True
    return cut(f"Error: {call.error or 'the tool failed.'}", limit), True


def build_llm_messages(
    rows: Sequence[Message | store.TranscriptMessage], specs: Mapping[str, ToolSpec] | None = None
) -> list[LlmMessage]:
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
            blocks += [
                ToolUseBlock(c.provider_call_id, c.name, c.input, c.provider_meta) for c in calls
            ]
            push("assistant", blocks)
            results = []
            for call in calls:
                text, is_error = _result_text(call, (specs or {}).get(call.name))
                results.append(
                    ToolResultBlock(call.provider_call_id, text, is_error, name=call.name)
                )
            push("user", results)
    return [LlmMessage(role, tuple(blocks)) for role, blocks in turns]  # type: ignore[arg-type]


def tool_definitions(specs: list[ToolSpec]) -> list[ToolDefinition]:
    """Tool definitions in a stable order, so the cached prefix stays byte-identical."""
    return [
        ToolDefinition(s.name, s.description, s.input_schema)
        for s in sorted(specs, key=lambda s: s.name)
    ]
