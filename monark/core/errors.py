"""Domain errors raised by services, mapped to HTTP answers in one place."""

from __future__ import annotations

import sqlite3
from typing import Any

from flask import Flask, current_app, jsonify, render_template, request
from pydantic import ValidationError
from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException

from monark.core.accesslog import safe_path
from monark.core.htmx import is_htmx, is_partial
from monark.extensions import db


class AppError(Exception):
    """Base domain error; ``code`` and ``status`` shape the HTTP answer."""

    code = "error"
    status = 400

    def __init__(self, message: str, details: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.message = message
        self.details = details or []


class Unauthorized(AppError):
    code, status = "unauthorized", 401


class Forbidden(AppError):
    code, status = "forbidden", 403


class NotFound(AppError):
    code, status = "not_found", 404


class Conflict(AppError):
    code, status = "conflict", 409


class RateLimited(AppError):
    """Over a limit: 429 with ``Retry-After`` and the RateLimit headers."""

    code, status = "rate_limited", 429

    def __init__(self, message: str, retry_after: int, limit: int = 0, reset: float = 0.0):
        super().__init__(message)
        self.retry_after = max(1, retry_after)
        self.headers = {"Retry-After": str(self.retry_after)}
        if limit:
            # Flask-Limiter's names for them, as /api/v1's own answers carry
            # (``monark.core.ratelimit``).
            self.headers |= {
                "X-RateLimit-Limit": str(limit),
                "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset": str(int(reset)),
            }


class ValidationFailed(AppError):
    """Input failed validation; ``details`` lists ``{"field", "message"}`` items."""

    code, status = "validation_error", 400

    @classmethod
    def from_pydantic(
        cls, err: ValidationError, message: str, where: str | None = None
    ) -> ValidationFailed:
        """Pydantic's errors as details naming each field (and where it was, if given)."""
        details = []
        for item in err.errors(include_url=False):
            detail = {"field": ".".join(str(p) for p in item["loc"]) or where or "body"}
            if where is not None:
                detail["in"] = where
            detail["message"] = item["msg"]
            details.append(detail)
        return cls(message, details)

    def detail_text(self) -> str:
        """The details' messages on one line (for a flash); the message when there are none."""
        return "; ".join(str(item.get("message", "")) for item in self.details) or self.message

    def field_errors(self) -> dict[str, str]:
        """The details as a mapping of field name to its first message (for forms)."""
        out: dict[str, str] = {}
        for item in self.details:
            out.setdefault(str(item.get("field", "")), str(item.get("message", "")))
        return out


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    429: "rate_limited",
    503: "unavailable",
}

# PostgreSQL's SQLSTATEs of a server that cannot serve now: shutting down (admin, crash),
# starting up, too many connections; class 08 (connection exceptions) too.
_PG_OUTAGE_STATES = frozenset({"57P01", "57P02", "57P03", "53300"})
# What SQLite says when the file cannot be reached, read or locked in time.
_SQLITE_OUTAGE = ("unable to open database file", "disk i/o error", "database is locked")
RETRY_AFTER_SECONDS = 5
UNAVAILABLE = "Monark cannot reach its database just now. Try again in a moment."
# Set on a request whose answer says the database is down: drawing that answer must not
# ask the database again (who is signed in, the navigation, the assistant's gates).
_DATABASE_DOWN_KEY = "monark.database_down"


def is_outage(err: BaseException) -> bool:
    """Whether a database error means the database did not answer (a refused or dropped
    connection, no connection free in the pool, a lock held past the wait): a moment later
    it may, so it is answered with Monark's 503. Anything else (SQL that cannot run, a
    full disk, a deadlock, a cancelled statement) is a fault, answered 500 and logged."""
    if isinstance(err, InterfaceError | PoolTimeout):
        return True
    if not isinstance(err, DBAPIError):
        return False
    if err.connection_invalidated:
        return True
    if not isinstance(err, OperationalError):
        return False
    cause = err.orig
    if isinstance(cause, sqlite3.Error):
        said = str(cause).lower()
        return any(words in said for words in _SQLITE_OUTAGE)
    if hasattr(cause, "sqlstate"):  # psycopg
        state = cause.sqlstate
        # None: no server ever answered (the connection could not be made, or broke).
        return state is None or state.startswith("08") or state in _PG_OUTAGE_STATES
    return False


def database_down() -> bool:
    """Whether this request is being answered with "the database is down"."""
    return bool(request.environ.get(_DATABASE_DOWN_KEY))


def wants_json() -> bool:
    """True for API calls, internal JSON endpoints and clients that ask for JSON, not HTML."""
    if request.path.startswith(("/api/", "/internal/")):
        return True
    best = request.accept_mimetypes.best_match(["text/html", "application/json"])
    return best == "application/json" and not is_htmx()


