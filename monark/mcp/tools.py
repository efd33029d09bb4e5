"""The MCP tools: one per route exposed to agents, described exactly as the in-app tools are."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import mcp.types as types

from monark.api.schemas import ApprovalPending
from monark.core.routes import RouteDescriptor, tool_description, tool_input_schema


def tool_annotations(route: RouteDescriptor) -> types.ToolAnnotations:
    """Hints for clients: reads are read-only; which writes destroy data or can be repeated."""
    if not route.mutates:
        return types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
    return types.ToolAnnotations(
        read_only_hint=False,
        # MCP's "not destructive" means only additive: a PATCH can clear a field, so only
        # POST (which adds a record) is marked non-destructive.
        destructive_hint=route.method != "POST",
        idempotent_hint=route.method in ("PUT", "PATCH", "DELETE"),
        open_world_hint=False,
    )


def output_schema(route: RouteDescriptor) -> dict[str, Any]:
    """The route's answer; for a write, either that or the approval it waits for (a key
    marked "writes need approval" gets 202 with ``ApprovalPending``)."""
    answer = route.response_model.model_json_schema(mode="serialization")
    if not route.mutates:
        return answer
    pending = ApprovalPending.model_json_schema(mode="serialization")
    defs = {**answer.pop("$defs", {}), **pending.pop("$defs", {})}
    schema: dict[str, Any] = {"type": "object", "anyOf": [answer, pending]}
    if defs:
        schema["$defs"] = defs
    return schema


def route_tool(route: RouteDescriptor) -> types.Tool:
    """The MCP tool for one exposed route: name, description, input and output schemas."""
    assert route.audience == "public", route.name
    return types.Tool(
        name=route.name,
        description=tool_description(route),
        input_schema=tool_input_schema(route),
        output_schema=output_schema(route),
        annotations=tool_annotations(route),
    )


def exposed_routes(routes: Iterable[RouteDescriptor]) -> dict[str, RouteDescriptor]:
    """The routes exposed to external agents, by tool name."""
    return {r.name: r for r in routes if r.audience == "public"}
