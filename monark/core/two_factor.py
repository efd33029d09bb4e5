"""Two-factor sign-in: TOTP codes (RFC 6238, pyotp) and one-time recovery codes.

The secret is kept encrypted (``core/crypto``). A code is accepted for one time step at most:
the step it matched is stored on the user in a conditional update, so neither a replay nor two
requests racing with the same code get in twice. Recovery codes are kept as digests and each
is spent the same way. The sign-in between password and code is a signed, short-lived value
in the session (``pending``); nobody is signed in until the code passes (``core/signin``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import pyotp
import segno
from flask import flash, redirect, request, session, url_for
from flask_login import current_user
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from markupsafe import Markup
from sqlalchemy import delete, func, or_, select, update

from monark.core import crypto
from monark.core.auth import current_principal, in_process, verify_password
from monark.core.errors import Forbidden, ValidationFailed, wants_json
from monark.core.events import record_event
from monark.core.htmx import is_htmx, reload
from monark.core.models import Org, RecoveryCode, User, UserSession, utcnow
from monark.core.rbac import Principal
from monark.core.settings import settings
from monark.extensions import db

RECOVERY_CODES = 10
PENDING_MAX_AGE = 300  # seconds between a right password and its code
ENROL_MAX_AGE = 1800  # seconds an enrolment's secret waits for its confirming code
PENDING_SALT = "monark.two-factor.pending"
ENROL_SALT = "monark.two-factor.enrol"
# Which roles an org's "require two-factor" applies to.
REQUIRED_ROLES = ("owner", "admin")

_TOTP = re.compile(r"[0-9]{6}")  # ASCII digits only: "١٢٣٤٥٦" is no code
_RECOVERY = re.compile(r"[a-z0-9]{5}-?[a-z0-9]{5}")
_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i to misread
CodeKind = Literal["totp", "recovery"]
Fields = tuple[str, str]  # the form fields of a password and of a code, to name in an error


def _refused(field: str, message: str) -> ValidationFailed:
    return ValidationFailed("Check the code.", [{"field": field, "message": message}])


@dataclass(frozen=True)
class Code:
    """A code as typed, read: six digits of the app, or a recovery code."""

    kind: CodeKind
    value: str


def parse_code(raw: str | None, field: str = "code", recovery: bool = True) -> Code:
    """Read a typed code (spaces ignored); ``ValidationFailed`` naming ``field`` otherwise."""
    text = "".join((raw or "").split()).lower()
    if not text:
        extra = " (or one of your recovery codes)" if recovery else ""
        raise _refused(field, f"Enter the code from your authenticator app{extra}.")
    if _TOTP.fullmatch(text):
        return Code("totp", text)
    if recovery and _RECOVERY.fullmatch(text):
        return Code("recovery", text.replace("-", ""))
    what = "the 6-digit code from your authenticator app"
    raise _refused(field, f"Enter {what}{', or a recovery code' if recovery else ''}.")


# ---- TOTP -----------------------------------------------------------------------------------


def new_secret() -> str:
    """A fresh TOTP secret (base32, 160 bits)."""
    return pyotp.random_base32(32)


def secret_of(user: User) -> str | None:
    """The user's TOTP secret in clear, if two-factor is on."""
    return crypto.decrypt(user.totp_secret) if user.totp_secret else None


def matching_step(secret: str, code: str, now: float | None = None) -> int | None:
    """The time step ``code`` is right for: this one, or one either side (a clock a little
    off, a code typed as it turned); None when it is right for none."""
    totp = pyotp.TOTP(secret)
    step = totp.timecode(_at(now))
    for candidate in (step, step - 1, step + 1):
        if hmac.compare_digest(totp.generate_otp(candidate), code):
            return candidate
    return None


def _at(now: float | None) -> datetime:
    return datetime.fromtimestamp(time.time() if now is None else now, UTC)


