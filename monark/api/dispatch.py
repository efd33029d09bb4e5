"""In-process calls to the app's own views, as a given principal.

A test-client-style request runs through the normal pipeline (routing, the guard, the
view's permission check, validation, events), with the principal bound in the WSGI
environ instead of a cookie or an API key. It runs in a fresh app context, so its
database session commits or rolls back on its own and never touches the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import current_app

from monark.core.auth import PRINCIPAL_ENVIRON_KEY
from monark.core.rbac import Principal


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
    with app.app_context():
        client = app.test_client()
        kwargs: dict[str, Any] = {
            "method": method,
            "query_string": query or None,
            "environ_overrides": {PRINCIPAL_ENVIRON_KEY: principal},
            "headers": {"Accept": "application/json"},
        }
        if json_body is not None:
            kwargs["json"] = json_body
        response = client.open(path, **kwargs)
        return DispatchResponse(response.status_code, response.get_json(silent=True))
