"""What a tool's route declares for approvals (``core.routes``): whether a user may allow
its writes for a conversation, and on which target. Chat carries the route on the tool's
spec (``ToolSpec.declared``) without reading it; a tool not declared by a route (``navigate``)
declares nothing (and locks no argument)."""

from __future__ import annotations

from monark.chat.executor import ToolSpec
from monark.core.routes import AllowScope, RouteDescriptor


def route_of(spec: ToolSpec | None) -> RouteDescriptor | None:
    """The route ``spec`` was declared from, if any."""
    declared = spec.declared if spec is not None else None
    return declared if isinstance(declared, RouteDescriptor) else None


def locked(spec: ToolSpec | None) -> tuple[str, ...]:
    """The arguments that name a write's target (its route's path params): a person editing
    a proposed call never changes them, so the write stays on the target its card named."""
    route = route_of(spec)
    return tuple(route.path_params()) if route is not None else ()


def allowable(spec: ToolSpec | None) -> bool:
    """Whether the route says its writes may be allowed (creates and updates, never a delete)."""
    route = route_of(spec)
    return route is not None and route.allowable


def allow_scope(spec: ToolSpec | None) -> AllowScope | None:
    """What an allowance of the tool covers besides it (a record tool's model); None: the
    tool as a whole."""
    route = route_of(spec)
    return route.allow_scope if route is not None else None