def _spend_step(user: User, step: int) -> bool:
    """Record ``step`` as the user's last used one, if it is later than the stored one."""
    done = db.session.execute(
        update(User)
        .where(
            User.id == user.id,
            or_(User.totp_last_step.is_(None), User.totp_last_step < step),
        )
        .values(totp_last_step=step)
        .execution_options(synchronize_session=False)
    )
    if done.rowcount == 1:
        user.totp_last_step = step
        return True
    return False


def provisioning_uri(secret: str, email: str) -> str:
    """The ``otpauth://`` address an authenticator app reads from the QR code."""
    return pyotp.TOTP(secret).provisioning_uri(name=email, issuer_name=settings().totp_issuer)


def qr_svg(uri: str) -> Markup:
    """The QR code of ``uri`` as inline SVG (no image request, nothing the CSP forbids)."""
    svg = segno.make(uri, error="m").svg_inline(scale=4, dark="#000", light="#fff")
    return Markup(svg.replace("<svg ", '<svg role="img" aria-label="QR code to scan" ', 1))


def grouped(secret: str) -> str:
    """A secret in groups of four, as people type it."""
    return " ".join(secret[i : i + 4] for i in range(0, len(secret), 4))


# ---- recovery codes -------------------------------------------------------------------------


def _code_digest(user_id: int, code: str) -> str:
    key = settings().secret_key.encode()
    return hmac.new(key, f"{user_id}:{code}".encode(), hashlib.sha256).hexdigest()


def _new_recovery_codes(user: User) -> list[str]:
    """Ten fresh codes for ``user`` (the old ones stop working); shown once, kept as digests."""
    db.session.execute(delete(RecoveryCode).where(RecoveryCode.user_id == user.id))
    codes = ["".join(secrets.choice(_ALPHABET) for _ in range(10)) for _ in range(RECOVERY_CODES)]
    db.session.add_all(
        RecoveryCode(user_id=user.id, code_hash=_code_digest(user.id, c)) for c in codes
    )
    return [f"{c[:5]}-{c[5:]}" for c in codes]


def _spend_recovery(user: User, code: str) -> bool:
    done = db.session.execute(
        update(RecoveryCode)
        .where(
            RecoveryCode.user_id == user.id,
            RecoveryCode.code_hash == _code_digest(user.id, code),
            RecoveryCode.used_at.is_(None),
        )
        .values(used_at=utcnow())
    )
    return done.rowcount == 1


def recovery_left(user_id: int) -> int:
    """How many of the user's recovery codes are unused."""
    stmt = select(func.count()).where(
        RecoveryCode.user_id == user_id, RecoveryCode.used_at.is_(None)
    )
    return int(db.session.scalar(stmt) or 0)


# ---- enrolling, checking, turning off ------------------------------------------------------


def enrol_token(secret: str, user_id: int) -> str:
    """An enrolment's secret, signed and bound to the user, to keep in the session."""
    # Encrypted too: the session cookie is signed, not sealed, and the secret is a key.
    serializer = URLSafeTimedSerializer(settings().secret_key, salt=ENROL_SALT)
    return serializer.dumps([user_id, crypto.encrypt(secret)])


def enrol_secret(token: Any, user_id: int) -> str | None:
    """The secret of an enrolment begun by ``user_id``; None when gone or not theirs."""
    if not isinstance(token, str):
        return None
    try:
        value = URLSafeTimedSerializer(settings().secret_key, salt=ENROL_SALT).loads(
            token, max_age=ENROL_MAX_AGE
        )
    except BadSignature:
        return None
    if not isinstance(value, list) or len(value) != 2 or value[0] != user_id:
        return None
    try:
        return crypto.decrypt(str(value[1]))
    except crypto.SecretUnreadable:  # sealed under a key since rotated: begin again
        return None


