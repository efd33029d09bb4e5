"""Rate limits, on Flask-Limiter: one limiter per app, its counts in memory or in Redis.

What is limited (the numbers: ``LimitSettings``, each 0 for off):

- failed sign-ins (``signin_failures``): three counts over a moving window, one email from
  one client address, one address whatever the email (an office behind one address has
  typos too), and one email from anywhere (high, so that a stranger cannot lock someone
  out with a handful of wrong passwords);
- turns a user starts per minute (``check_messages``: a message, Retry), and decisions a
  user takes on cards per minute (``check_decisions``: Confirm, Reject, Allow, Confirm
  selected), counted apart so that confirming many cards never blocks a message;
- calls of one API key per minute on /api/v1, all its routes and methods counted together
  (Flask-Limiter's own shared limit on the blueprint, so the MCP server, which calls
  /api/v1 with its key, is limited too);
- ``records_query`` calls of one principal per minute (``check_queries``);
- turns running at once in one org: counted from the turn leases in the database
  (``monark.chat.turn.lease``), not here.

With ``RATELIMIT_STORAGE_URI=redis://…`` every worker and instance shares the counts. A
storage that does not answer fails open for pages (sign-in, /api/v1: a warning is logged
and the request goes on) and closed for the model path (messages and queries: 503).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Flask, Response, current_app, request
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from limits import RateLimitItemPerMinute
from limits.storage import MovingWindowSupport

from monark.core.auth import in_process
from monark.core.errors import AppError, RateLimited
from monark.core.settings import LimitSettings, settings

_KEY = "monark.limiter"
log = logging.getLogger(__name__)


class LimiterDown(AppError):
    """The limiter's storage did not answer on the model path: refused (fail closed)."""

    code, status = "unavailable", 503

    def __init__(self) -> None:
        super().__init__(
            "The assistant is paused for a moment (its rate limiter is not answering)."
        )
        self.headers = {"Retry-After": "5"}


def wait_words(seconds: int) -> str:
    """ "30 seconds", "1 minute", "15 minutes": how long to wait, said plainly."""
    if seconds < 60:
        return f"{seconds} second{'' if seconds == 1 else 's'}"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} minute{'' if minutes == 1 else 's'}"


def _api_key() -> str:
    """/api/v1's key: a digest of the bearer token (no lookup; the view authenticates it)."""
    header = request.headers.get("Authorization", "")
    return hashlib.sha256(header[7:].strip().encode()).hexdigest()[:32]


def _not_a_key_call() -> bool:
    header = request.headers.get("Authorization", "")
    off = settings().limits.api_per_minute == 0
    return off or in_process() or header[:7].lower() != "bearer "


def init_app(app: Flask, api_blueprint: Any) -> Limiter:
    """Give ``app`` its limiter (storage from the settings) and limit ``api_blueprint``."""
    limits = settings(app).limits
    limiter = Limiter(
        key_func=get_remote_address,
        storage_uri=limits.storage_uri,
        key_prefix=limits.key_prefix,
        strategy="moving-window",  # exactly N in any minute, not 2N across a boundary
        headers_enabled=True,
        swallow_errors=True,  # pages fail open: Flask-Limiter logs and lets them through
        enabled=limits.enabled,
    )
    # Registered before the limiter's own: Flask runs it after the limiter has set its
    # headers, and takes away the Retry-After Flask-Limiter puts on every answer (a
    # client reading it on a 200 would wait for nothing).
    app.after_request(_retry_after_only_when_refused)
    limiter.init_app(app)
    # One count per key across every route and method: a limit per route (``limit``'s
    # way on a blueprint) would let one key make N calls a minute of each.
    limiter.shared_limit(
        lambda: f"{max(1, settings().limits.api_per_minute)}/minute",
        scope="api-key",
        key_func=_api_key,
        error_message="Too many requests with this API key; see Retry-After.",
    )(api_blueprint)
    # Only a key's calls of /api/v1 carry a limit of Flask-Limiter's: every other request
    # (pages, the assistant's in-process calls) is let go before it resolves any limit.
    name = api_blueprint.name
    limiter.request_filter(lambda: request.blueprint != name or _not_a_key_call())
    app.extensions[_KEY] = limiter
    return limiter


def _retry_after_only_when_refused(response: Response) -> Response:
    headers = response.headers
    if "X-RateLimit-Limit" in headers and response.status_code not in (429, 503):
        headers.pop("Retry-After", None)
    # A limit of ours that refused (``RateLimited``: a key's records_query calls, say) set
    # its own figures first; the key's, added after them, would join them as "30, 300".
    for name in ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"):
        if len(values := headers.getlist(name)) > 1:
            headers[name] = values[0]
    return response


