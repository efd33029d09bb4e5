"""What the host injects besides its tools (``runtime.install``): who may talk to the
assistant (``AccessGate``), what the model is told (``PromptBuilder``) and what a reply
cost (``Meter``). Chat only asks; before the host injects them, the assistant is closed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any, Protocol

from monark.core.rbac import Principal

if TYPE_CHECKING:
    from monark.chat.llm.types import UsageReport
    from monark.chat.models import Message


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
    """A principal's system prompt (byte-identical across steps), and the note opening each
    user message, kept out of the cached prefix (``today``: the user's now, in their zone)."""

    def system(self, principal: Principal) -> str: ...

    def page_note(self, context: object | None, today: date) -> str: ...

    def edit_note(self, original: Mapping[str, Any], edited: Mapping[str, Any], ran: bool) -> str:
        """What the model reads before the result of a call a person edited."""
        ...


@dataclass(frozen=True)
class Charge:
    """A reply to charge, with ``ResolvedAi``'s price and budget (None: not checked), unread."""

    message: Message
    usage: UsageReport
    principal: Principal
    price: object = None
    budget: object = None


class Meter(Protocol):
    """Stores a reply's usage and cost; why the spend (read from the database) now closes it."""

    def charge(self, reply: Charge) -> str | None: ...


def count_tokens(message: Message, usage: UsageReport) -> None:
    """Store the tokens a provider reported for a reply on it."""
    message.input_tokens = usage.input_tokens
    message.output_tokens = usage.output_tokens
    message.cache_read_tokens = usage.cache_read_tokens
    message.cache_creation_tokens = usage.cache_creation_tokens


class Closed:
    """The gate, prompt and meter before the host injects its own: nobody may talk to it."""

    def check(self, principal: Principal) -> Gate:
        return Gate(False, "no_host", "The assistant is not set up on this server.", False)

    def system(self, principal: Principal) -> str:
        return "You are an assistant."

    def page_note(self, context: object | None, today: date) -> str:
        return f"Today is {today.isoformat()}."

    def edit_note(self, original: Mapping[str, Any], edited: Mapping[str, Any], ran: bool) -> str:
        return ""

    def charge(self, reply: Charge) -> str | None:
        count_tokens(reply.message, reply.usage)  # no prices without a host: cost unknown
        return None
