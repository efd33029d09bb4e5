"""The header's search and its results page: ``/search?q=``."""

from __future__ import annotations

from flask import Blueprint, current_app, render_template, request

from monark.core.auth import guard, require_principal
from monark.core.errors import ValidationFailed
from monark.core.htmx import targets
from monark.search import services
from monark.search.links import url_of

bp = Blueprint("search", __name__, url_prefix="/search")

HEADER_LIMIT = 12  # what the header's list shows; the page shows up to MAX_LIMIT
BOX, RESULTS = "search-popup", "search-results"


@bp.get("")
@guard()
def page():
    """Results for ``q``: the header box's list (htmx), the page's list, or the page."""
    principal = require_principal()
    query = request.args.get("q", "")
    in_box = targets(BOX)
    hits: list[services.Hit] = []
    error = None
    try:
        if in_box:  # asked for as the user types: the last word may be half of one
            hits = services.search(principal, query, HEADER_LIMIT, typing=True)
        else:
            hits = services.search(principal, query, services.MAX_LIMIT)
    except ValidationFailed as err:
        error = err.message
    context = {
        "query": query,
        "groups": services.grouped(hits),
        "count": len(hits),
        "error": error,
        "url_of": url_of,
    }
    status = 422 if error else 200
    if in_box:
        # Drawn on every pause in typing: without the page's context (the header's, the
        # panel's), whose queries would cost more than the search; it needs none of it.
        return current_app.jinja_env.get_template("search/_popup.html").render(context), status
    template = "search/_results.html" if targets(RESULTS) else "search/page.html"
    return render_template(template, **context), status
