"""Callbacks through which a turn reports progress (the SSE endpoint implements them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from monark.chat.models import Message, ToolCall


class TurnHooks:
    """No-op hooks; subclass and override what you need."""

    def on_text_delta(self, text: str) -> None:
        """A piece of the assistant's reply as it streams."""

    def on_message_saved(self, message: Message) -> None:
        """A message (user, assistant or note) was stored."""

    def on_tool_call(self, call: ToolCall) -> None:
        """A tool call was stored or changed status."""

    def should_stop(self) -> bool:
        """Return True to stop reading the provider (the Stop button, a closed tab)."""
        return False
