"""Signing in and out, and switching org: the ``auth`` blueprint (``/login``, ``/logout``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from flask import (
    Blueprint,
    current_app,
    flash,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask_login import logout_user
from sqlalchemy import func, select

from monark.core import sessions, two_factor
from monark.core.auth import current_principal, guard, memberships_of, verify_password
from monark.core.errors import ValidationFailed
from monark.core.ids import form_id
from monark.core.models import Membership, User
from monark.core.ratelimit import FailureCounts, signin_counts, wait_words
from monark.core.rbac import Principal
from monark.extensions import db

bp = Blueprint("auth", __name__)
log = logging.getLogger(__name__)
PENDING_KEY = "pending_sign_in"  # a right password waiting for its code (signed, 5 minutes)


@dataclass(frozen=True)
class PasswordCheck:
    """The outcome of a rate-limited password check."""

    ok: bool
    retry_after: int = 0  # > 0: over the limit, and the password was not even checked


def check_password(
    user: User | None, email: str, password: str, ip: str | None, method: str
) -> PasswordCheck:
    """Check a sign-in password under the failed sign-in limits (``core.ratelimit``).

    A success forgets the failures of that email from that address only: the per-email
    count keeps running, so slow guessing from many addresses does not restart each time
    the account's owner signs in. A limiter storage that does not answer lets the check
    go on (fail open, logged): sign-in must not depend on it.
    """
    counts = signin_counts()
    keys = (f"email-ip:{email}|{ip}", f"ip:{ip}", f"email:{email}")
    wait = _wait(counts, keys, "sign-in")
    if wait:
        return PasswordCheck(ok=False, retry_after=wait)
    ok = verify_password(user, password, method)
    if wait is None:  # the storage did not answer: nothing to count in
        return PasswordCheck(ok=ok)
    try:
        if not ok:
            counts.failed(*keys)
        else:
            counts.clear(keys[0])
    except Exception as err:
        log.warning("rate limiter storage failed (%s): sign-in not counted", type(err).__name__)
    return PasswordCheck(ok=ok)


class TooManyProofs(ValidationFailed):
    """Over the sign-in limits with a password or code given in a signed-in session: 429."""

    code, status = "rate_limited", 429

    def __init__(self, field: str, wait: int):
        message = f"Too many wrong passwords or codes; try again in {wait_words(max(wait, 60))}."
        super().__init__(message, [{"field": field, "message": message}])
        self.headers = {"Retry-After": str(max(1, wait))}


@contextmanager
def counted_proof(user: User, fields: tuple[str, ...]) -> Iterator[None]:
    """A password or code given inside a signed-in session (to change the password or the
    email, or two-factor), under the same limits as signing in: a wrong one (a
    ``ValidationFailed`` naming one of ``fields``) counts against the account, its codes
    and the address, and once over, ``TooManyProofs`` (naming ``fields[0]``) comes before
    anything is checked. Someone holding a stolen session guesses no faster than at /login.
    The limiter's storage down lets the check go on (fail open, logged), as sign-in does."""
    counts = signin_counts()
    keys = (f"email:{user.email.lower()}", f"code:{user.id}", f"ip:{request.remote_addr}")
    wait = _wait(counts, keys, "proof")
    if wait is None:
        yield
        return
    if wait:
        raise TooManyProofs(fields[0], wait)
    try:
        yield
    except ValidationFailed as err:
        if set(err.field_errors()) & set(fields):
            _count_failure(counts, keys)
        raise


def _safe_next(target: str | None) -> str:
    """Only same-site relative paths; anything else goes home."""
    # Browsers drop tabs and newlines inside a URL ("/\t/evil" becomes "//evil") and read
    # "\" as "/"; a newline cannot go into a header at all. Refuse them all.
    if not target or any(ch < " " or ch in "\\\x7f" for ch in target):
        return url_for("records.home")
    if target.startswith("/") and not target.startswith("//"):
        return target
    return url_for("records.home")


@bp.route("/login", methods=["GET", "POST"])
def login():
    """The sign-in form and its submission."""
    if current_principal() is not None and request.method == "GET":
        return redirect(_safe_next(request.args.get("next")))
    error = None
    email = ""
    if request.method == "POST":
        email = request.form.get("email", "").strip().lower()
        password = request.form.get("password", "")
        user = db.session.scalar(select(User).where(func.lower(User.email) == email))
        # Behind a reverse proxy remote_addr is the proxy's, shared by every client, unless
        # TRUSTED_PROXIES says how many proxies to look through (werkzeug's ProxyFix).
        method = current_app.config["PASSWORD_HASH_METHOD"]
        check = check_password(user, email, password, request.remote_addr, method)
        if check.retry_after:
            return _throttled(email, check.retry_after)
        if not check.ok or user is None:
            error = "Wrong email or password."
        elif not memberships_of(user.id):
            error = (
                "This account is not a member of any organization. Ask an admin for an invitation."
            )
        elif user.two_factor:
            # Not signed in yet: the code step reads this, and signs in when the code passes.
            session[PENDING_KEY] = two_factor.pending(user, _safe_next(request.args.get("next")))
            return redirect(url_for("auth.login_code"))
        else:
            return signed_in(user, _safe_next(request.args.get("next")))
    status = 401 if error else 200
    return render_template("auth/login.html", error=error, email=email), status


