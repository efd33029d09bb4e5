"""Route descriptors: each /api/v1 endpoint declared once.

From one ``RouteDescriptor`` come the Flask view, its OpenAPI entry and, when
``mcp_tool_name`` is set, the agent tool (MCP server and in-app assistant).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ValidationError

from monark.core.errors import ValidationFailed
from monark.core.rbac import Principal

HttpMethod = Literal["GET", "POST", "PATCH", "PUT", "DELETE"]
Location = Literal["path", "query", "body"]

Handler = Callable[[Principal, Any, Any, Any], BaseModel]


@dataclass(frozen=True)
class RouteDescriptor:
    """One public API action: HTTP shape, schemas, permission and agent exposure."""

    method: HttpMethod
    path: str
    name: str
    summary: str
    permission: str
    handler: Handler
    response_model: type[BaseModel]
    path_model: type[BaseModel] | None = None
    query_model: type[BaseModel] | None = None
    body_model: type[BaseModel] | None = None
    mcp_tool_name: str | None = None
    description: str = ""
    status: int = 200

    @property
    def mutates(self) -> bool:
        """Anything but GET changes data (this drives the assistant's confirm gate)."""
        return self.method != "GET"

    @property
    def flask_rule(self) -> str:
        """The path with ``{param}`` written as Flask's ``<param>``."""
        return re.sub(r"\{(\w+)\}", r"<\1>", self.path)

    def path_params(self) -> list[str]:
        """Names of the ``{param}`` parts of the path, in order."""
        return re.findall(r"\{(\w+)\}", self.path)


def validation_details(err: ValidationError, where: Location) -> list[dict[str, str]]:
    """Pydantic errors as ``{"field", "in", "message"}`` items naming each field."""
    details = []
    for item in err.errors(include_url=False):
        loc = ".".join(str(p) for p in item["loc"]) or where
        details.append({"field": loc, "in": where, "message": item["msg"]})
    return details


def parse_part(model: type[BaseModel] | None, data: Any, where: Location) -> BaseModel | None:
    """Validate one part of a request with the route's own model."""
    if model is None:
        return None
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as err:
        raise ValidationFailed(
            f"The request {where} is invalid.", validation_details(err, where)
        ) from None


def _model_schema(model: type[BaseModel] | None) -> dict[str, Any]:
    return model.model_json_schema() if model is not None else {}


def tool_input_schema(route: RouteDescriptor) -> dict[str, Any]:
    """One JSON Schema object: the path params, query and body properties together."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    defs: dict[str, Any] = {}
    for part in (route.path_model, route.query_model, route.body_model):
        schema = _model_schema(part)
        for name, prop in schema.get("properties", {}).items():
            if name in properties:
                raise ValueError(f"{route.name}: argument '{name}' appears twice")
            prop = {k: v for k, v in copy.deepcopy(prop).items() if k != "title"}
            properties[name] = prop
        required += [n for n in schema.get("required", []) if n not in required]
        defs.update(schema.get("$defs", {}))
    out: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    if defs:
        out["$defs"] = defs
    return out


def tool_description(route: RouteDescriptor) -> str:
    """The agent tool's description: the route's summary, then its longer description."""
    return route.summary + (f"\n\n{route.description}" if route.description else "")


def describe_error(message: str, details: list[dict[str, Any]]) -> str:
    """An error as one line an agent can act on: the message, then each field's problem."""
    listing = "; ".join(f"{d.get('field', '?')}: {d.get('message', '')}" for d in details)
    return f"{message} {listing}".strip() if listing else message


def _names(model: type[BaseModel] | None) -> set[str]:
    return set(model.model_fields) if model is not None else set()


def split_arguments(
    route: RouteDescriptor, arguments: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A tool's flat arguments back into path params, query and body; unknown names are errors."""
    path_names, query_names = _names(route.path_model), _names(route.query_model)
    body_names = _names(route.body_model)
    path: dict[str, Any] = {}
    query: dict[str, Any] = {}
    body: dict[str, Any] = {}
    unknown: list[str] = []
    for name, value in arguments.items():
        if name in path_names:
            path[name] = value
        elif name in query_names:
            query[name] = value
        elif name in body_names:
            body[name] = value
        else:
            unknown.append(name)
    if unknown:
        known = ", ".join(sorted(path_names | query_names | body_names)) or "none"
        raise ValidationFailed(
            "Unknown arguments.",
            [{"field": n, "message": f"Unknown argument (known: {known})."} for n in unknown],
        )
    return path, query, body


@dataclass(frozen=True)
class RouteCall:
    """A tool call turned into a request of its route, its arguments already validated."""

    route: RouteDescriptor
    path: str  # the route's path with its params filled in (URL-quoted), without /api/v1
    query: dict[str, Any] | None
    body: dict[str, Any] | None


def prepare_call(route: RouteDescriptor, arguments: Mapping[str, Any]) -> RouteCall:
    """Split and validate a tool's arguments with the route's own models (``ValidationFailed``)."""
    path_raw, query_raw, body_raw = split_arguments(route, arguments)
    path = parse_part(route.path_model, path_raw, "path")
    query = parse_part(route.query_model, query_raw, "query")
    body = parse_part(route.body_model, body_raw, "body")
    params = path.model_dump() if path is not None else {}
    return RouteCall(
        route=route,
        path=route.path.format(**{k: quote(str(v), safe="") for k, v in params.items()}),
        query=query.model_dump(mode="json", exclude_none=True) if query else None,
        body=body.model_dump(mode="json", exclude_unset=True) if body else None,
    )
