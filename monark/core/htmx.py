"""Reading and writing htmx's HX-* headers in one place."""

from __future__ import annotations

from typing import Any

from flask import Response, redirect, render_template, request

REQUEST = "HX-Request"


def is_htmx() -> bool:
    """True when htmx made this request."""
    return request.headers.get(REQUEST) == "true"


def is_partial() -> bool:
    """True when htmx wants a fragment rather than a page (a targeted, non-boosted swap)."""
    return is_htmx() and request.headers.get("HX-Boosted") != "true"


def targets(element_id: str) -> bool:
    """True when htmx swaps only ``#element_id`` (its HX-Target is ``tag#id`` or ``#id``)."""
    return is_partial() and request.headers.get("HX-Target", "").endswith(f"#{element_id}")


def current_url() -> str:
    """The address of the page htmx made this request from ("" for other requests)."""
    return request.headers.get("HX-Current-URL", "")


def render_swap(element_id: str, partial: str, page: str, /, **context: Any) -> str:
    """``partial`` alone when htmx swaps ``#element_id`` (a search, a next page), else the
    whole ``page`` (which includes the partial)."""
    return render_template(partial if targets(element_id) else page, **context)


def reload(url: str) -> Response:
    """Make htmx load ``url`` as a whole page (``HX-Redirect``; htmx honours it whatever the
    status, so 204 with no body)."""
    return Response(status=204, headers={"HX-Redirect": url})


def redirect_full(url: str) -> Response:
    """After a save that changes the header, nav or assistant panel: a full page load of ``url``.

    A boosted form swaps only ``#main``, so htmx gets ``HX-Redirect`` (``reload``). Anything
    else gets the usual 303. Flashed messages wait in the session for that load.
    """
    if is_htmx():
        return reload(url)
    return redirect(url, 303)


def vary(response: Response) -> Response:
    """Say that ``response`` differs for htmx (a fragment, not a page), so no cache hands one
    to the other."""
    if is_htmx():
        response.headers.add("Vary", REQUEST)
    return response


def push_url(response: Response, url: str) -> Response:
    """Make htmx put ``url`` in the address bar for this answer (``HX-Push-Url``: the
    canonical address of what was asked, whatever the form sent)."""
    if is_htmx():
        response.headers["HX-Push-Url"] = url
    return response
