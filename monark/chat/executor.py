"""What the host injects into the loop (``runtime.install``): its tool executor and its
proposal gate (whether a proposed write runs at once)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from monark.core.rbac import Principal

RESULT_LIMIT = 20_000  # characters of a result the model reads, unless a tool says


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call; ``mutates`` drives the confirm gate. ``validate`` refuses
    arguments before anything runs; ``summarize`` shrinks a result for the model (the card
    keeps it whole), which reads at most ``result_limit`` characters of it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    mutates: bool
    permission: str | None = None
    validate: Callable[[dict[str, Any]], str | None] | None = field(default=None, compare=False)
    summarize: Callable[[Any], Any] | None = field(default=None, compare=False)
    result_limit: int = RESULT_LIMIT
    # A question to the user: it waits PROPOSED like a write, and the answer is its result.
    asks_user: bool = False
    # What the host declared the tool from (its route), for its own rules; chat never reads it.
    declared: object | None = field(default=None, compare=False)


@dataclass
class ToolOutcome:
    """What a tool run gave: a JSON-able result or an error, and what undoing it takes."""

    ok: bool
    result: Any = None
    error: str | None = None
    details: list[dict[str, Any]] = field(default_factory=list)
    undo: dict[str, Any] | None = None


class ChatToolExecutor(Protocol):
    """Lists tools and runs one as a principal (who acts via the assistant)."""

    def specs(self, principal: Principal | None = None) -> list[ToolSpec]:
        """The tools; for ``principal``, as their turn shows them (descriptions may say more)."""
        ...

    def execute(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> ToolOutcome: ...

    def preview(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> dict[str, Any] | None:
        """What the call would do, for its card (``{"headline", "changes"?, ...}``), as stored."""
        ...

    def precheck(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> ToolOutcome | None:
        """A failed outcome if a write's arguments can never work, by shape (never permissions)."""
        ...


class ProposalGate(Protocol):
    """The host's say on proposals: which run at once, a claim's first word, and expiry."""

    def runs_at_once(
        self, actor: Principal, conversation: Any, spec: ToolSpec | None, call: Any
    ) -> bool:
        """Whether the just-proposed ``call`` runs without asking anyone."""
        ...

    def on_claim(self, principal: Principal, conversation_id: int) -> None:
        """Called as a turn claims its conversation, before it stores anything."""
        ...

    def expire_overdue(self, principal: Principal, conversation_id: int) -> None:
        """Expire the conversation's proposals past their time (before anything reads them)."""
        ...


class AlwaysAsk:
    """The gate before the host injects one: every write waits for a decision, for good."""

    def runs_at_once(
        self, actor: Principal, conversation: Any, spec: ToolSpec | None, call: Any
    ) -> bool:
        return False

    def on_claim(self, principal: Principal, conversation_id: int) -> None:
        return None

    def expire_overdue(self, principal: Principal, conversation_id: int) -> None:
        return None  # no host, no time limit


class NoTools:
    """The executor before the host injects one: no tools, every call fails closed."""

    def specs(self, principal: Principal | None = None) -> list[ToolSpec]:
        return []

    def execute(self, principal: Principal, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        return ToolOutcome(ok=False, error=f"Unknown tool '{name}'.")

    def preview(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> dict[str, Any] | None:
        return None

    def precheck(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> ToolOutcome | None:
        return None
