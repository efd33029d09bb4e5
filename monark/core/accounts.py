"""Accounts: password rules, changing and resetting a password, changing the email.

Reset and email-change links are signed (itsdangerous, with the deployment's secret) and
name what they were made against: a fingerprint of the account's password hash, email and
session version. Any of those changing (the link used, the password changed) kills every
link made before it, so a link works once. Changing or resetting a password raises the
account's session version, which signs out its other sessions (``core/auth._load_user``),
and ends their rows (``core/sessions``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from typing import Any

from flask import current_app
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from monark.core import jobs, mail, sessions
from monark.core.auth import hash_password, verify_password
from monark.core.errors import AppError, Conflict, ValidationFailed
from monark.core.events import record_event
from monark.core.models import User
from monark.core.ratelimit import signin_counts
from monark.core.rbac import Principal
from monark.core.settings import settings
from monark.extensions import db

log = logging.getLogger(__name__)

MIN_PASSWORD = 10
MAX_PASSWORD = 200
MAX_EMAIL = 255
RESET_MAX_AGE = 3600  # seconds a reset link works
EMAIL_MAX_AGE = 24 * 3600  # seconds an email-change link works
RESET_SALT = "monark.password-reset"
EMAIL_SALT = "monark.email-change"


class LinkGone(AppError):
    """A reset or email-change link that no longer works (expired, used, not ours)."""

    code, status = "link_gone", 400


def password_problems(password: str, field: str = "password") -> list[dict[str, str]]:
    """What is wrong with a new password, as ``{"field", "message"}`` items (none: fine)."""
    if len(password or "") < MIN_PASSWORD:
        return [{"field": field, "message": f"Use at least {MIN_PASSWORD} characters."}]
    if len(password) > MAX_PASSWORD:
        return [{"field": field, "message": f"Use at most {MAX_PASSWORD} characters."}]
    return []


def _method() -> str:
    return str(current_app.config["PASSWORD_HASH_METHOD"])


def _set_password(user: User, password: str) -> None:
    """A new password, and every session signed in before it is signed out."""
    user.password_hash = hash_password(password, _method())
    user.session_version = (user.session_version or 0) + 1
    sessions.revoke_all(user.id)  # off the profile's list too (the caller begins its own)


def change_password(principal: Principal, user: User, current: str, new: str) -> None:
    """Change ``user``'s password, proven with the current one; commits."""
    problems = []
    if not verify_password(user, current or "", _method()):
        problems.append({"field": "current_password", "message": "That is not your password."})
    problems += password_problems(new, "new_password")
    if problems:
        raise ValidationFailed("Check the form.", problems)
    _set_password(user, new)
    record_event(principal, "user.updated", "user", user.id, {"fields": ["password"]})
    db.session.commit()


# ---- signed links -------------------------------------------------------------------------


def _fingerprint(user: User) -> str:
    """What a link is bound to: it changes when the password, email or sessions change."""
    raw = f"{user.password_hash}|{user.email.lower()}|{user.session_version}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def _serializer(salt: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(settings().secret_key, salt=salt)


def _load(salt: str, token: str, max_age: int) -> list[Any]:
    try:
        value = _serializer(salt).loads(token, max_age=max_age)
    except SignatureExpired:
        raise LinkGone("This link has expired.") from None
    except BadSignature:
        raise LinkGone("This link is not valid.") from None
    if not isinstance(value, list) or len(value) < 2 or not isinstance(value[0], int):
        raise LinkGone("This link is not valid.")
    return value


def _account_of(value: list[Any]) -> User:
    user = db.session.get(User, value[0])
    if user is None or not hmac.compare_digest(str(value[-1]), _fingerprint(user)):
        raise LinkGone("This link was used already, or the account changed since it was sent.")
    return user


def reset_token(user: User) -> str:
    """A link's token that resets ``user``'s password once, within ``RESET_MAX_AGE``."""
    return _serializer(RESET_SALT).dumps([user.id, _fingerprint(user)])


def reset_account(token: str) -> User:
    """The account a reset token is for; ``LinkGone`` when it no longer works."""
    return _account_of(_load(RESET_SALT, token, RESET_MAX_AGE))


