"""In-process calls to the app's own views, as a given principal.

A request runs through the normal WSGI pipeline (routing, before_request hooks, the guard,
the view's permission check, validation, events, error handlers, after_request and
teardown), with the principal bound in the WSGI environ instead of a cookie or an API key.
It runs as a unit of work (``monark.core.uow``): a fresh app context whose transaction is
kept only when the view answers below 400, and never touches the caller's session.

The environ is built with Flask's ``EnvironBuilder`` (as the test client does) and handed
straight to ``app.wsgi_app``: no test client, cookie jar or test response per call, which
made up most of the dispatcher's own cost (see bench/chat_bench.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from flask import current_app
from flask.testing import EnvironBuilder
from werkzeug.test import run_wsgi_app

from monark.core.auth import PRINCIPAL_ENVIRON_KEY
from monark.core.rbac import Principal
from monark.core.text import scrub
from monark.core.uow import unit_of_work


@dataclass(frozen=True)
class DispatchResponse:
    status: int
    body: Any

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
) -> DispatchResponse:
    """Run ``method path`` in-process as ``principal`` and read its JSON answer."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    builder = EnvironBuilder(
        app,
        path,
        method=method,
        query_string=query or None,
        headers={"Accept": "application/json"},
        json=json_body,
        environ_base={"REMOTE_ADDR": "127.0.0.1"},  # as the test client had it
        environ_overrides={PRINCIPAL_ENVIRON_KEY: principal},
    )
    try:
        environ = builder.get_environ()
    finally:
        builder.close()
    with unit_of_work(read_only=method in ("GET", "HEAD")) as unit:
        body, status, headers = run_wsgi_app(app, environ, buffered=True)
        response = app.response_class(body, status, headers)
        if response.status_code >= 400:
            unit.fail()  # an error answer keeps nothing, whatever the view wrote first
        return DispatchResponse(response.status_code, _json_of(response))


def _json_of(response: Any) -> Any:
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
    # the tool result goes to the model as UTF-8, so make it text that encodes. The app's
    # JSON escapes all non-ASCII, so answers without a "\ud" escape need no walk at all.
    return scrub(body) if b"\\ud" in data else body
