"""Signed-in sessions, one row each (``UserSession``): listed on the profile, signed out one by
one or all but this one.

The session cookie carries a random token (``SESSION_KEY``); the row keeps its digest. The
user loader (``core/auth._load_user``) reads the user and the row in one query, so a signed
out (revoked) session is signed out at its next request. How recently a session was used is
written at most once a minute (``TOUCH_EVERY``), after the request, on a connection of its
own. A cookie from before these rows (no token) gets its row at its first request.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import Flask, Response, request, session
from flask_login import login_user
from sqlalchemy import insert, select, update

from monark.core.errors import NotFound
from monark.core.models import User, UserSession, as_utc, utcnow
from monark.extensions import db

log = logging.getLogger(__name__)

SESSION_KEY = "sid"
TOUCH_EVERY = timedelta(minutes=1)
MAX_AGENT = 300
_STATE = "_monark_user_session"  # on the request: (row id, whether to touch, token to adopt)


def digest(token: str) -> str:
    """The stored form of a session token."""
    return hashlib.sha256(token.encode()).hexdigest()


def _client() -> tuple[str, str | None]:
    agent = (request.headers.get("User-Agent") or "")[:MAX_AGENT]
    return agent, (request.remote_addr or None)


def begin(user: User) -> None:
    """Sign ``user`` in on this browser, as a new session with a row of its own."""
    login_user(user)
    token = secrets.token_urlsafe(32)
    agent, ip = _client()
    now = utcnow()
    db.session.add(
        UserSession(
            user_id=user.id,
            token_hash=digest(token),
            user_agent=agent,
            ip=ip,
            created_at=now,
            last_seen_at=now,
        )
    )
    db.session.commit()
    session[SESSION_KEY] = token
    setattr(request, _STATE, None)


def end() -> None:
    """Mark this browser's session signed out (its row), before the cookie is cleared."""
    token = session.get(SESSION_KEY)
    if isinstance(token, str):
        db.session.execute(
            update(UserSession)
            .where(UserSession.token_hash == digest(token), UserSession.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
        db.session.commit()


def load(user_id: int) -> User | None:
    """The user of this request's session cookie and its row, in one query; None when the
    row is signed out or is another user's. Called by the user loader only."""
    token = session.get(SESSION_KEY)
    if token is None:  # a cookie from before session rows: it gets one after this request
        user = db.session.get(User, user_id)
        if user is not None:
            setattr(request, _STATE, (None, False, secrets.token_urlsafe(32)))
        return user
    if not isinstance(token, str):
        return None
    found = db.session.execute(
        select(User, UserSession.id, UserSession.last_seen_at)
        .join(UserSession, UserSession.user_id == User.id)
        .where(
            UserSession.token_hash == digest(token),
            UserSession.revoked_at.is_(None),
            User.id == user_id,
        )
    ).first()
    if found is None:
        return None
    user, row_id, seen = found
    stale = as_utc(seen) is None or utcnow() - as_utc(seen) >= TOUCH_EVERY
    setattr(request, _STATE, (row_id, stale, None))
    return user


def current_id() -> int | None:
    """The id of this request's session row (after the user was loaded), if known."""
    state = getattr(request, _STATE, None)
    return state[0] if state else None


def _after(response: Response) -> Response:
    """Write what the request learnt of its session: last seen, or a row for an old cookie."""
    state = getattr(request, _STATE, None)
    if not state or not (state[1] or state[2]):
        return response
    row_id, _, adopt = state
    if adopt is not None and not str(session.get("_user_id", "")).partition(":")[0].isdigit():
        return response  # signed out during the request: nothing to adopt
    agent, ip = _client()
    now = utcnow()
    try:
        # A connection of its own: the request's transaction is the view's business.
        with db.engine.begin() as conn:
            if adopt is not None:
                user_id = session.get("_user_id", "").partition(":")[0]
                conn.execute(
                    insert(UserSession).values(
                        user_id=int(user_id),
                        token_hash=digest(adopt),
                        user_agent=agent,
                        ip=ip,
                        created_at=now,
                        last_seen_at=now,
                    )
                )
                session[SESSION_KEY] = adopt
            else:
                conn.execute(
                    update(UserSession)
                    .where(UserSession.id == row_id)
                    .values(last_seen_at=now, ip=ip)
                )
    except Exception as err:  # a session's last-seen time is not worth failing a page
        log.warning("session row not written (%s)", type(err).__name__)
    return response


def init_app(app: Flask) -> None:
    """Write last-seen times (and old cookies' rows) after each request."""
    app.after_request(_after)


# ---- the profile's list ---------------------------------------------------------------------


@dataclass(frozen=True)
class SessionView:
    """One signed-in session as the profile lists it."""

    id: int
    device: str
    ip: str | None
    created_at: datetime
    last_seen_at: datetime
    current: bool


def active(user_id: int, current: int | None) -> list[SessionView]:
    """The user's sessions not signed out, most recently used first."""
    rows = db.session.scalars(
        select(UserSession)
        .where(UserSession.user_id == user_id, UserSession.revoked_at.is_(None))
        .order_by(UserSession.last_seen_at.desc(), UserSession.id.desc())
    )
    return [
        SessionView(
            row.id,
            device_of(row.user_agent),
            row.ip,
            row.created_at,
            row.last_seen_at,
            row.id == current,
        )
        for row in rows
    ]


def revoke(user_id: int, session_id: int) -> None:
    """Sign out one of the user's sessions (``NotFound``: not theirs, or signed out already);
    the caller commits."""
    done = db.session.execute(
        update(UserSession)
        .where(
            UserSession.id == session_id,
            UserSession.user_id == user_id,
            UserSession.revoked_at.is_(None),
        )
        .values(revoked_at=utcnow())
    )
    if done.rowcount != 1:
        raise NotFound("No such session.")


def revoke_all(user_id: int, keep: int | None = None) -> int:
    """Sign out every session of the user but ``keep``; how many. The caller commits."""
    stmt = update(UserSession).where(
        UserSession.user_id == user_id, UserSession.revoked_at.is_(None)
    )
    if keep is not None:
        stmt = stmt.where(UserSession.id != keep)
    return db.session.execute(stmt.values(revoked_at=utcnow())).rowcount


# ---- devices --------------------------------------------------------------------------------

# First match wins: Edge and Opera say "Chrome" too, Chrome says "Safari", Android "Linux".
_BROWSERS = (
    ("Edge", re.compile(r"\bEdg(e|A|iOS)?/")),
    ("Opera", re.compile(r"\b(OPR|Opera)/")),
    ("Firefox", re.compile(r"\b(Firefox|FxiOS)/")),
    ("Chrome", re.compile(r"\b(HeadlessChrome|Chrome|Chromium|CriOS)/")),
    ("Safari", re.compile(r"\bVersion/[\d.]+.*\bSafari/")),
)
_SYSTEMS = (
    ("iOS", re.compile(r"\b(iPhone|iPad|iPod)\b")),
    ("Android", re.compile(r"\bAndroid\b")),
    ("ChromeOS", re.compile(r"\bCrOS\b")),
    ("Windows", re.compile(r"\bWindows\b")),
    ("macOS", re.compile(r"\bMac OS X\b|\bMacintosh\b")),
    ("Linux", re.compile(r"\bLinux\b|\bX11\b")),
)


def device_of(agent: str) -> str:
    """A User-Agent said shortly: "Chrome on Linux", "Safari on iOS", "Unknown device"."""
    browser = next((name for name, pattern in _BROWSERS if pattern.search(agent)), None)
    system = next((name for name, pattern in _SYSTEMS if pattern.search(agent)), None)
    if browser and system:
        return f"{browser} on {system}"
    return browser or (f"A browser on {system}" if system else "Unknown device")
