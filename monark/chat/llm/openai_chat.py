"""The OpenAI Chat Completions adapter, for OpenAI and its clones: the only module that
imports ``openai``. A streamed call without an id, a name or arguments that parse is an
error, never a blank dispatch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from monark.chat.llm import types as t
from monark.chat.llm.common import Chunks, SdkAdapter, StepState, parse_arguments

STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
NO_KEY_NEEDED = "not-needed"  # the SDK insists on a key; local servers ignore it


def _arguments(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _user_turn(message: t.LlmMessage) -> list[dict[str, Any]]:
    """Tool results (a ``tool`` message each), then the user's text."""
    out: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, t.ToolResultBlock):
            out.append(
                {"role": "tool", "tool_call_id": block.tool_use_id, "content": block.content}
            )
    text = "\n\n".join(b.text for b in message.content if isinstance(b, t.TextBlock) and b.text)
    if text:
        out.append({"role": "user", "content": text})
    return out


def _assistant_turn(message: t.LlmMessage) -> dict[str, Any]:
    text = "".join(b.text for b in message.content if isinstance(b, t.TextBlock))
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": b.name, "arguments": _arguments(b.input)},
        }
        for b in message.content
        if isinstance(b, t.ToolUseBlock)
    ]
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = calls
    return out


def build_params(request: t.LlmRequest, token_param: str) -> dict[str, Any]:
    """The Chat Completions parameters of a request."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": request.system}]
    for message in request.messages:
        if message.role == "user":
            messages += _user_turn(message)
        else:
            messages.append(_assistant_turn(message))
    params: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        token_param: request.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in request.tools
        ]
    return params


class _Calls:
    """Tool calls assembled from their streamed pieces, by index."""

    def __init__(self) -> None:
        self.parts: dict[int, dict[str, Any]] = {}

    def add(self, delta_calls: Any) -> None:
        for piece in delta_calls or []:
            call = self.parts.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
            if piece.id:
                call["id"] = piece.id
            function = piece.function
            if function is not None:
                if function.name:
                    call["name"] = function.name
                if function.arguments:
                    call["arguments"] += function.arguments

    def finished(self) -> Iterator[t.LlmEvent]:
        for index in sorted(self.parts):
            call = self.parts[index]
            arguments = parse_arguments(call["arguments"])
            if not call["id"] or not call["name"] or arguments is None:
                yield t.ProviderError(
                    f"The model sent an incomplete tool call ({call['name'] or 'no name'}); "
                    "nothing was run. Retry, or ask again."
                )
                return
            yield t.ToolCallRequested(call["id"], call["name"], arguments)


class OpenAIProvider(SdkAdapter):
    """Streams a step through the official ``openai`` SDK."""

    def problem(self) -> str | None:
        if missing := super().problem():
            return missing
        if not self.descriptor.endpoint(self.config):
            return "Set the base URL of the OpenAI-compatible endpoint in Settings."
        return None

    def make_client(self) -> Any:
        import openai

        config = self.config
        return openai.OpenAI(
            api_key=config.api_key or NO_KEY_NEEDED,
            base_url=self.descriptor.endpoint(config),
            timeout=openai.Timeout(config.read_timeout, connect=config.connect_timeout),
            max_retries=config.max_retries,
            http_client=openai.DefaultHttpxClient(**self.http_options()),
        )

    def open_stream(self, request: t.LlmRequest) -> Any:
        params = build_params(request, self.descriptor.token_param)
        return self.client().chat.completions.create(**params)

    def read(self, stream: Any, request: t.LlmRequest, state: StepState) -> Iterator[t.LlmEvent]:
        calls = _Calls()
        finish = "stop"
        chunks = Chunks(stream, request, state, _usage_of)
        for chunk in chunks:
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            if choice.delta is not None:
                if choice.delta.content:
                    yield t.TextDelta(choice.delta.content)
                calls.add(choice.delta.tool_calls)
            if choice.finish_reason:
                finish = choice.finish_reason
        if chunks.stopped:
            yield t.StopReason("stopped")
            return
        yield state.usage
        for event in calls.finished():
            yield event
            if isinstance(event, t.ProviderError):
                return
        yield t.StopReason(STOP_REASONS.get(finish, finish))

    def models(self) -> list[str]:
        """The endpoint's model catalogue (OpenAI's own filtered to chat models)."""
        ids = super().models()
        return [i for i in ids if i.startswith(CHAT_FAMILIES)] if self.name == "openai" else ids


CHAT_FAMILIES = ("gpt-", "o1", "o3", "o4", "chatgpt-")


def _usage_of(chunk: Any) -> t.UsageReport | None:
    """A chunk's usage (the last one's), counted as Anthropic does: cached input apart."""
    if (usage := chunk.usage) is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    prompt = usage.prompt_tokens or 0
    return t.UsageReport(max(0, prompt - cached), usage.completion_tokens or 0, cached, 0)