def reset_password(token: str, new: str) -> User:
    """Set a new password through a reset link (which then stops working); commits."""
    user = reset_account(token)
    if problems := password_problems(new, "password"):
        raise ValidationFailed("Check the form.", problems)
    _set_password(user, new)
    db.session.commit()
    return user


def throttled(email: str, ip: str | None) -> int:
    """Count one reset request of ``email`` from ``ip``; seconds to wait when over the limit
    (the failed sign-in limits, under keys of their own). A limiter storage that does not
    answer lets the request go on (fail open, logged), as sign-in does."""
    counts = signin_counts()
    keys = (f"reset:{email}", f"reset-ip:{ip}")
    try:
        wait = counts.retry_after(*keys)
        if not wait:
            counts.failed(*keys)
    except Exception as err:
        log.warning("rate limiter storage failed (%s): reset not limited", type(err).__name__)
        return 0
    return wait


def request_reset(email: str) -> None:
    """Queue the reset mail of ``email``: the job looks the account up, so this request
    takes the same time, and answers the same, whether one exists or not."""
    send_reset.enqueue(email.strip().lower()[:MAX_EMAIL], mail.sending_base())


@jobs.job("accounts.send_reset")
def send_reset(email: str, base: str) -> None:
    """Mail a reset link to the account of ``email``, if there is one (else nothing)."""
    user = db.session.scalar(select(User).where(func.lower(User.email) == email))
    if user is None:
        return
    with mail.links_under(base):
        link = mail.link("account.reset_link", token=reset_token(user))
        mail.send("reset", user.email, user.id, name=user.name, email=user.email, link=link)


# ---- changing the email -------------------------------------------------------------------


@dataclass(frozen=True)
class EmailChange:
    """An email change waiting for its confirmation link."""

    user: User
    new_email: str


def _clean_email(raw: str) -> str:
    email = (raw or "").strip().lower()
    local, _, domain = email.partition("@")
    if not local or "." not in domain or len(email) > MAX_EMAIL or any(c.isspace() for c in email):
        raise ValidationFailed(
            "Check the form.", [{"field": "email", "message": "Give a valid email address."}]
        )
    return email


def _taken(email: str, user: User) -> bool:
    other = db.session.scalar(select(User.id).where(func.lower(User.email) == email))
    return other is not None and other != user.id


def request_email_change(user: User, new_email: str, password: str) -> str:
    """Mail a confirmation link to ``new_email``; the address changes when it is opened.
    Proven with the password. Returns the address the link went to."""
    email = _clean_email(new_email)
    problems = []
    if not verify_password(user, password or "", _method()):
        problems.append({"field": "email_password", "message": "That is not your password."})
    if email == user.email.lower():
        problems.append({"field": "email", "message": "That is your email already."})
    elif _taken(email, user):
        problems.append({"field": "email", "message": "Another account uses this email."})
    if problems:
        raise ValidationFailed("Check the form.", problems)
    token = _serializer(EMAIL_SALT).dumps([user.id, email, _fingerprint(user)])
    link = mail.link("account.email_link", token=token)
    mail.send(
        "email_change", email, user.id, name=user.name, old_email=user.email, email=email, link=link
    )
    return email


def email_change(token: str) -> EmailChange:
    """The change an email-change token asks for; ``LinkGone`` when it no longer works."""
    value = _load(EMAIL_SALT, token, EMAIL_MAX_AGE)
    if len(value) != 3 or not isinstance(value[1], str):
        raise LinkGone("This link is not valid.")
    return EmailChange(_account_of(value), value[1])


def confirm_email_change(principal: Principal, token: str) -> EmailChange:
    """Make the link's address the email of ``principal``'s account (the link then stops
    working); commits."""
    change = email_change(token)
    if change.user.id != principal.user_id:
        raise LinkGone("This link is for another account: sign in as that one.")
    if _taken(change.new_email, change.user):
        raise Conflict("Another account uses this email now.")
    change.user.email = change.new_email
    record_event(principal, "user.updated", "user", change.user.id, {"fields": ["email"]})
    try:
        db.session.commit()
    except IntegrityError:  # taken a moment ago
        db.session.rollback()
        raise Conflict("Another account uses this email now.") from None
    return change
