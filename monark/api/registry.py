"""Route descriptors: each /api/v1 endpoint declared once.

From one ``RouteDescriptor`` come the Flask view, its OpenAPI entry and, when
``mcp_tool_name`` is set, the agent tool (MCP server and in-app assistant).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

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
