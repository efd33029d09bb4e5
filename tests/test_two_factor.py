"""Two-factor sign-in: enrolment with the QR page's secret, the code step of sign-in with real
pyotp codes, no code twice, recovery codes once, turning it off, the org's requirement."""

from __future__ import annotations

import base64
import time
import zlib

import pyotp
import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.core import two_factor
from monark.core.models import Event, Org, RecoveryCode, User, UserSession
from monark.extensions import db
from tests import factories
from tests.conftest import Browser


def _page(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def _field_error(response, field: str) -> str:
    found = _page(response).find(id=f"{field}-error")
    return found.get_text(strip=True) if found else ""


def _opened(browser: Browser, url: str):
    response = browser.get(url)
    browser._refresh_token(response.get_data(as_text=True))
    return response


def _user(email: str) -> User:
    db.session.expire_all()
    return db.session.scalar(select(User).where(User.email == email))


def _code(secret: str, steps_ahead: int = 0) -> str:
    """The app's code ``steps_ahead`` time steps from now (one ahead: a later step than the
    one the last code used, still within the window the server accepts)."""
    return pyotp.TOTP(secret).at(time.time() + 30 * steps_ahead)


def _events(type_: str) -> list[Event]:
    return list(db.session.scalars(select(Event).where(Event.type == type_)))


def enrol(browser: Browser) -> tuple[str, list[str]]:
    """Enrol the signed-in user as a person would: read the secret off the page, type a code;
    the secret and the recovery codes shown."""
    page = _page(_opened(browser, "/profile/two-factor"))
    secret = page.find(id="totp-secret").get_text().replace(" ", "")
    response = browser.post(
        "/profile/two-factor", data={"code": _code(secret), "password": factories.PASSWORD}
    )
    assert response.status_code == 201, response.get_data(as_text=True)[:400]
    codes = [c.get_text() for c in _page(response).select(".recovery-codes code")]
    return secret, codes


def _password_step(browser: Browser, email: str, next_url: str | None = None):
    _opened(browser, "/login")
    url = "/login" + (f"?next={next_url}" if next_url else "")
    return browser.post(url, data={"email": email, "password": factories.PASSWORD})


def _code_step(browser: Browser, code: str):
    _opened(browser, "/login/code")
    return browser.post("/login/code", data={"code": code})


def _signed_in(browser: Browser) -> bool:
    return browser.get("/profile").status_code == 200


def _signed_out_again(browser: Browser) -> None:
    browser.post("/logout")
    assert not _signed_in(browser)


# ---- enrolment ------------------------------------------------------------------------------


def test_the_enrolment_page_draws_the_qr_code_inline_with_the_secret_as_text(world, login):
    member = login("member@acme.test")
    response = _opened(member, "/profile/two-factor")
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "no-store"
    page = _page(response)
    svg = page.select_one("figure.qr svg")
    assert svg is not None and svg["aria-label"] == "QR code to scan"
    assert page.find("img") is None  # nothing to fetch: the CSP allows 'self' images only
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert not any(tag.has_attr("style") for tag in page.select("figure.qr *"))
    secret = page.find(id="totp-secret").get_text().replace(" ", "")
    assert len(secret) == 32
    # The QR code is the otpauth address of that secret, under the deployment's issuer.
    uri = two_factor.provisioning_uri(secret, "member@acme.test")
    assert pyotp.parse_uri(uri).secret == secret and "issuer=Monark" in uri
    # The same secret until it is confirmed (a reload does not start over).
    again = _page(_opened(member, "/profile/two-factor")).find(id="totp-secret").get_text()
    assert again.replace(" ", "") == secret


def test_enrolment_confirmed_with_a_code_shows_ten_recovery_codes_once(world, login):
    member = login("member@acme.test")
    secret, codes = enrol(member)
    assert len(codes) == 10 and len(set(codes)) == 10
    user = _user("member@acme.test")
    assert user.two_factor and user.totp_secret != secret  # encrypted at rest
    assert two_factor.secret_of(user) == secret
    stored = set(db.session.scalars(select(RecoveryCode.code_hash)))
    assert len(stored) == 10 and not stored & {c.replace("-", "") for c in codes}
    (event,) = _events("user.two_factor_enabled")
    assert event.subject_id == user.id and secret not in str(event.payload)
    # Shown once: the profile says how many are left, never which.
    profile = member.get("/profile").get_data(as_text=True)
    assert "10 recovery codes left" in profile and codes[0] not in profile
    assert member.get("/profile/two-factor").status_code == 303  # on already


def test_turning_it_on_signs_out_every_other_session(world, login):
    elsewhere = login("member@acme.test")
    member = login("member@acme.test")
    page = _page(_opened(member, "/profile/two-factor"))
    secret = page.find(id="totp-secret").get_text().replace(" ", "")
    response_page = member.post(
        "/profile/two-factor", data={"code": _code(secret), "password": factories.PASSWORD}
    )
    assert "other sessions are signed out" in response_page.get_data(as_text=True)
    assert _signed_in(member)
    assert not _signed_in(elsewhere)  # signed in with the password alone
    live = select(func.count()).where(
        UserSession.user_id == _user("member@acme.test").id, UserSession.revoked_at.is_(None)
    )
    assert db.session.scalar(live) == 1


def test_a_wrong_confirming_code_saves_nothing(world, login):
    member = login("member@acme.test")
    page = _page(_opened(member, "/profile/two-factor"))
    secret = page.find(id="totp-secret").get_text().replace(" ", "")
    wrong = f"{(int(_code(secret)) + 1) % 1_000_000:06d}"
    response = member.post(
        "/profile/two-factor", data={"code": wrong, "password": factories.PASSWORD}
    )
    assert response.status_code == 422
    assert "not right" in _field_error(response, "code")
    assert not _user("member@acme.test").two_factor
    assert db.session.scalars(select(RecoveryCode)).first() is None
    assert _events("user.two_factor_enabled") == []
    # The same secret is offered again, and a right code then works.
    again = _page(response).find(id="totp-secret").get_text().replace(" ", "")
    assert again == secret
    assert (
        member.post(
            "/profile/two-factor", data={"code": _code(secret), "password": factories.PASSWORD}
        ).status_code
        == 201
    )


def test_turning_it_on_needs_the_password(world, login):
    member = login("member@acme.test")
    page = _page(_opened(member, "/profile/two-factor"))
    secret = page.find(id="totp-secret").get_text().replace(" ", "")
    response = member.post("/profile/two-factor", data={"code": _code(secret)})
    assert response.status_code == 422
    assert _field_error(response, "password") == "Give your password."
    response = member.post("/profile/two-factor", data={"code": _code(secret), "password": "no"})
    assert _field_error(response, "password") == "That is not your password."
    assert not _user("member@acme.test").two_factor
    assert _events("user.two_factor_enabled") == []


def test_wrong_passwords_and_codes_in_a_session_meet_the_sign_in_limits(world, login):
    """Someone holding a stolen session guesses no faster than at /login: 10 wrong
    passwords or codes of an account, wherever given, and the next answer is 429."""
    member = login("member@acme.test")
    secret, _ = enrol(member)
    _opened(member, "/profile")
    tries = [
        ("/profile/two-factor/disable", {"disable_code": "000000"}),
        ("/profile/two-factor/disable", {"disable_password": "guess"}),
        ("/profile/password", {"current_password": "guess", "new_password": "x" * 12}),
        ("/profile/email", {"email": "new@example.test", "email_password": "guess"}),
        ("/profile/two-factor/recovery-codes", {"recovery_password": "guess"}),
    ]
    statuses = [member.post(*tries[n % len(tries)]).status_code for n in range(10)]
    assert statuses == [422] * 10
    response = member.post("/profile/two-factor/disable", data={"disable_code": _code(secret, 1)})
    assert response.status_code == 429 and int(response.headers["Retry-After"]) > 0
    assert "Too many wrong passwords or codes" in _field_error(response, "disable_password")
    assert _user("member@acme.test").two_factor  # the right code was not even tried
    # The password was not spent either: a form that fails on its own field counts nothing.
    response = member.post(
        "/profile/password", data={"current_password": factories.PASSWORD, "new_password": "x"}
    )
    assert response.status_code == 429


@pytest.mark.parametrize(
    "typed",
    ["", "abcdef", "12345", "1" * 20, "١٢٣٤٥٦", "\uff11\uff12\uff13\uff14\uff15\uff16", "12345a"],
    ids=["empty", "letters", "five", "twenty", "arabic-indic", "fullwidth", "mixed"],
)
def test_a_malformed_confirming_code_is_refused_by_name(world, login, typed):
    member = login("member@acme.test")
    _opened(member, "/profile/two-factor")
    response = member.post(
        "/profile/two-factor", data={"code": typed, "password": factories.PASSWORD}
    )
    assert response.status_code == 422
    assert "code from your authenticator app" in _field_error(response, "code")
    assert not _user("member@acme.test").two_factor


def test_enrolling_needs_the_csrf_token(world, login):
    member = login("member@acme.test")
    page = _page(_opened(member, "/profile/two-factor"))
    secret = page.find(id="totp-secret").get_text().replace(" ", "")
    member.csrf = "forged"
    assert (
        member.post(
            "/profile/two-factor", data={"code": _code(secret), "password": factories.PASSWORD}
        ).status_code
        == 400
    )
    assert not _user("member@acme.test").two_factor


# ---- signing in -----------------------------------------------------------------------------


def test_sign_in_asks_for_the_code_after_the_password(world, login, browser):
    secret, _ = enrol(login("member@acme.test"))
    response = _password_step(browser, "member@acme.test", next_url="/wiki")
    assert response.status_code == 302 and response.headers["Location"] == "/login/code"
    assert not _signed_in(browser)  # the password alone signs nobody in
    sessions_before = db.session.query(UserSession).count()
    assert _page(_opened(browser, "/login/code")).find("label", string="Code") is not None
    response = _code_step(browser, _code(secret, 1))
    assert response.status_code == 302 and response.headers["Location"] == "/wiki"
    assert _signed_in(browser)
    assert db.session.query(UserSession).count() == sessions_before + 1


def test_a_code_cannot_be_used_twice(world, login, browser):
    secret, _ = enrol(login("member@acme.test"))
    code = _code(secret, 1)
    _password_step(browser, "member@acme.test")
    assert _code_step(browser, code).status_code == 302
    _signed_out_again(browser)
    _password_step(browser, "member@acme.test")
    response = _code_step(browser, code)
    assert response.status_code == 422
    assert "used already" in _field_error(response, "code")
    assert not _signed_in(browser)
    # Nor an older one: the step before the one just used.
    response = _code_step(browser, _code(secret, 0))
    assert response.status_code == 422 and not _signed_in(browser)


def test_the_confirming_code_does_not_sign_in_again(world, login, browser):
    member = login("member@acme.test")
    page = _page(_opened(member, "/profile/two-factor"))
    secret = page.find(id="totp-secret").get_text().replace(" ", "")
    code = _code(secret)
    assert (
        member.post(
            "/profile/two-factor", data={"code": code, "password": factories.PASSWORD}
        ).status_code
        == 201
    )
    _password_step(browser, "member@acme.test")
    assert "used already" in _field_error(_code_step(browser, code), "code")


@pytest.mark.parametrize(
    "typed",
    ["", "abcdef", "1" * 20, "١٢٣٤٥٦", "000000"],
    ids=["empty", "letters", "twenty", "arabic-indic", "wrong"],
)
def test_a_wrong_or_malformed_code_keeps_the_sign_in_waiting(world, login, browser, typed):
    enrol(login("member@acme.test"))
    _password_step(browser, "member@acme.test")
    response = _code_step(browser, typed)
    assert response.status_code == 422
    assert _field_error(response, "code")
    assert not _signed_in(browser)
    assert _opened(browser, "/login/code").status_code == 200  # still waiting for its code


def test_wrong_codes_are_rate_limited(world, login, browser):
    secret, _ = enrol(login("member@acme.test"))
    _password_step(browser, "member@acme.test")
    for _ in range(10):  # LIMIT_SIGNIN_FAILURES
        assert _code_step(browser, "000000").status_code == 422
    response = _code_step(browser, _code(secret, 1))  # even a right one, now
    assert response.status_code == 429
    assert int(response.headers["Retry-After"]) > 0
    assert "Too many wrong codes" in _field_error(response, "code")
    assert not _signed_in(browser)


def test_a_copy_of_the_pending_cookie_signs_in_once_at_most(world, login, browser):
    secret, _ = enrol(login("member@acme.test"))
    _password_step(browser, "member@acme.test")
    copied = browser.client.get_cookie("session").value  # taken between password and code
    assert _code_step(browser, _code(secret, 1)).status_code == 302
    assert _signed_in(browser)
    replay = Browser(browser.client.application.test_client())
    replay.client.set_cookie("session", copied)
    response = replay.get("/login/code")
    assert response.status_code == 303 and response.headers["Location"] == "/login"
    assert not _signed_in(replay)


def test_the_secret_being_enrolled_is_not_readable_in_the_cookie(app, world, login):
    member = login("member@acme.test")
    page = _page(_opened(member, "/profile/two-factor"))
    secret = page.find(id="totp-secret").get_text().replace(" ", "")
    cookie = member.client.get_cookie("session").value
    stored = app.session_interface.get_signing_serializer(app).loads(cookie)
    token = stored["two_factor_enrol"]  # signed by itsdangerous: its payload is readable
    payload = token.lstrip(".").split(".")[0]
    readable = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    if token.startswith("."):  # itsdangerous compressed it (when that came out shorter)
        readable = zlib.decompress(readable)
    assert readable.startswith(b"[") and secret.encode() not in readable


def test_a_pending_sign_in_lapses(world, login, browser, monkeypatch):
    secret, _ = enrol(login("member@acme.test"))
    _password_step(browser, "member@acme.test")
    monkeypatch.setattr(two_factor, "PENDING_MAX_AGE", -1)
    response = browser.post("/login/code", data={"code": _code(secret, 1)})
    assert response.status_code == 303 and response.headers["Location"] == "/login"
    assert not _signed_in(browser)
    assert "took too long" in browser.get("/login").get_data(as_text=True)


def test_the_code_step_needs_the_csrf_token(world, login, browser):
    secret, _ = enrol(login("member@acme.test"))
    _password_step(browser, "member@acme.test")
    browser.csrf = "forged"
    assert browser.post("/login/code", data={"code": _code(secret, 1)}).status_code == 400
    assert not _signed_in(browser)


def test_a_recovery_code_signs_in_once(world, login, browser):
    _, codes = enrol(login("member@acme.test"))
    _password_step(browser, "member@acme.test")
    assert _code_step(browser, codes[3].upper()).status_code == 302  # as typed: any case
    assert "9 are left" in browser.get("/models", follow_redirects=True).get_data(as_text=True)
    (event,) = _events("user.recovery_code_used")
    assert codes[3] not in str(event.payload) and codes[3].replace("-", "") not in str(
        event.payload
    )
    _signed_out_again(browser)
    _password_step(browser, "member@acme.test")
    response = _code_step(browser, codes[3])
    assert response.status_code == 422
    assert "used already" in _field_error(response, "code")
    assert not _signed_in(browser)
    assert _code_step(browser, codes[4].replace("-", "")).status_code == 302


def test_an_existing_account_with_two_factor_accepting_an_invitation_gives_its_code(
    world, login, browser
):
    from tests.test_members import invite_link

    secret, _ = enrol(login("member@acme.test"))
    path = invite_link(login("admin@globex.test"), "member@acme.test", "member")
    browser.get(path)
    _opened(browser, "/invite")
    response = browser.post("/invite", data={"password": factories.PASSWORD})
    assert response.status_code == 303 and response.headers["Location"] == "/login/code"
    assert not _signed_in(browser)
    response = _code_step(browser, _code(secret, 1))
    assert response.headers["Location"] == "/invite"
    assert _signed_in(browser)


# ---- turning it off -------------------------------------------------------------------------


def test_turning_off_needs_the_password_or_a_code(world, login):
    member = login("member@acme.test")
    secret, _ = enrol(member)
    _opened(member, "/profile")
    response = member.post("/profile/two-factor/disable", data={"disable_password": "guess"})
    assert response.status_code == 422
    assert _field_error(response, "disable_password") == "That is not your password."
    response = member.post("/profile/two-factor/disable", data={})
    assert "Give your password" in _field_error(response, "disable_password")
    response = member.post("/profile/two-factor/disable", data={"disable_code": "12"})
    assert "6-digit code" in _field_error(response, "disable_code")
    assert _user("member@acme.test").two_factor
    assert _events("user.two_factor_disabled") == []

    response = member.post("/profile/two-factor/disable", data={"disable_code": _code(secret, 1)})
    assert response.status_code == 303
    user = _user("member@acme.test")
    assert not user.two_factor and user.totp_last_step is None
    assert db.session.scalars(select(RecoveryCode)).first() is None
    assert len(_events("user.two_factor_disabled")) == 1


def test_new_recovery_codes_replace_the_old_ones(world, login, browser):
    member = login("member@acme.test")
    secret, old = enrol(member)
    _opened(member, "/profile")
    response = member.post(
        "/profile/two-factor/recovery-codes", data={"recovery_password": "guess"}
    )
    assert response.status_code == 422
    assert _field_error(response, "recovery_password") == "That is not your password."
    response = member.post("/profile/two-factor/recovery-codes", data={})
    assert "Give your password" in _field_error(response, "recovery_password")
    assert _events("user.recovery_codes_renewed") == []

    response = member.post(
        "/profile/two-factor/recovery-codes", data={"recovery_code": _code(secret, 1)}
    )
    assert response.status_code == 201 and response.headers["Cache-Control"] == "no-store"
    new = [c.get_text() for c in _page(response).select(".recovery-codes code")]
    assert len(new) == 10 and not set(new) & set(old)
    assert "replace your old ones" in response.get_data(as_text=True)
    (event,) = _events("user.recovery_codes_renewed")
    assert not any(c.replace("-", "") in str(event.payload) for c in new)
    assert "10 recovery codes left" in member.get("/profile").get_data(as_text=True)
    # An old code no longer signs in; a new one does.
    _password_step(browser, "member@acme.test")
    response = _code_step(browser, old[0])
    assert response.status_code == 422 and not _signed_in(browser)
    assert _code_step(browser, new[0]).status_code == 302


def test_new_recovery_codes_need_two_factor_on_and_the_csrf_token(world, login):
    member = login("member@acme.test")
    _opened(member, "/profile")
    response = member.post(
        "/profile/two-factor/recovery-codes", data={"recovery_password": factories.PASSWORD}
    )
    assert response.status_code == 422
    assert "off" in _field_error(response, "recovery_password")
    assert db.session.scalars(select(RecoveryCode)).first() is None
    enrol(member)
    member._fresh_user()
    forged = member.client.post(
        "/profile/two-factor/recovery-codes", data={"recovery_password": factories.PASSWORD}
    )
    assert forged.status_code in (400, 403)
    assert _events("user.recovery_codes_renewed") == []


def test_turning_off_with_the_password(world, login, browser):
    member = login("member@acme.test")
    enrol(member)
    _opened(member, "/profile")
    form = {"disable_password": factories.PASSWORD}
    assert member.post("/profile/two-factor/disable", data=form).status_code == 303
    response = _password_step(browser, "member@acme.test")
    assert response.headers["Location"] == "/models" or response.headers["Location"] == "/"


# ---- the org's requirement ------------------------------------------------------------------


def _require(owner: Browser, on: bool = True):
    _opened(owner, "/settings")
    return owner.post("/settings/two-factor", data={"require_two_factor": "on"} if on else {})


def test_only_an_owner_with_two_factor_may_require_it(world, login):
    admin = login("admin@acme.test")
    assert _require(admin).status_code == 403
    owner = login("owner@acme.test")
    response = _require(owner)
    assert response.status_code == 422
    assert "for yourself first" in _field_error(response, "require_two_factor")
    assert not db.session.get(Org, world.a.org.id).require_two_factor
    enrol(owner)
    assert _require(owner).status_code == 303
    db.session.expire_all()
    assert db.session.get(Org, world.a.org.id).require_two_factor
    (event,) = [e for e in _events("org.updated") if "require_two_factor" in e.payload["fields"]]
    assert event.org_id == world.a.org.id


def test_an_admin_without_two_factor_is_sent_to_enrol_and_members_are_not(world, login):
    owner = login("owner@acme.test")
    enrol(owner)
    assert _require(owner).status_code == 303
    admin = login("admin@acme.test")
    for path in ("/models", "/settings", "/profile", "/wiki"):
        response = admin.get(path)
        assert response.status_code == 302, path
        assert response.headers["Location"] == "/profile/two-factor"
    htmx = admin.get("/models", headers={"HX-Request": "true"})
    assert htmx.headers.get("HX-Redirect") or htmx.headers.get("HX-Location")
    assert "requires two-factor" in admin.get("/profile/two-factor").get_data(as_text=True)
    # A member of the same org goes on as before, and so does the owner (enrolled).
    assert login("member@acme.test").get("/models").status_code == 200
    assert owner.get("/models").status_code == 200
    # Enrolled, the admin is let in, and cannot turn it off while the org requires it.
    enrol(admin)
    assert admin.get("/models").status_code == 200
    _opened(admin, "/profile")
    form = {"disable_password": factories.PASSWORD}
    response = admin.post("/profile/two-factor/disable", data=form)
    assert response.status_code == 422
    assert "requires two-factor" in _field_error(response, "disable_password")


def test_the_requirement_is_of_one_org(world, login):
    owner = login("owner@acme.test")
    enrol(owner)
    _require(owner)
    # Globex's admin is not held back by Acme's rule.
    assert login("admin@globex.test").get("/models").status_code == 200


def test_the_requirement_holds_for_the_api_with_a_session_too(world, login):
    owner = login("owner@acme.test")
    enrol(owner)
    _require(owner)
    admin = login("admin@acme.test")
    response = admin.api("GET", "/api/v1/models", headers={"Accept": "application/json"})
    assert response.status_code == 403
    assert "requires two-factor" in response.get_json()["error"]["message"]
