"""The Google Gemini adapter: the only module that imports ``google-genai``. Calls come
without ids (each gets one); a thought signature is kept and sent back with its call."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

from monark.chat.llm import types as t
from monark.chat.llm.common import Chunks, SdkAdapter, StepState

STOP_REASONS = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens"}


def _contents(messages: list[t.LlmMessage], types: Any) -> list[Any]:
    contents = []
    for message in messages:
        parts = []
        for block in message.content:
            if isinstance(block, t.TextBlock) and block.text:
                parts.append(types.Part(text=block.text))
            elif isinstance(block, t.ToolUseBlock):
                signature = (block.meta or {}).get("thought_signature")
                parts.append(
                    types.Part(
                        function_call=types.FunctionCall(name=block.name, args=block.input),
                        thought_signature=base64.b64decode(signature) if signature else None,
                    )
                )
            elif isinstance(block, t.ToolResultBlock):
                key = "error" if block.is_error else "result"
                parts.append(
                    types.Part(
                        function_response=types.FunctionResponse(
                            name=block.name, response={key: block.content}
                        )
                    )
                )
        if parts:
            contents.append(
                types.Content(role="user" if message.role == "user" else "model", parts=parts)
            )
    return contents


def build_config(request: t.LlmRequest, types: Any) -> Any:
    """The request's generation config: system instruction, tools, token limit."""
    tools = None
    if request.tools:
        tools = [
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name=t.name,
                        description=t.description,
                        parameters_json_schema=t.input_schema,
                    )
                    for t in request.tools
                ]
            )
        ]
    return types.GenerateContentConfig(
        system_instruction=request.system,
        tools=tools,
        max_output_tokens=request.max_tokens,
        # Monark runs the tools itself, each write after the user's Confirm.
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )


class GeminiProvider(SdkAdapter):
    """Streams a step through ``google-genai``."""

    _types: Any = None  # ``google.genai.types``, imported with the client

    def make_client(self) -> Any:
        from google import genai
        from google.genai import types

        options: dict[str, Any] = {
            "timeout": int(self.config.read_timeout * 1000),  # ms
            "client_args": self.http_options(),
        }
        if self.config.base_url:
            options["base_url"] = self.config.base_url
        self._types = types
        return genai.Client(api_key=self.config.api_key, http_options=options)

    def open_stream(self, request: t.LlmRequest) -> Any:
        client = self.client()
        return client.models.generate_content_stream(
            model=request.model,
            contents=_contents(request.messages, self._types),
            config=build_config(request, self._types),
        )

    def error_text(self, err: Exception) -> str:
        message = getattr(err, "message", None)
        status = getattr(err, "status", None) or getattr(err, "code", None)
        if message:
            return str(message) + (f" ({status})" if status else "")
        return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__

    def read(self, stream: Any, request: t.LlmRequest, state: StepState) -> Iterator[t.LlmEvent]:
        finish = "STOP"
        calls: list[t.ToolCallRequested] = []
        chunks = Chunks(stream, request, state, _usage_of)
        for chunk in chunks:
            if not chunk.candidates:
                continue
            candidate = chunk.candidates[0]
            parts = candidate.content.parts if candidate.content else None
            for part in parts or []:
                if part.text and not part.thought:
                    yield t.TextDelta(part.text)
                if part.function_call is not None:
                    calls.append(_call(part))
            if candidate.finish_reason:
                finish = getattr(candidate.finish_reason, "value", str(candidate.finish_reason))
        if chunks.stopped:
            yield t.StopReason("stopped")
            return
        yield state.usage
        if finish == "MALFORMED_FUNCTION_CALL" or any(not c.name for c in calls):
            yield t.ProviderError(
                "The model sent an incomplete tool call; nothing was run. Retry, or ask again."
            )
            return
        yield from calls
        yield t.StopReason("tool_use" if calls else STOP_REASONS.get(finish, finish.lower()))

    def models(self) -> list[str]:
        """The models this key may use, as Google lists them."""
        with self.in_use():
            names = [m.name or "" for m in self.client().models.list()]
        return sorted(n.removeprefix("models/") for n in names if n)


def _call(part: Any) -> t.ToolCallRequested:
    call = part.function_call
    meta = None
    if part.thought_signature:
        meta = {"thought_signature": base64.b64encode(part.thought_signature).decode()}
    return t.ToolCallRequested(
        call.id or f"gemini_{uuid.uuid4().hex[:16]}", call.name or "", dict(call.args or {}), meta
    )


def _usage_of(chunk: Any) -> t.UsageReport | None:
    """The running totals a chunk reports, if any."""
    if (usage := chunk.usage_metadata) is None:
        return None
    cached = usage.cached_content_token_count or 0
    prompt = usage.prompt_token_count or 0
    return t.UsageReport(max(0, prompt - cached), usage.candidates_token_count or 0, cached, 0)
