"""A provider that only explains why no model can be reached."""

from __future__ import annotations

from collections.abc import Iterator

from monark.chat.llm.types import LlmEvent, LlmRequest, ProviderError


class UnavailableProvider:
    name = "unavailable"

    def __init__(self, reason: str):
        self.reason = reason

    def problem(self) -> str | None:
        return self.reason

    def stream(self, request: LlmRequest) -> Iterator[LlmEvent]:
        yield ProviderError(self.reason, kind="configuration")
