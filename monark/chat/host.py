"""What the host injects besides its tools (``runtime.install``): who may talk to the
assistant (``AccessGate``), and what the model is told (``PromptBuilder``: the system
prompt, the note opening each user message, the note before an edited call's result).

The words and the rules are the host's (``monark.assistant.gates``, ``.prompt``); chat
only asks. Before the host injects them, the assistant is closed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, Protocol

from monark.core.rbac import Principal


@dataclass(frozen=True)
class Gate:
    """Whether the assistant is open to a principal; ``reason`` says why not."""

    open: bool
    code: str = "ok"
    reason: str = ""
    chat_open: bool = True  # the chat module itself (conversation list) is reachable


class AccessGate(Protocol):
    """Whether a principal may talk to the assistant now."""

    def check(self, principal: Principal) -> Gate: ...


class PromptBuilder(Protocol):
    """The system prompt of a principal's turns, byte-identical across their steps, and the
    note that opens each user message (where they are, today's date: what changes per
    message, kept out of the cached prefix)."""

    def system(self, principal: Principal) -> str: ...

    def page_note(self, context: object | None, today: date) -> str: ...

    def edit_note(self, original: Mapping[str, Any], edited: Mapping[str, Any], ran: bool) -> str:
        """What the model reads before the result of a call a person edited (``ran``
        False: it never ran)."""
        ...


class Closed:
    """The gate and prompt before the host injects its own: nobody may talk to it."""

    def check(self, principal: Principal) -> Gate:
        return Gate(False, "no_host", "The assistant is not set up on this server.", False)

    def system(self, principal: Principal) -> str:
        return "You are an assistant."

    def page_note(self, context: object | None, today: date) -> str:
        return f"Today is {today.isoformat()}."

    def edit_note(self, original: Mapping[str, Any], edited: Mapping[str, Any], ran: bool) -> str:
        return ""
