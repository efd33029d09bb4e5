"""A small sign-in throttle: too many failures wait a while.

Three counts, each over ``WINDOW``: one email from one client IP (``LIMIT``), one client IP
whatever the email (``IP_LIMIT``: an office behind one address has typos too), and one email
from anywhere (``ACCOUNT_LIMIT``).
The last one caps guessing spread over many addresses; it is high so that a stranger cannot
lock someone out of their account with a handful of wrong passwords.

The counts live in this process's memory, behind a lock. Each process counts on its own:
with several gunicorn workers or instances an attacker gets up to LIMIT tries per process,
and a restart forgets everything. That is enough to slow down password guessing; a shared
store (a table, Redis) would be the next step if it is not.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from monark.core.auth import verify_password
from monark.core.models import User

LIMIT = 10  # failed sign-ins per email and IP ...
IP_LIMIT = 50  # ... or per IP, whatever the email ...
ACCOUNT_LIMIT = 100  # ... or per email, from any address ...
WINDOW = 15 * 60  # ... within this many seconds
_SWEEP_AT = 10_000  # keys kept before stale ones are dropped (at most once a minute)


class LoginThrottle:
    """Failed sign-in times per key (``email:…``, ``ip:…``), the newest ``limit`` of each.

    ``limits`` sets another limit for the keys starting with a prefix (``{"email:": 100}``).
    """

    def __init__(
        self,
        limit: int = LIMIT,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
        limits: dict[str, int] | None = None,
    ):
        self.limit = limit
        self.limits = limits or {}
        self.window = window
        self.clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, deque[float]] = {}
        self._swept = 0.0

    def retry_after(self, *keys: str) -> int:
        """Seconds until any of ``keys`` may try again; 0 when none is blocked."""
        now = self.clock()
        wait = 0.0
        with self._lock:
            for key in keys:
                times = self._failures.get(key)
                if times is not None and len(times) >= self._limit_of(key):
                    # The oldest of the last ``limit`` failures frees a try when it expires.
                    wait = max(wait, times[0] + self.window - now)
        return max(0, int(wait + 0.999))

    def failed(self, *keys: str) -> None:
        """Count a failed attempt against each key."""
        now = self.clock()
        with self._lock:
            if len(self._failures) >= _SWEEP_AT and now - self._swept >= 60:
                self._sweep(now)
            for key in keys:
                times = self._failures.setdefault(key, deque(maxlen=self._limit_of(key)))
                times.append(now)

    def _limit_of(self, key: str) -> int:
        return next((n for p, n in self.limits.items() if key.startswith(p)), self.limit)

    def clear(self, key: str) -> None:
        """Forget a key's failures (after a successful sign-in)."""
        with self._lock:
            self._failures.pop(key, None)

    def reset(self) -> None:
        """Forget everything (tests)."""
        with self._lock:
            self._failures.clear()

    def _sweep(self, now: float) -> None:
        self._swept = now
        stale = [k for k, times in self._failures.items() if times[-1] + self.window <= now]
        for key in stale:
            del self._failures[key]


login_throttle = LoginThrottle(limits={"ip:": IP_LIMIT, "email:": ACCOUNT_LIMIT})


@dataclass(frozen=True)
class PasswordCheck:
    """The outcome of a throttled password check."""

    ok: bool
    retry_after: int = 0  # > 0: throttled, and the password was not even checked


def check_password(
    user: User | None, email: str, password: str, ip: str | None, method: str
) -> PasswordCheck:
    """Check a sign-in password under the throttle (counts: see the module).

    A success forgets the failures of that email from that address only: the per-email
    count keeps running, so slow guessing from many addresses does not restart each time
    the account's owner signs in.
    """
    keys = (f"email-ip:{email}|{ip}", f"ip:{ip}", f"email:{email}")
    wait = login_throttle.retry_after(*keys)
    if wait:
        return PasswordCheck(ok=False, retry_after=wait)
    if not verify_password(user, password, method):
        login_throttle.failed(*keys)
        return PasswordCheck(ok=False)
    login_throttle.clear(keys[0])
    return PasswordCheck(ok=True)
