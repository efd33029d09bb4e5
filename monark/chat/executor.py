"""What the host injects into the loop: its tool executor (the tools, ``ToolSpec``, and how
one runs, ``ToolOutcome``) and its proposal gate (whether a proposed write runs at once).
The host builds both and installs them on the app (``monark.chat.runtime.install``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from monark.core.rbac import Principal

RESULT_LIMIT = 20_000  # characters of a result the model reads, unless a tool says


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call; ``mutates`` drives the confirm gate.

    Two hooks keep what the model meets small and safe: ``validate`` refuses arguments
    before anything runs (its message is what the model reads); ``summarize`` shrinks a
    successful result to what the model needs (the stored result, and the user's card, keep
    it whole). Whatever the model reads of a result is cut at ``result_limit`` characters,
    with a marker saying so.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    mutates: bool
    permission: str | None = None
    validate: Callable[[dict[str, Any]], str | None] | None = field(default=None, compare=False)
    summarize: Callable[[Any], Any] | None = field(default=None, compare=False)
    result_limit: int = RESULT_LIMIT
    # A question to the user (``ask_user``): its call waits PROPOSED like a write, nothing
    # runs it, and the user's answer settles it as its result (``decisions.Settlement``).
    asks_user: bool = False
    # What the host declared the tool from (its route), for the host's own rules about it
    # (``approvals.declared``: allowances, locked arguments); chat never reads it.
    declared: object | None = field(default=None, compare=False)


@dataclass
class ToolOutcome:
    """What a tool run gave: a JSON-able result, or an error the model and the user see;
    for a done write the host can put back, what that takes (kept as ``ToolCall.undo``)."""

    ok: bool
    result: Any = None
    error: str | None = None
    details: list[dict[str, Any]] = field(default_factory=list)
    undo: dict[str, Any] | None = None


class ChatToolExecutor(Protocol):
    """Lists tools and runs one as a principal (who acts via the assistant)."""

    def specs(self, principal: Principal | None = None) -> list[ToolSpec]:
        """The tools; for ``principal``, as their turn shows them (descriptions may say
        more for the caller, such as the tables their SQL can read)."""
        ...

    def execute(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> ToolOutcome: ...

    def preview(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> dict[str, Any] | None:
        """What the call would do, for its card (``{"headline", "changes"?, ...}``), as it is
        stored: the host bounds it and adds what its decisions compare."""
        ...

    def precheck(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> ToolOutcome | None:
        """A failed outcome if a write's arguments can never work (so no card is shown).

        It checks shape only, never permissions: a refused write still asks the user, and
        fails when confirmed, as the same click in the app would.
        """
        ...


class ProposalGate(Protocol):
    """What the host decides about proposals (``runtime.install``): whether a proposed write
    may run at once, and what a turn's claim does first."""

    def runs_at_once(
        self, actor: Principal, conversation: Any, spec: ToolSpec | None, call: Any
    ) -> bool:
        """Whether the just-proposed ``call`` runs without asking anyone."""
        ...

    def on_claim(self, principal: Principal, conversation_id: int) -> None:
        """Called as a turn claims its conversation, before it stores anything."""
        ...


class AlwaysAsk:
    """The gate before the host injects one: every write waits for a decision."""

    def runs_at_once(
        self, actor: Principal, conversation: Any, spec: ToolSpec | None, call: Any
    ) -> bool:
        return False

    def on_claim(self, principal: Principal, conversation_id: int) -> None:
        return None


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
