"""The provider-neutral request, message and event types of the LLM layer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(frozen=True)
class TextBlock:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True)
class ToolUseBlock:
    id: str
    name: str
    input: dict[str, Any]
    meta: dict[str, Any] | None = None  # what the provider asks to get back (a signature)
    type: Literal["tool_use"] = "tool_use"


@dataclass(frozen=True)
class ToolResultBlock:
    tool_use_id: str
    content: str
    is_error: bool = False
    name: str = ""  # the tool's name (Gemini matches results to calls by name)
    type: Literal["tool_result"] = "tool_result"


Block = TextBlock | ToolUseBlock | ToolResultBlock


@dataclass(frozen=True)
class LlmMessage:
    role: Literal["user", "assistant"]
    content: tuple[Block, ...]


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass
class LlmRequest:
    model: str
    system: str
    messages: list[LlmMessage]
    tools: list[ToolDefinition]
    max_tokens: int
    stop: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolCallRequested:
    id: str
    name: str
    input: dict[str, Any]
    meta: dict[str, Any] | None = None  # stored with the call, sent back with it


@dataclass(frozen=True)
class UsageReport:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


@dataclass(frozen=True)
class StopReason:
    reason: str


# The request is longer than the model's window: the loop compacts once and tries again.
TOO_LONG = "too_long"


@dataclass(frozen=True)
class ProviderError:
    message: str
    kind: str = "provider_error"  # "configuration" | "provider_error" | "overloaded" | TOO_LONG


LlmEvent = TextDelta | ToolCallRequested | UsageReport | StopReason | ProviderError


class LlmProvider(Protocol):
    """Streams one model step as provider-neutral events; never raises for API errors."""

    name: str

    def stream(self, request: LlmRequest) -> Iterator[LlmEvent]: ...
