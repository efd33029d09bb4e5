"""Reading and writing htmx's HX-* headers in one place."""

from __future__ import annotations

from flask import Response, redirect, request


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


def redirect_full(url: str) -> Response:
    """After a save that changes the header, nav or assistant panel: a full page load of ``url``.

    A boosted form swaps only ``#main``, so htmx gets ``HX-Redirect`` (htmx then sets
    ``location.href``; it honours the header whatever the status, so 204 with no body).
    Anything else gets the usual 303. Flashed messages wait in the session for that load.
    """
    if is_htmx():
        return Response(status=204, headers={"HX-Redirect": url})
    return redirect(url, 303)


def trigger(response: Response, event: str) -> Response:
    """Fire a client-side event after the swap."""
    response.headers["HX-Trigger"] = event
    return response