def signed_in(user: User, next_url: str):
    """Sign ``user`` in (a session row of its own) and go on to ``next_url``."""
    session.pop(PENDING_KEY, None)
    sessions.begin(user)
    session["org_id"] = memberships_of(user.id)[0].org_id
    return redirect(next_url)


@bp.route("/login/code", methods=["GET", "POST"])
def login_code():
    """The second step of a two-factor sign-in: a code of the app, or a recovery code."""
    try:
        waiting = two_factor.pending_of(session.get(PENDING_KEY))
    except two_factor.PendingGone as err:
        session.pop(PENDING_KEY, None)
        flash(err.message, "error")
        return redirect(url_for("auth.login"), 303)  # back to the first step, not a guard's
    errors: dict[str, str] = {}
    if request.method == "POST":
        user = waiting.user
        counts = signin_counts()
        keys = (f"code:{user.id}", f"ip:{request.remote_addr}")
        if wait := _code_wait(counts, keys):
            errors["code"] = f"Too many wrong codes; try again in {wait_words(max(wait, 60))}."
            page = render_template("auth/login_code.html", errors=errors)
            return page, 429, {"Retry-After": str(wait)}
        try:
            kind = two_factor.check(user, request.form.get("code", ""))
        except ValidationFailed as err:
            db.session.rollback()
            _count_failure(counts, keys)
            errors = err.field_errors()
        else:
            memberships = memberships_of(user.id)
            if not memberships:  # removed from every org since the password step
                db.session.rollback()
                session.pop(PENDING_KEY, None)
                flash("This account is not a member of any organization.", "error")
                return redirect(url_for("auth.login"), 303)
            if kind == "recovery":
                first = memberships[0]
                principal = Principal.for_user(user.id, first.org_id, first.role)
                two_factor.record_recovery_use(principal, user)
                left = two_factor.recovery_left(user.id)
                flash(f"You signed in with a recovery code; {left} are left.", "warning")
            db.session.commit()
            return signed_in(user, waiting.next_url)
    status = 422 if errors else 200
    return render_template("auth/login_code.html", errors=errors), status


def _wait(counts: FailureCounts, keys: tuple[str, ...], what: str) -> int | None:
    """Seconds until ``keys`` may try again (0: now); None when the limiter's storage does
    not answer, which lets the attempt go on (fail open, logged)."""
    try:
        return counts.retry_after(*keys)
    except Exception as err:
        log.warning("rate limiter storage failed (%s): %s not limited", type(err).__name__, what)
        return None


def _code_wait(counts: FailureCounts, keys: tuple[str, ...]) -> int:
    """Seconds until another code may be tried (the sign-in limits; fail open, logged)."""
    return _wait(counts, keys, "code") or 0


def _count_failure(counts: FailureCounts, keys: tuple[str, ...]) -> None:
    try:
        counts.failed(*keys)
    except Exception as err:
        log.warning("rate limiter storage failed (%s): code not counted", type(err).__name__)


def _throttled(email: str, wait: int):
    """The 429 answer to a throttled sign-in (the password was not checked)."""
    # Minutes, even under one: the rule is about minutes (a window of 15 by default).
    error = f"Too many sign-in attempts; try again in {wait_words(max(wait, 60))}."
    page = render_template("auth/login.html", error=error, email=email)
    return page, 429, {"Retry-After": str(wait)}


@bp.post("/logout")
def logout():
    """Sign out (this session's row too) and forget the chosen org."""
    sessions.end()
    logout_user()
    session.clear()
    return redirect(url_for("auth.login"))


@bp.post("/orgs/switch")
@guard()
def switch_org():
    """Make another of the user's orgs the current one."""
    principal = current_principal()
    org_id = form_id("org_id")
    membership = db.session.scalar(
        select(Membership).where(
            Membership.user_id == principal.user_id, Membership.org_id == org_id
        )
    )
    if membership is None:
        flash("You are not a member of that organization.", "error")
    else:
        session["org_id"] = membership.org_id
        flash(f"Switched to {membership.org.name}.", "info")
    return redirect(url_for("records.home"))
