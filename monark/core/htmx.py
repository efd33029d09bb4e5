"""Reading and writing htmx's HX-* headers in one place."""

from __future__ import annotations

from flask import Response, request


def is_htmx() -> bool:
    """True when htmx made this request."""
    return request.headers.get("HX-Request") == "true"


def is_boosted() -> bool:
    """True for a boosted navigation (a whole page rendered, main area swapped)."""
    return request.headers.get("HX-Boosted") == "true"


def is_partial() -> bool:
    """True when htmx wants a fragment rather than a page (a targeted, non-boosted swap)."""
    return is_htmx() and not is_boosted()


def redirect_htmx(response: Response, url: str) -> Response:
    """Tell htmx to navigate to ``url`` (boosted-style, keeping the panel)."""
    response.headers["HX-Location"] = url
    return response


def trigger(response: Response, event: str) -> Response:
    """Fire a client-side event after the swap."""
    response.headers["HX-Trigger"] = event
    return response