def enrol(
    principal: Principal, user: User, secret: str, raw_code: str, password: str, method: str
) -> list[str]:
    """Turn two-factor on with ``secret``, proven by a code of it and the account's password
    (a session alone must not be able to tie the account to someone else's app); the ten
    recovery codes, to show once. Commits; a wrong code or password saves nothing."""
    if user.two_factor:
        raise _refused("code", "Two-factor sign-in is on already.")
    if not verify_password(user, password, method):
        raise _refused(
            "password", "That is not your password." if password else "Give your password."
        )
    code = parse_code(raw_code, recovery=False)
    step = matching_step(secret, code.value)
    if step is None:
        raise _refused("code", "That code is not right: check the app's clock, then try again.")
    user.totp_secret = crypto.encrypt(secret)
    user.totp_last_step = step  # the confirming code cannot sign in again
    user.two_factor_since = utcnow()
    codes = _new_recovery_codes(user)
    record_event(principal, "user.two_factor_enabled", "user", user.id, {"fields": ["totp"]})
    db.session.commit()
    return codes


def check(user: User, raw_code: str, field: str = "code") -> CodeKind:
    """Spend a code of ``user``'s (an app code for a later time step, or an unused recovery
    code); which kind it was. ``ValidationFailed`` naming ``field`` otherwise. The caller
    commits (a recovery code's use is an event it writes)."""
    secret = secret_of(user)
    if secret is None:
        raise _refused(field, "Two-factor sign-in is off for this account.")
    code = parse_code(raw_code, field)
    if code.kind == "recovery":
        if not _spend_recovery(user, code.value):
            raise _refused(field, "That recovery code is not right, or was used already.")
        return "recovery"
    step = matching_step(secret, code.value)
    if step is None:
        raise _refused(field, "That code is not right: check the app's clock, then try again.")
    if not _spend_step(user, step):
        raise _refused(field, "That code was used already: wait for the next one.")
    return "totp"


def record_recovery_use(principal: Principal, user: User) -> None:
    """The event of a recovery code spent (no code in it, nor how many are left)."""
    record_event(principal, "user.recovery_code_used", "user", user.id, {"fields": ["recovery"]})


def _prove(
    principal: Principal, user: User, password: str, raw_code: str, method: str, fields: Fields
) -> None:
    """That it is the user asking: their password, or a code (an app code, or a recovery
    code, whose use is recorded). ``ValidationFailed`` naming ``fields``' field otherwise."""
    password_field, code_field = fields
    if password:
        if not verify_password(user, password, method):
            raise _refused(password_field, "That is not your password.")
    elif raw_code.strip():
        if check(user, raw_code, code_field) == "recovery":
            record_recovery_use(principal, user)
    else:
        raise _refused(password_field, "Give your password (or a code from your app).")


def disable(principal: Principal, user: User, password: str, raw_code: str, method: str) -> None:
    """Turn two-factor off, proven with the password or a code; commits."""
    if not user.two_factor:
        raise _refused("disable_password", "Two-factor sign-in is off already.")
    if required_by := requiring_org(user.id):
        raise _refused(
            "disable_password",
            f"{required_by} requires two-factor sign-in for owners and admins.",
        )
    _prove(principal, user, password, raw_code, method, ("disable_password", "disable_code"))
    user.totp_secret = None
    user.totp_last_step = None
    user.two_factor_since = None
    db.session.execute(delete(RecoveryCode).where(RecoveryCode.user_id == user.id))
    record_event(principal, "user.two_factor_disabled", "user", user.id, {"fields": ["totp"]})
    db.session.commit()


def renew_recovery_codes(
    principal: Principal, user: User, password: str, raw_code: str, method: str
) -> list[str]:
    """Ten new recovery codes in place of the old ones (every old one stops working), proven
    with the password or a code; the codes, to show once. Commits."""
    if not user.two_factor:
        raise _refused("recovery_password", "Two-factor sign-in is off: there are no codes.")
    _prove(principal, user, password, raw_code, method, ("recovery_password", "recovery_code"))
    codes = _new_recovery_codes(user)
    renewed = {"fields": ["recovery"]}
    record_event(principal, "user.recovery_codes_renewed", "user", user.id, renewed)
    db.session.commit()
    return codes


# ---- the org's requirement ------------------------------------------------------------------


