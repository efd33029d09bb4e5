"""In-process calls to the app's own views, as a given principal: the one entry for the
assistant's tool calls, the dry runs of an API key's held writes, and their rehearsal.

A request runs through the normal WSGI pipeline (routing, before_request hooks, the guard,
the view's permission check, validation, events, error handlers, after_request and
teardown), with the principal bound in the WSGI environ instead of a cookie or an API key.
It runs as a unit of work (``monark.core.uow``): a fresh app context whose transaction is
kept only when the view answers below 400 (never in a dry run), and never touches the
caller's session.

The environ is encoded as Flask's ``EnvironBuilder`` (the test client's) encodes it, and the
request runs as ``Flask.wsgi_app`` runs it through Flask's public API (``request_context``,
``full_dispatch_request``, ``handle_exception``), keeping the ``Response``: no test client,
cookie jar, WSGI iterator or response rebuilt from it per call (bench/chat_bench.py
measures both ways). In-process calls skip what only a browser needs (the session cookie,
security headers: ``monark.core.auth.in_process``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from io import BytesIO
from typing import Any
from urllib.parse import quote, unquote, urlencode

from flask import Flask, Response, current_app, request
from flask.testing import EnvironBuilder
from werkzeug.datastructures import iter_multi_items

from monark.core.auth import PRINCIPAL_ENVIRON_KEY
from monark.core.rbac import Principal
from monark.core.routes import ARGUMENTS_ENVIRON_KEY, RouteDescriptor, prepare_call
from monark.core.text import scrub
from monark.core.uow import unit_of_work


@dataclass(frozen=True)
class DispatchResponse:
    status: int
    body: Any
    # What the view parsed, as the route's tool takes it (a rehearsal's only).
    arguments: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status < 400

    def error_message(self) -> str:
        """The API error's message, or the status when the body has none."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return str(self.body["error"].get("message") or f"HTTP {self.status}")
        return f"The request failed with HTTP {self.status}."

    def error_details(self) -> list[dict[str, Any]]:
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return list(self.body["error"].get("details") or [])
        return []


def dispatch(
    principal: Principal,
    method: str,
    path: str,
    *,
    query: dict[str, Any] | None = None,
    json_body: Any = None,
    dry_run: bool = False,
) -> DispatchResponse:
    """Run ``method path`` in-process as ``principal`` and read its JSON answer; a
    ``dry_run`` keeps nothing of it (nor starts what its events would)."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    pairs = [(k, v) for k, v in iter_multi_items(query or {}) if v is not None]
    query_string = urlencode(pairs, safe="!$'()*,/:;?@")  # as ``EnvironBuilder`` encodes it
    data = app.json.dumps(json_body).encode() if json_body is not None else None
    environ = _environ(app, principal, method, path, query_string, data)
    return _run(app, environ, read_only=method in ("GET", "HEAD"), dry_run=dry_run)


def dispatch_route(
    principal: Principal,
    route: RouteDescriptor,
    arguments: dict[str, Any],
    *,
    dry_run: bool = False,
) -> DispatchResponse:
    """Call ``route`` with a tool's flat arguments, split and validated by its own models
    first (``ValidationFailed``)."""
    call = prepare_call(route, arguments)
    return dispatch(
        principal, route.method, call.url, query=call.query, json_body=call.body, dry_run=dry_run
    )


def rehearse(principal: Principal) -> DispatchResponse:
    """The current request run again in-process as ``principal`` and rolled back, with the
    arguments its view parsed: the view's own parsing and checks answer it, once."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    data = request.get_data(cache=True) or None
    environ = _environ(
        app,
        principal,
        request.method,
        quote(request.path),  # as a caller names it: ``_environ`` decodes it again
        request.query_string.decode("latin1"),
        data,
    )
    if data is not None:
        environ["CONTENT_TYPE"] = request.content_type or ""
    environ[ARGUMENTS_ENVIRON_KEY] = parsed = {}
    answer = _run(app, environ, read_only=False, dry_run=True)
    return DispatchResponse(answer.status, answer.body, parsed)


def _run(
    app: Flask, environ: dict[str, Any], *, read_only: bool, dry_run: bool
) -> DispatchResponse:
    """The request in a unit of work, kept only when it answers below 400 (and is no dry run)."""
    with unit_of_work(read_only=read_only) as unit:
        response = _handle(app, environ)
        try:
            if dry_run or response.status_code >= 400:
                unit.fail()  # an error answer keeps nothing, whatever the view wrote first
            return DispatchResponse(response.status_code, _json_of(response))
        finally:
            response.close()


def _environ(
    app: Flask,
    principal: Principal,
    method: str,
    path: str,
    query_string: str,
    data: bytes | None,
) -> dict[str, Any]:
    """The request's WSGI environ: the app's base one (what ``EnvironBuilder`` gives for
    ``/``, made once per app) with this call's method, path, query and JSON body, encoded as
    ``EnvironBuilder`` encodes them; building it whole each time cost a fifth of the
    dispatcher's own time."""
    base = app.extensions.get("monark.dispatch.environ")
    if base is None:
        builder = EnvironBuilder(
            app,
            "/",
            headers={"Accept": "application/json"},
            environ_base={"REMOTE_ADDR": "127.0.0.1"},  # as the test client has it
        )
        base = app.extensions["monark.dispatch.environ"] = builder.get_environ()
        builder.close()
    raw_uri = path.encode().decode("latin1")
    environ = base | {
        "REQUEST_METHOD": method,
        "PATH_INFO": unquote(path).encode().decode("latin1"),
        "QUERY_STRING": query_string,
        "REQUEST_URI": raw_uri,
        "RAW_URI": raw_uri,
        "wsgi.input": BytesIO(),
        PRINCIPAL_ENVIRON_KEY: principal,
    }
    if data is not None:
        environ |= {
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(data)),
            "wsgi.input": BytesIO(data),
        }
    return environ


def _handle(app: Flask, environ: dict[str, Any]) -> Response:
    """What ``Flask.wsgi_app`` does for one request, through Flask's public API, keeping its
    ``Response``: the request context around the whole pipeline, an unhandled error turned
    into its 500 (or raised, when the app propagates exceptions). Unlike ``wsgi_app``, an
    error turned into a 500 is not handed to teardown functions (the app has none that
    read it)."""
    with app.request_context(environ):
        try:
            return app.full_dispatch_request()
        except Exception as err:
            return app.handle_exception(err)


def _json_of(response: Response) -> Any:
    """The view's JSON answer. Plain ``json.loads``: the app's own output needs none of the
    checks the app's JSON provider makes on request bodies (depth, NUL), which would cost
    more than the parse itself."""
    if not response.is_json:
        return None
    data = response.get_data()
    try:
        body = json.loads(data)
    except ValueError:
        return None
    # A JSON column hands back lone surrogates as stored, escaped in the answer ("\ud800"):
    # the tool result goes to the model as UTF-8, so make it text that encodes. Only such
    # answers are written with escapes (``answer_json``'s fallback), so the others need no
    # walk at all.
    return scrub(body) if b"\\ud" in data else body
