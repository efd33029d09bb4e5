"""The /api/v1 blueprint: one Flask view per route descriptor."""

from __future__ import annotations

from flask import Blueprint, Flask, jsonify, request

from monark.api.openapi import build_openapi
from monark.api.registry import RouteDescriptor, parse_part
from monark.api.routes import V1_ROUTES
from monark.core.auth import guard, require_principal
from monark.core.errors import ValidationFailed
from monark.core.jsonbody import request_json

bp = Blueprint("api", __name__, url_prefix="/api/v1")


def _locate(route: RouteDescriptor, err: ValidationFailed) -> None:
    """Say where each service-reported field came from (``values.x`` is in the body)."""
    parts = (("path", route.path_model), ("query", route.query_model), ("body", route.body_model))
    for detail in err.details:
        if "in" in detail:
            continue
        head = str(detail.get("field", "")).split(".", 1)[0]
        where = next((w for w, m in parts if m is not None and head in m.model_fields), None)
        if where:
            detail["in"] = where


def make_view(route: RouteDescriptor):
    """Build the Flask view for one descriptor: auth, permission, parse, handle, answer."""

    @guard(route.permission)
    def view(**path_args: str):
        principal = require_principal()
        path = parse_part(route.path_model, path_args, "path")
        query = parse_part(route.query_model, request.args.to_dict(), "query")
        body = parse_part(route.body_model, request_json(), "body") if route.body_model else None
        try:
            result = route.handler(principal, path, query, body)
        except ValidationFailed as err:
            _locate(route, err)
            raise
        return jsonify(result.model_dump(mode="json")), route.status

    view.__name__ = route.name
    view.__doc__ = route.summary
    return view


for _route in V1_ROUTES:
    bp.add_url_rule(_route.flask_rule, _route.name, make_view(_route), methods=[_route.method])


@bp.get("/openapi.json")
def openapi():
    """The OpenAPI 3.1 document of /api/v1, built from the registry."""
    return jsonify(build_openapi(V1_ROUTES))


def register_api(app: Flask) -> None:
    """Mount /api/v1."""
    app.register_blueprint(bp)
