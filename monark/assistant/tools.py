"""The assistant's tool set: every declared route an agent may call, plus ``navigate``.

Every tool speaks one protocol (``AssistantTool``): its ``spec`` (name, description, input
schema, whether it writes, the permission it needs), a ``preview`` (what its card says), a
``precheck`` (arguments that can never work fail before any card) and ``run``. A route's
tool splits the model's arguments with the route's own models and runs the route's view
in-process as the user (``monark.api.dispatch``), so the view's permission check, record
rules, validation, events and audit apply as they do for a click.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from monark.api.dispatch import dispatch_route
from monark.approvals.declared import locked
from monark.approvals.shown import kept_preview
from monark.approvals.undo_plan import run_keeping_undo
from monark.chat.executor import ToolOutcome, ToolSpec
from monark.core.errors import ValidationFailed
from monark.core.rbac import Principal
from monark.core.routes import (
    RouteDescriptor,
    describe_error,
    editable_schema,
    prepare_call,
    tool_description,
    tool_input_schema,
)


class AssistantTool(Protocol):
    """What the tool set needs of a tool."""

    spec: ToolSpec  # a tool may also say more for a caller: ``spec_for(principal)``

    def preview(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
        """What the call's card says: ``{"headline", "changes"?, ...}``."""
        ...

    def precheck(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome | None:
        """A failed outcome when the arguments can never work (no card is shown then)."""
        ...

    def run(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome:
        """Carry the call out as ``principal``."""
        ...


def invalid(message: str, details: list[dict[str, Any]]) -> ToolOutcome:
    """A failed outcome naming each bad field."""
    return ToolOutcome(ok=False, error=describe_error(message, details), details=details)


@dataclass(frozen=True)
class RouteTool:
    """A declared route as a tool."""

    route: RouteDescriptor
    spec: ToolSpec

    @classmethod
    def of(cls, route: RouteDescriptor) -> RouteTool:
        """The tool of one route."""
        spec = ToolSpec(
            name=route.name,
            description=tool_description(route),
            input_schema=tool_input_schema(route),
            mutates=route.mutates,
            permission=route.permission,
            validate=route.validate,
            summarize=route.summarize,
            declared=route,
            **({"result_limit": route.result_limit} if route.result_limit else {}),
        )
        return cls(route, spec)

    def spec_for(self, principal: Principal) -> ToolSpec:
        if self.route.describe is None:
            return self.spec
        more = self.route.describe(principal)
        return replace(self.spec, description=f"{self.spec.description}\n\n{more}")

    def preview(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.route.preview is None:
            return {"headline": f"run {self.spec.name}"}
        return self.route.preview(principal, arguments)

    def edit_schema(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """What a person may change in a proposed call of this route (writes only)."""
        if not self.spec.mutates:
            return None
        if self.route.edit_schema is not None:
            return self.route.edit_schema(principal, arguments)
        return editable_schema(self.spec.input_schema, locked(self.spec))

    def precheck(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome | None:
        try:
            prepare_call(self.route, arguments)
        except ValidationFailed as err:
            return invalid("Invalid arguments.", err.details)
        problems = self.route.precheck(principal, arguments) if self.route.precheck else []
        if problems:
            count = len(problems)
            return invalid(
                f"{count} problem{'s' if count > 1 else ''} to fix; nothing was saved.", problems
            )
        return None

    def run(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome:
        # A write the route can put back keeps what that takes (``approvals.undo_plan``).
        return run_keeping_undo(
            self.route.undo,
            self.spec.name,
            principal,
            arguments,
            lambda: self._run(principal, arguments),
        )

    def _run(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome:
        try:
            response = dispatch_route(principal, self.route, arguments)
        except ValidationFailed as err:  # the route's models refused the arguments
            return invalid("Invalid arguments.", err.details)
        if not response.ok:
            return invalid(response.error_message(), response.error_details())
        return ToolOutcome(ok=True, result=response.body)


class ChatToolset:
    """The tools by name; implements ``monark.chat.executor.ChatToolExecutor``."""

    def __init__(self, tools: Iterable[AssistantTool]):
        self._tools: dict[str, AssistantTool] = {}
        for tool in tools:
            if tool.spec.name in self._tools:
                raise ValueError(f"two tools are named {tool.spec.name}")
            self._tools[tool.spec.name] = tool
        self._specs = sorted((t.spec for t in self._tools.values()), key=lambda s: s.name)

    def specs(self, principal: Principal | None = None) -> list[ToolSpec]:
        if principal is None:
            return list(self._specs)
        return [_spec_for(self._tools[s.name], principal) for s in self._specs]

    def execute(self, principal: Principal, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        tool = self._tools.get(name)
        if tool is None:
            return ToolOutcome(ok=False, error=f"Unknown tool '{name}'.")
        return tool.run(principal, arguments)

    def preview(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> dict[str, Any] | None:
        tool = self._tools.get(name)
        if tool is None:
            return kept_preview({"headline": f"run a tool nobody registered (“{name}”)"})
        preview = tool.preview(principal, arguments)
        permission = tool.spec.permission
        if tool.spec.mutates and permission and not principal.can(permission):
            # The card still asks (the click is what the app would refuse), but says so.
            preview["warning"] = (
                f"Your role ({principal.role}) lacks {permission}: confirming will be refused."
            )
        return kept_preview(preview)  # stored as every card is, with what it showed

    def precheck(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> ToolOutcome | None:
        tool = self._tools.get(name)
        return tool.precheck(principal, arguments) if tool is not None else None

    def edit_schema(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> dict[str, Any] | None:
        edit_schema = getattr(self._tools.get(name), "edit_schema", None)
        return edit_schema(principal, arguments) if edit_schema is not None else None


def _spec_for(tool: AssistantTool, principal: Principal) -> ToolSpec:
    """The tool's spec as the caller's turn shows it (``spec_for`` where a tool has one)."""
    spec_for = getattr(tool, "spec_for", None)
    return spec_for(principal) if spec_for is not None else tool.spec


def build_chat_toolset(
    routes: Iterable[RouteDescriptor], extra: Iterable[AssistantTool] = ()
) -> ChatToolset:
    """Every route an agent may call (public or assistant-only), and the ``extra`` tools."""
    tools: list[AssistantTool] = [RouteTool.of(r) for r in routes if r.audience != "nobody"]
    return ChatToolset([*tools, *extra])