def error_json(code: str, message: str, status: int, details: list | None = None):
    """The API's error body: ``{"error": {"code", "message", "details"}}``."""
    body = {"error": {"code": code, "message": message, "details": details or []}}
    return jsonify(body), status


def error_page(status: int, message: str, retry: bool = False) -> str:
    """An error for a browser: the error page, or a notice alone for an htmx request that
    wants a fragment (a panel or a part of a page must not hold a whole page). ``retry``:
    it offers to send the same request again (htmx's, by script; a page's, as a link)."""
    template = "_error.html" if is_partial() else "error.html"
    how = None
    if retry:
        how = "button" if is_htmx() else "link" if request.method == "GET" else "form"
    try:
        return render_template(template, status=status, message=message, retry=how)
    except SQLAlchemyError as err:
        if not is_outage(err):
            raise
        # Another error (an expired CSRF token, a page that does not exist) while the
        # database is down: drawing who is signed in failed, so draw it signed out.
        _leave_database()
        return render_template(template, status=status, message=message, retry=how)


def _leave_database() -> None:
    """Stop asking the database in this request: what it held is undone (or gone with
    the connection), and the answer is drawn without it (``database_down``)."""
    request.environ[_DATABASE_DOWN_KEY] = True
    try:
        db.session.rollback()
    except SQLAlchemyError:  # the connection is gone with what it held: nothing to undo
        db.session.close()


def unavailable(err: Exception) -> tuple[Any, int, dict[str, str]]:
    """The answer while the database is down: 503 with ``Retry-After``, as JSON for API
    clients, a notice with Retry for htmx, or the error page; none of them reads it."""
    _leave_database()
    cause = getattr(err, "orig", None) or err
    said = (str(cause).strip().splitlines() or [""])[0][:200]  # never the SQL or its values
    current_app.logger.warning(
        "database unavailable (%s: %s) in %s %s",
        type(cause).__name__,
        said,
        request.method,
        safe_path(request.path),
    )
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if wants_json():
        body, status = error_json("unavailable", UNAVAILABLE, 503)
        return body, status, headers
    return error_page(503, UNAVAILABLE, retry=True), 503, headers


def register_error_handlers(app: Flask) -> None:
    """Answer domain and HTTP errors as JSON for API clients and HTML for browsers."""

    @app.errorhandler(AppError)
    def handle_app_error(err: AppError):
        db.session.rollback()
        headers = getattr(err, "headers", None) or {}  # Retry-After of a limit, say
        if wants_json():
            body, status = error_json(err.code, err.message, err.status, err.details)
            return body, status, headers
        # Validation of a browser form is shown inline by its view; reaching here is unexpected.
        return error_page(err.status, err.message), err.status, headers

    @app.errorhandler(HTTPException)
    def handle_http_error(err: HTTPException):
        status = err.code or 500
        if status == 400 and getattr(err, "description", "").startswith("The CSRF"):
            message = "The form expired or is missing its CSRF token. Reload the page and retry."
        elif status == 413:
            limit = app.config.get("MAX_CONTENT_LENGTH")
            message = f"The request body is larger than the {limit} byte limit."
        else:
            message = err.description or err.name
        # A 405 says which methods the address takes (werkzeug's own answer would).
        allowed = getattr(err, "valid_methods", None)
        headers = {"Allow": ", ".join(allowed)} if status == 405 and allowed else {}
        if wants_json():
            # A too-large body is a problem of one part of the request: name it, like 400s do.
            details = [{"field": "body", "in": "body", "message": message}] if status == 413 else []
            body, _ = error_json(_HTTP_CODES.get(status, "error"), message, status, details)
            return body, status, headers
        return error_page(status, message), status, headers

    @app.errorhandler(OverflowError)
    @app.errorhandler(DataError)
    def handle_out_of_range(err: Exception):
        # A number too large for the database's integer columns (SQLite raises
        # OverflowError while binding it, PostgreSQL a DataError): bad input, not a crash.
        db.session.rollback()
        app.logger.info("out-of-range value in %s %s: %s", request.method, request.path, err)
        message = "A number or value in the request is out of range."
        if wants_json():
            return error_json("bad_request", message, 400)
        return error_page(400, message), 400

    @app.errorhandler(DBAPIError)
    @app.errorhandler(PoolTimeout)
    def handle_database_error(err: SQLAlchemyError):
        if is_outage(err):
            return unavailable(err)
        # A fault, not an outage: raised on, it takes the normal 500 path (logged with its
        # traceback, then ``handle_server_error``).
        raise err

    @app.errorhandler(500)
    def handle_server_error(err):
        db.session.rollback()
        if wants_json():
            return error_json("internal_error", "Something went wrong on our side.", 500)
        return error_page(500, "Something went wrong."), 500
