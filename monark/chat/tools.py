"""The tool executor contract. The host builds the executor and injects it at boot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from monark.core.rbac import Principal


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call; ``mutates`` drives the confirm gate."""

    name: str
    description: str
    input_schema: dict[str, Any]
    mutates: bool
    permission: str | None = None
    # How the UI names the action, e.g. "create a record" (cards say "Wants to …").
    action_label: str = ""


@dataclass
class ToolOutcome:
    """What a tool run gave: a JSON-able result, or an error the model and the user see."""

    ok: bool
    result: Any = None
    error: str | None = None
    details: list[dict[str, Any]] = field(default_factory=list)


class ChatToolExecutor(Protocol):
    """Lists tools and runs one as a principal (who acts via the assistant)."""

    def specs(self) -> list[ToolSpec]: ...

    def execute(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> ToolOutcome: ...

    def describe(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> dict[str, Any] | None:
        """What the call would do, for its card: ``{"headline", "changes"?, ...}``."""
        ...

    def precheck(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> ToolOutcome | None:
        """A failed outcome if a write's arguments can never work (so no card is shown).

        It checks shape only, never permissions: a refused write still asks the user, and
        fails when confirmed, as the same click in the app would.
        """
        ...


class NoTools:
    """The executor before the host injects one: no tools, every call fails closed."""

    def specs(self) -> list[ToolSpec]:
        return []

    def execute(self, principal: Principal, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        return ToolOutcome(ok=False, error=f"Unknown tool '{name}'.")

    def describe(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> dict[str, Any] | None:
        return None

    def precheck(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> ToolOutcome | None:
        return None


_executor: ChatToolExecutor = NoTools()


def set_chat_tool_executor(executor: ChatToolExecutor) -> None:
    """Install the host's tool executor (called by ``create_app``)."""
    global _executor
    _executor = executor


def get_chat_tool_executor() -> ChatToolExecutor:
    """The installed tool executor."""
    return _executor
