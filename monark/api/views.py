"""The /api/v1 blueprint: one view per public route descriptor, and the OpenAPI document."""

from __future__ import annotations

from flask import jsonify

from monark.api.openapi import build_openapi
from monark.api.routes import V1_ROUTES
from monark.core.routes import routes_blueprint

bp = routes_blueprint("api", __name__, V1_ROUTES)


@bp.get("/openapi.json")
def openapi():
    """The OpenAPI 3.1 document of /api/v1, built from the route descriptors."""
    return jsonify(build_openapi(V1_ROUTES))
