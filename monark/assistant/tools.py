"""``build_chat_toolset``: the assistant's tools, built from the route registry.

Each route exposed to agents becomes a tool whose input schema flattens the route's path
params, query and body into one object. A call splits the arguments again, validates
each part with the route's own models, and runs the route's view in-process as the user.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from monark.api.dispatch import dispatch
from monark.api.registry import (
    RouteDescriptor,
    describe_error,
    prepare_call,
    tool_description,
    tool_input_schema,
)
from monark.assistant.describe import DESCRIBERS
from monark.chat.tools import ToolOutcome, ToolSpec
from monark.core.errors import ValidationFailed
from monark.core.rbac import Principal

API_PREFIX = "/api/v1"


@dataclass(frozen=True)
class RouteTool:
    """A tool that calls one /api/v1 route in-process."""

    route: RouteDescriptor
    spec: ToolSpec

    def precheck(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome | None:
        """The route's own models reject the arguments: fail before asking the user."""
        try:
            prepare_call(self.route, arguments)
        except ValidationFailed as err:
            error = describe_error("Invalid arguments.", err.details)
            return ToolOutcome(ok=False, error=error, details=err.details)
        return None

    def run(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome:
        route = self.route
        invalid = self.precheck(principal, arguments)
        if invalid is not None:
            return invalid
        call = prepare_call(route, arguments)
        response = dispatch(
            principal, route.method, API_PREFIX + call.path, query=call.query, json_body=call.body
        )
        if not response.ok:
            details = response.error_details()
            error = describe_error(response.error_message(), details)
            return ToolOutcome(ok=False, error=error, details=details)
        return ToolOutcome(ok=True, result=response.body)


def route_tool(route: RouteDescriptor) -> RouteTool:
    """The tool for one exposed route."""
    assert route.mcp_tool_name, route.name
    return RouteTool(
        route=route,
        spec=ToolSpec(
            name=route.mcp_tool_name,
            description=tool_description(route),
            input_schema=tool_input_schema(route),
            mutates=route.mutates,
            permission=route.permission,
        ),
    )


class Tool:
    """What the executor needs of a tool: its spec and a way to run it."""

    spec: ToolSpec

    def run(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome:
        raise NotImplementedError


class ChatToolset:
    """The merged tool set, implementing ``monark.chat.tools.ChatToolExecutor``."""

    def __init__(self, tools: Iterable[RouteTool | Tool]):
        self._tools: dict[str, RouteTool | Tool] = {}
        for tool in tools:
            if tool.spec.name in self._tools:
                raise ValueError(f"two tools are named {tool.spec.name}")
            self._tools[tool.spec.name] = tool
        self._specs = sorted((t.spec for t in self._tools.values()), key=lambda s: s.name)

    def specs(self) -> list[ToolSpec]:
        return list(self._specs)

    def execute(self, principal: Principal, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        tool = self._tools.get(name)
        if tool is None:
            return ToolOutcome(ok=False, error=f"Unknown tool '{name}'.")
        return tool.run(principal, arguments)

    def describe(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> dict[str, Any] | None:
        tool = self._tools.get(name)
        if tool is None:
            return {"headline": f"run a tool nobody registered (“{name}”)"}
        describer = DESCRIBERS.get(name) or getattr(tool, "describe", None)
        if describer is not None:
            preview = describer(principal, arguments)
        else:
            preview = {"headline": tool.spec.action_label or f"run {name}"}
        permission = tool.spec.permission
        if permission is None and hasattr(tool, "required_permission"):
            permission = tool.required_permission()
        if tool.spec.mutates and permission and not principal.can(permission):
            # The card still asks (the click is what the app would refuse), but says so.
            preview["warning"] = (
                f"Your role ({principal.role}) lacks {permission}: confirming will be refused."
            )
        return preview

    def precheck(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> ToolOutcome | None:
        tool = self._tools.get(name)
        check = getattr(tool, "precheck", None)
        return check(principal, arguments) if check is not None else None


def build_chat_toolset(
    routes: Iterable[RouteDescriptor], in_app_tools: Iterable[Tool] = ()
) -> ChatToolset:
    """Every route exposed to agents as a tool, merged with the in-app-only tools."""
    exposed = [route_tool(r) for r in routes if r.mcp_tool_name]
    return ChatToolset([*exposed, *in_app_tools])
