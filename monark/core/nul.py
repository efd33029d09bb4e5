"""NUL (``\\x00``) in a request's text: PostgreSQL text cannot hold it, so it is refused,
naming the field, on every database alike (JSON bodies: ``monark.core.jsonbody``).

An API client is refused up front. A browser's form or query is answered the way its
page answers any invalid value, with what was typed kept: each NUL becomes U+FFFD (which
shows where it was, and can go nowhere it cannot be stored) and the request is marked.
A marked request commits nothing and looks nothing up by that text: its commit, or the
first statement that would read with the text, raises ``ValidationFailed`` naming the
field. A view already catches that from the service it called, so it draws the field's
error beside the form as sent; the rest of the request is rolled back when it ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import has_request_context, request
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session
from werkzeug.datastructures import ImmutableMultiDict

from monark.core.errors import NotFound, ValidationFailed, wants_json
from monark.core.uow import listen_once

NUL, SHOWN = "\x00", "\ufffd"
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
_MARKED = "monark.nul_fields"  # the request environ's key: the details of the refusal


def _refusal(details: list[dict[str, str]]) -> ValidationFailed:
    names = ", ".join(dict.fromkeys(d["field"] for d in details))
    return ValidationFailed(f"Text cannot contain NUL characters: remove it from {names}.", details)


def _marked(values: ImmutableMultiDict[str, str]) -> ImmutableMultiDict[str, str]:
    return ImmutableMultiDict(
        [(k.replace(NUL, SHOWN), v.replace(NUL, SHOWN)) for k, v in values.items(multi=True)]
    )


def refuse_nul() -> None:
    """Before each request: a NUL in the path is no page (404); in the query or a form, it
    is refused for an API client, and marked for a browser (see the module)."""
    if NUL in request.path:
        raise NotFound("No such page.")
    sources = [("query", "args", request.args)]
    if request.mimetype in FORM_TYPES:  # ``request.form`` reads no other body
        sources.append(("form", "form", request.form))
    api = wants_json()
    # A browser shows the text again, with U+FFFD where the NUL was.
    message = (
        "Remove the NUL character." if api else f"Remove the NUL character (shown as {SHOWN})."
    )
    details = [
        {"field": name.replace(NUL, SHOWN), "in": where, "message": message}
        for where, _, values in sources
        for name, value in values.items(multi=True)
        if NUL in name or NUL in value
    ]
    if not details:
        return
    if api:
        raise _refusal(details)
    for where, attribute, values in sources:
        if any(d["in"] == where for d in details):
            setattr(request, attribute, _marked(values))
    request.__dict__.pop("values", None)  # args and form together, read again
    request.environ[_MARKED] = details


def _marked_details() -> list[dict[str, str]] | None:
    return request.environ.get(_MARKED) if has_request_context() else None


def _refuse_commit(session: Session) -> None:
    """A marked request writes nothing (its changes are rolled back when it ends)."""
    if details := _marked_details():
        raise _refusal(details)


def _holds_marked_text(parameters: Any) -> bool:
    values = parameters.values() if isinstance(parameters, Mapping) else parameters or ()
    return any(isinstance(v, str) and SHOWN in v for v in values)


def _refuse_lookup(
    conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> None:
    """A marked request reads nothing by the text it carried (a search, a filter): the view
    says why instead of answering as if nothing matched. Writes wait for the commit, which
    is refused: a failed flush would leave the session unusable for drawing the page."""
    if executemany or not (details := _marked_details()):
        return
    if context is not None and (context.isinsert or context.isupdate or context.isdelete):
        return
    if _holds_marked_text(parameters):
        raise _refusal(details)


def install() -> None:
    """Listen for a marked request's commits and statements (once per process)."""
    listen_once(Session, [("before_commit", _refuse_commit)])
    listen_once(Engine, [("before_cursor_execute", _refuse_lookup)])
