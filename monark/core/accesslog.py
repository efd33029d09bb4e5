"""What an access log may say of a request, under gunicorn and ``flask run`` alike: its
path with every token cut out, and never its query string.

Query strings carry data (``/api/v1/query?sql=…``, a list's ``q`` and ``filter`` values)
and paths carry secrets (``/invite/<token>``, any link that signs in or resets): an
access log is read by more people, and kept longer, than the data it would copy.
"""

from __future__ import annotations

import logging
import re

REDACTED = "[redacted]"

# A path in a request line, a Referer or a Location (``https://host/a/b?c``: its ``//host``
# is a path to this rule, which is harmless), and its query up to the next white space.
_PATH = re.compile(r"(?P<path>/[^\s?#\"']*)(?P<query>\?\S*)?")
_TOKEN_SHAPED = re.compile(r"[A-Za-z0-9_.~=%+-]{16,}")
_HEX = re.compile(r"[0-9a-f-]{32,}")  # digests, UUIDs, token_hex


def is_token(segment: str) -> bool:
    """Whether a path segment looks like a secret rather than a name: 16 or more URL-safe
    characters mixing upper case with lower case or digits (base64, signed tokens), or 32
    or more hex digits. Monark's own names (model keys, ids, static files) never do."""
    if not _TOKEN_SHAPED.fullmatch(segment):
        return False
    lowered = segment.lower()
    if _HEX.fullmatch(lowered) and any(c.isdigit() for c in segment):
        return True
    has_upper = any(c.isupper() for c in segment)
    return has_upper and any(c.islower() or c.isdigit() for c in segment)


def safe_path(path: str) -> str:
    """``path`` with each segment that is a token replaced by ``[redacted]``."""
    return "/".join(REDACTED if is_token(s) else s for s in path.split("/"))


def safe_query(query: str | None) -> str | None:
    """A query string as a log may show it: that there was one, not what it said."""
    return REDACTED if query else query


def redact(text: str) -> str:
    """``text`` (a request line, a URL, a header) with every path in it made safe and
    every query string replaced by ``?[redacted]``."""

    def one(match: re.Match[str]) -> str:
        query = match.group("query")
        return safe_path(match.group("path")) + ("?" + REDACTED if query else "")

    return _PATH.sub(one, text) if "/" in text else text


class RequestLogFilter(logging.Filter):
    """Makes werkzeug's request log (``flask run``) safe: each string it formats into a
    line goes through ``redact``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif not record.args and isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def install_request_log_filter() -> None:
    """Put ``RequestLogFilter`` on werkzeug's logger, once per process."""
    logger = logging.getLogger("werkzeug")
    if not any(isinstance(f, RequestLogFilter) for f in logger.filters):
        logger.addFilter(RequestLogFilter())
