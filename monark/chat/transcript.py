"""What the model sees of a conversation: stored rows as provider-neutral messages, and the
tool definitions in a stable order (so the cached request prefix stays byte-identical)."""

from __future__ import annotations

import json
from collections.abc import Sequence

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
from monark.chat.tools import ToolSpec
from monark.core.text import scrub

RESULT_LIMIT = 20_000
REJECTED_TEXT = "The user rejected this action; it was not carried out."


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
            blocks += [
                ToolUseBlock(c.provider_call_id, c.name, c.input, c.provider_meta) for c in calls
            ]
            push("assistant", blocks)
            results = []
            for call in calls:
                text, is_error = _result_text(call)
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
