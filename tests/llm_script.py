"""A tiny script language for model replies, shared by the scripted provider and the
fake Anthropic server: each step of a turn is a list of Say / Call / Fail items."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from monark.chat.llm.types import (
    LlmEvent,
    LlmRequest,
    ProviderError,
    StopReason,
    TextDelta,
    ToolCallRequested,
    UsageReport,
)

_ids = itertools.count(1)


@dataclass
class Say:
    """Text, streamed in ``chunks`` pieces (by words when chunks is None)."""

    text: str
    chunks: int | None = None

    def pieces(self) -> list[str]:
        if self.chunks is None:
            words = self.text.split(" ")
            return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
        size = max(1, -(-len(self.text) // self.chunks))
        return [self.text[i : i + size] for i in range(0, len(self.text), size)]


@dataclass
class Call:
    name: str
    input: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=lambda: f"toolu_{next(_ids):04d}")


@dataclass
class Fail:
    """A mid-stream error event (after what came before it in the step)."""

    message: str = "Overloaded"
    type: str = "overloaded_error"


@dataclass
class HttpFail:
    """The request itself fails with this status (the SDK retries 5xx twice). ``{auth}`` in
    the message is replaced by the credential the request carried (a provider echoing it)."""

    status: int = 400
    message: str = "Bad request"
    type: str = "invalid_request_error"

    def said(self, headers: Any) -> str:
        """The message, with ``{auth}`` replaced by the request's credential header."""
        auth = ""
        for name in ("authorization", "x-api-key", "x-goog-api-key"):
            auth = auth or headers.get(name) or headers.get(name.title()) or ""
        return self.message.replace("{auth}", auth)


Step = list[Say | Call | Fail | HttpFail]


class Script:
    """A queue of steps; thread-safe; an exhausted script answers a plain 'OK'."""

    def __init__(self, *steps: Step):
        self._steps = list(steps)
        self._lock = threading.Lock()

    def add(self, *steps: Step) -> None:
        with self._lock:
            self._steps.extend(steps)

    def next(self) -> Step:
        with self._lock:
            return self._steps.pop(0) if self._steps else [Say("OK")]

    @property
    def remaining(self) -> int:
        return len(self._steps)


class ScriptedProvider:
    """An in-process ``LlmProvider`` that plays a Script and records every request."""

    name = "scripted"

    def __init__(self, script: Script | None = None):
        self.script = script or Script()
        self.requests: list[LlmRequest] = []

    def stream(self, request: LlmRequest) -> Iterator[LlmEvent]:
        self.requests.append(request)
        step = self.script.next()
        for item in step:
            if isinstance(item, HttpFail):
                yield ProviderError(f"{item.message} ({item.type})")
                return
            if isinstance(item, Say):
                for piece in item.pieces():
                    if request.stop.is_set():
                        yield StopReason("stopped")
                        return
                    yield TextDelta(piece)
            elif isinstance(item, Call):
                yield ToolCallRequested(item.id, item.name, item.input)
            elif isinstance(item, Fail):
                yield UsageReport(10, 1)
                yield ProviderError(f"{item.message} ({item.type})")
                return
        yield UsageReport(100, 20, 80, 0)
        has_call = any(isinstance(i, Call) for i in step)
        yield StopReason("tool_use" if has_call else "end_turn")