def requiring_org(user_id: int) -> str | None:
    """The name of an org that requires two-factor of this user (by their role), if any."""
    from monark.core.models import Membership

    return db.session.scalar(
        select(Org.name)
        .join(Membership, Membership.org_id == Org.id)
        .where(
            Membership.user_id == user_id,
            Membership.role.in_(REQUIRED_ROLES),
            Org.require_two_factor.is_(True),
        )
        .limit(1)
    )


def must_enrol(user: User, org_id: int, role: str) -> bool:
    """Whether ``user`` must turn two-factor on before using this org's pages."""
    if user.two_factor or role not in REQUIRED_ROLES:
        return False
    return bool(db.session.scalar(select(Org.require_two_factor).where(Org.id == org_id)))


# What an owner or admin who must enrol may still reach: enrolling, signing out, another org.
OPEN_ENDPOINTS = frozenset(
    {"settings.two_factor", "auth.logout", "auth.switch_org", "auth.login", "auth.login_code"}
)
OPEN_BLUEPRINTS = frozenset({"account"})  # the links of mail (reset, email change)


def enforce() -> Any:
    """Before a request: an owner or admin of an org that requires two-factor, without it,
    is sent to enrol (members, and the pages in ``OPEN_ENDPOINTS``, are let through)."""
    endpoint = request.endpoint or ""
    if (
        "_user_id" not in session  # no session cookie: nothing to load (API keys, /metrics)
        or endpoint in OPEN_ENDPOINTS
        or endpoint.startswith("static")
        or request.blueprint in OPEN_BLUEPRINTS
        or request.routing_exception is not None
        or in_process()
        or not current_user.is_authenticated
    ):
        return None
    principal = current_principal()
    if principal is None or principal.user_id is None:
        return None
    user = current_user._get_current_object()
    if not must_enrol(user, principal.org_id, principal.role):
        return None
    message = (
        "Your organization requires two-factor sign-in for owners and admins: set it up to go on."
    )
    if wants_json():
        raise Forbidden(message)
    flash(message, "warning")
    target = url_for("settings.two_factor")
    return reload(target) if is_htmx() else redirect(target)


# ---- between the password and the code -------------------------------------------------------


def _binding(user: User) -> str:
    """What a pending sign-in is bound to: it stops working when any of these change, and
    so once the account next signs in (its newest session row): a copy of the cookie taken
    between the password and the code is good for one sign-in at most."""
    newest = db.session.scalar(
        select(func.max(UserSession.id)).where(UserSession.user_id == user.id)
    )
    raw = f"{user.password_hash}|{user.session_version}|{user.totp_secret}|{newest}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def pending(user: User, next_url: str) -> str:
    """A signed value saying: this user gave the right password just now."""
    serializer = URLSafeTimedSerializer(settings().secret_key, salt=PENDING_SALT)
    return serializer.dumps([user.id, _binding(user), next_url])


@dataclass(frozen=True)
class Pending:
    """A sign-in waiting for its code."""

    user: User
    next_url: str


class PendingGone(Exception):
    """A pending sign-in that is over: too old, forged, or its account changed."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def pending_of(token: Any) -> Pending:
    """The sign-in a pending value is of; ``PendingGone`` when it no longer works."""
    if not isinstance(token, str):
        raise PendingGone("Sign in with your email and password first.")
    serializer = URLSafeTimedSerializer(settings().secret_key, salt=PENDING_SALT)
    try:
        value = serializer.loads(token, max_age=PENDING_MAX_AGE)
    except SignatureExpired:
        raise PendingGone("That took too long: sign in again.") from None
    except BadSignature:
        raise PendingGone("Sign in with your email and password first.") from None
    if not isinstance(value, list) or len(value) != 3 or not isinstance(value[0], int):
        raise PendingGone("Sign in with your email and password first.")
    user = db.session.get(User, value[0])
    if (
        user is None
        or not user.two_factor
        or not hmac.compare_digest(str(value[1]), _binding(user))
    ):
        raise PendingGone("Sign in with your email and password first.")
    return Pending(user, str(value[2]))
