"""The Anthropic Messages API adapter: the only module that imports the ``anthropic`` SDK.

It marks three prompt-cache breakpoints on every request: the system prompt, the tool
set (its last tool) and the conversation so far (the last block of the newest message).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from monark.chat.llm import types as t
from monark.chat.llm.common import SdkAdapter, StepState, parse_arguments

EPHEMERAL = {"type": "ephemeral"}
NOT_CONNECTED = (
    "The assistant is not connected to a model yet. An admin sets a provider and key in "
    "Settings → AI model (or ANTHROPIC_API_KEY on the server)"
)
NO_KEY = NOT_CONNECTED + "; then press Retry."  # after a message was sent


def import_sdk() -> Any:
    """The ``anthropic`` SDK, imported now (slow: at first use, or before gunicorn forks)."""
    import anthropic

    return anthropic


def _block(block: Any) -> dict[str, Any]:
    if isinstance(block, t.TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, t.ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, t.ToolResultBlock):
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": block.content,
        }
        if block.is_error:
            out["is_error"] = True
        return out
    raise TypeError(f"unknown block {block!r}")


def _messages(messages: list[t.LlmMessage]) -> list[dict[str, Any]]:
    out = [{"role": m.role, "content": [_block(b) for b in m.content]} for m in messages]
    if out and out[-1]["content"]:
        out[-1]["content"][-1]["cache_control"] = EPHEMERAL
    return out


def build_params(request: t.LlmRequest) -> dict[str, Any]:
    """The Messages API parameters for a request, with the three cache breakpoints."""
    tools = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in request.tools
    ]
    if tools:
        tools[-1]["cache_control"] = EPHEMERAL
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "system": [{"type": "text", "text": request.system, "cache_control": EPHEMERAL}],
        "messages": _messages(request.messages),
    }
    if tools:
        params["tools"] = tools
    return params


class AnthropicProvider(SdkAdapter):
    """Streams a step through the official SDK; the client is built on first use."""

    def problem(self) -> str | None:
        return None if self.api_key else NOT_CONNECTED + "."

    def unusable(self) -> str | None:
        return None if self.api_key else NO_KEY

    def make_client(self) -> Any:
        anthropic = import_sdk()
        config = self.config
        # The read timeout bounds each wait for a stream's next bytes, not the whole reply.
        return anthropic.Anthropic(
            api_key=self.api_key,
            timeout=anthropic.Timeout(config.read_timeout, connect=config.connect_timeout),
            http_client=anthropic.DefaultHttpxClient(**self.http_options()),
            max_retries=config.max_retries,
            **({"base_url": config.base_url} if config.base_url else {}),
        )

    def open_stream(self, request: t.LlmRequest) -> Any:
        return self.client().messages.create(**build_params(request), stream=True)

    def read(self, stream: Any, request: t.LlmRequest, state: StepState) -> Iterator[t.LlmEvent]:
        # The SDK's raw events (``Stream.raw_events``), not its typed ones: a pydantic event
        # per token cost about 35 us of the SDK's 50 (bench/stream_bench.py). The fields
        # read are the Messages API's documented ones.
        tools: dict[int, dict[str, Any]] = {}
        usage = {"input": 0, "output": 0, "cache_read": 0, "cache_creation": 0}
        stop_reason = "end_turn"

        def report() -> t.UsageReport:
            state.usage = t.UsageReport(
                usage["input"], usage["output"], usage["cache_read"], usage["cache_creation"]
            )
            return state.usage

        for sse in import_sdk().Stream.raw_events(stream.response):
            if request.stop.is_set():
                yield t.StopReason("stopped")
                return
            kind = sse.event
            if kind is None or kind == "ping" or not sse.data:
                continue  # as the SDK's typed stream skips them
            event = sse.json()
            if kind == "content_block_delta":  # nearly every event: first
                delta = event["delta"]
                if delta["type"] == "text_delta":
                    yield t.TextDelta(delta["text"])
                elif delta["type"] == "input_json_delta" and event["index"] in tools:
                    tools[event["index"]]["json"] += delta["partial_json"]
            elif kind == "error":  # mid-stream (an overloaded API, say): the SDK raises too
                raise StreamError(event)
            elif kind == "message_start":
                u = event["message"].get("usage") or {}
                usage["input"] = u.get("input_tokens") or 0
                usage["output"] = u.get("output_tokens") or 0
                usage["cache_read"] = u.get("cache_read_input_tokens") or 0
                usage["cache_creation"] = u.get("cache_creation_input_tokens") or 0
                report()
            elif kind == "content_block_start":
                block = event["content_block"]
                if block["type"] == "tool_use":
                    tools[event["index"]] = {"id": block["id"], "name": block["name"], "json": ""}
                elif block["type"] == "text" and block.get("text"):
                    yield t.TextDelta(block["text"])
            elif kind == "content_block_stop" and event["index"] in tools:
                yield _call(tools.pop(event["index"]))
            elif kind == "message_delta":
                stop_reason = event["delta"].get("stop_reason") or stop_reason
                output = (event.get("usage") or {}).get("output_tokens")
                if output is not None:
                    usage["output"] = output
                    report()
            elif kind == "message_stop":
                break
        yield report()
        yield t.StopReason(stop_reason)


class StreamError(Exception):
    """An ``error`` event in the stream; ``body`` (its JSON) reads as the SDK's own errors do."""

    def __init__(self, body: Any):
        super().__init__(str(body))
        self.body = body


def _call(call: dict[str, Any]) -> t.ToolCallRequested:
    """A tool call from its pieces (unparsable arguments go on as such, for the route to refuse)."""
    arguments = parse_arguments(call["json"])
    if arguments is None:
        arguments = {"_unparsed_arguments": call["json"]}
    return t.ToolCallRequested(call["id"], call["name"], arguments)
