"""OpenAPI 3.1 for /api/v1, generated from the route descriptors."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from monark.api.schemas import ApprovalPending
from monark.core.routes import MOUNTS, RouteDescriptor, without_titles

REF = "#/components/schemas/{model}"

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "details": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "field": {"type": "string"},
                            "in": {"type": "string"},
                            "message": {"type": "string"},
                        },
                    },
                },
            },
        }
    },
}

_ERROR_TEXT = {
    400: "Invalid input; details name each field",
    401: "Missing, invalid or revoked credentials",
    403: "The caller's role lacks the permission",
    404: "Not found, or not visible to the caller",
    413: "Request body too large",
}


def _schema(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template=REF)
    for name, sub in schema.pop("$defs", {}).items():
        components[name] = sub
    components[model.__name__] = schema
    return {"$ref": REF.format(model=model.__name__)}


def _parameters(model: type[BaseModel] | None, where: str) -> list[dict[str, Any]]:
    if model is None:
        return []
    schema = model.model_json_schema()
    required = set(schema.get("required", []))
    params = []
    for name, prop in without_titles(schema.get("properties", {})).items():
        params.append(
            {
                "name": name,
                "in": where,
                "required": where == "path" or name in required,
                "description": prop.get("description", ""),
                "schema": {k: v for k, v in prop.items() if k != "description"},
            }
        )
    return params


def build_openapi(routes: tuple[RouteDescriptor, ...]) -> dict[str, Any]:
    """The whole document; exposed routes carry ``x-mcp-tool`` with the tool name."""
    components: dict[str, Any] = {"Error": ERROR_SCHEMA}
    paths: dict[str, Any] = {}
    for route in routes:
        op: dict[str, Any] = {
            "operationId": route.name,
            "summary": route.summary,
            "x-permission": route.permission,
            "parameters": _parameters(route.path_model, "path")
            + _parameters(route.query_model, "query"),
            "responses": {
                str(route.status): {
                    "description": "Success",
                    "content": {
                        "application/json": {"schema": _schema(route.response_model, components)}
                    },
                },
                **{
                    str(code): {
                        "description": text,
                        "content": {
                            "application/json": {"schema": {"$ref": REF.format(model="Error")}}
                        },
                    }
                    for code, text in _ERROR_TEXT.items()
                },
            },
        }
        if route.mutates:
            op["responses"]["202"] = {
                "description": (
                    "Held for approval (an API key marked 'writes need approval'): nothing "
                    "changed yet; GET status_url (approvals_get) for the outcome."
                ),
                "content": {"application/json": {"schema": _schema(ApprovalPending, components)}},
            }
        if route.description:
            op["description"] = route.description
        if route.body_model is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": _schema(route.body_model, components)}},
            }
        if route.audience == "public":
            op["x-mcp-tool"] = {"name": route.name, "mutates": route.mutates}
        paths.setdefault(route.path, {})[route.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Monark API", "version": "1"},
        "servers": [{"url": MOUNTS["public"]}],
        "components": {
            "schemas": components,
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "mrk_ API key"},
                "session": {"type": "apiKey", "in": "cookie", "name": "session"},
            },
        },
        "security": [{"apiKey": []}, {"session": []}],
        "paths": paths,
    }
