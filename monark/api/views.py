"""The /api/v1 blueprint: one view per public route descriptor, and the OpenAPI document."""

from __future__ import annotations

from flask import Response, jsonify, request

from monark.api import key_holds
from monark.api.openapi import build_openapi
from monark.api.routes import V1_ROUTES
from monark.core.auth import current_principal, in_process
from monark.core.routes import routes_blueprint

bp = routes_blueprint("api", __name__, V1_ROUTES)
_WRITES = {f"{bp.name}.{r.name}": r for r in V1_ROUTES if r.mutates}


@bp.before_request
def _hold_writes_for_approval():
    """A write of a key whose writes are held is rehearsed through the dispatcher (the view
    answers a bad one), held and answered 202; it runs once a member approves it (through
    the dispatcher too, in-process, so this lets it through then)."""
    route = _WRITES.get(request.endpoint or "")
    if route is None or in_process():
        return None
    principal = current_principal()
    if principal is None or not key_holds.writes_held(principal, route.name):
        return None
    call = key_holds.hold_request(principal, route)
    answer = key_holds.pending_answer(call)
    return Response(
        answer.model_dump_json(),
        202,
        mimetype="application/json",
        headers={"Location": answer.status_url},
    )


@bp.get("/openapi.json")
def openapi():
    """The OpenAPI 3.1 document of /api/v1, built from the route descriptors."""
    return jsonify(build_openapi(V1_ROUTES))