def limiter(app: Flask | None = None) -> Limiter:
    """The app's limiter."""
    found = (app if app is not None else current_app).extensions[_KEY]
    return found  # type: ignore[no-any-return]


def reset(app: Flask) -> None:
    """Forget every count (tests)."""
    limiter(app).reset()


# ---- counts kept by hand (sign-in failures, turns, queries) ----------------------------


def _now() -> float:
    return time.time()


clock: Callable[[], float] = _now  # the storage's clock (limits reads time.time)


@dataclass
class FailureCounts:
    """Failed attempts per key (``email:…``, ``ip:…``) over a moving ``window`` (seconds), in
    a limiter storage. ``limits`` sets another limit for keys starting with a prefix.

    The storage's moving-window entries are used directly: a failure is always recorded
    (a limit of one more than ours), and a key is blocked once ``limit`` of them are within
    the window, until the oldest of those leaves it.
    """

    storage: MovingWindowSupport
    limit: int
    window: int
    limits: dict[str, int]
    prefix: str = "monark"

    def _limit_of(self, key: str) -> int:
        return next((n for p, n in self.limits.items() if key.startswith(p)), self.limit)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/signin/{key}"

    def retry_after(self, *keys: str) -> int:
        """Seconds until any of ``keys`` may try again; 0 when none is blocked."""
        wait = 0.0
        for key in keys:
            limit = self._limit_of(key)
            oldest, count = self.storage.get_moving_window(self._key(key), limit, self.window)
            if count >= limit:
                wait = max(wait, oldest + self.window - clock())
        return max(0, int(wait + 0.999))

    def failed(self, *keys: str) -> None:
        """Count a failed attempt against each key."""
        for key in keys:
            self.storage.acquire_entry(self._key(key), self._limit_of(key) + 1, self.window)

    def clear(self, key: str) -> None:
        """Forget a key's failures (after a successful sign-in)."""
        self.storage.clear(self._key(key))


class _NoCounts:
    """The storage of sign-in failures when rate limits are off: nothing is ever blocked
    (a disabled Flask-Limiter has no storage at all)."""

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        return 0.0, 0

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return True

    def clear(self, key: str) -> None:
        return None


def signin_counts(app: Flask | None = None) -> FailureCounts:
    """The app's failed sign-in counts (none kept when ``RATELIMIT_ENABLED`` is off)."""
    limits: LimitSettings = settings(app).limits
    found = limiter(app)
    return FailureCounts(
        # Memory and Redis both keep moving windows.
        found.storage if found.enabled else _NoCounts(),  # type: ignore[arg-type]
        limits.signin_failures,
        limits.signin_window,
        {"ip:": limits.signin_ip_failures, "email:": limits.signin_account_failures},
        limits.key_prefix,
    )


def _per_minute(kind: str, amount: int, key: str) -> None:
    """One more ``kind`` against ``key``'s per-minute ``amount``; fails closed. ``kind`` is a
    plural noun: it names the window in the storage and what the refusal says too many of."""
    found = limiter()
    if amount == 0 or not found.enabled:
        return
    item = RateLimitItemPerMinute(amount)
    ids = (settings().limits.key_prefix, kind, key)
    try:
        if found.limiter.hit(item, *ids):
            return
        reset_at = found.limiter.get_window_stats(item, *ids)[0]
    except Exception as err:
        log.warning("rate limiter storage failed (%s): %s refused", type(err).__name__, kind)
        raise LimiterDown() from None
    wait = max(1, math.ceil(reset_at - clock()))
    message = f"Too many {kind}: {amount} a minute at most; try again in {wait_words(wait)}."
    raise RateLimited(message, wait, amount, reset_at)


def check_messages(user_id: int) -> None:
    """Count a turn the user starts; ``RateLimited`` past the per-minute limit."""
    _per_minute("messages", settings().limits.messages_per_minute, str(user_id))


def check_decisions(user_id: int) -> None:
    """Count a decision the user takes on a card; ``RateLimited`` past the per-minute limit."""
    _per_minute("decisions", settings().limits.decisions_per_minute, str(user_id))


def check_queries(principal_key: str) -> None:
    """Count a ``records_query`` call; ``RateLimited`` past the per-minute limit."""
    _per_minute("queries", settings().limits.queries_per_minute, principal_key)
