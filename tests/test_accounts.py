"""Accounts: change the password, reset it by mail, change the email, invitations by mail."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select

from monark.core import accounts, jobs
from monark.core.models import Event, User
from monark.extensions import db
from tests import factories
from tests import jobs as queued
from tests.conftest import Browser

NEW_PASSWORD = "a much better passphrase"


def _page(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def _field_error(response, field: str) -> str:
    found = _page(response).find(id=f"{field}-error")
    return found.get_text(strip=True) if found else ""


def _signed_in(browser) -> bool:
    return browser.get("/profile").status_code == 200


def _opened(browser, url: str):
    """GET a page the way a browser would, keeping its CSRF token for the next post."""
    response = browser.get(url)
    browser._refresh_token(response.get_data(as_text=True))
    return response


def _link_in(message, text: str) -> str:
    html = message.get_body(preferencelist=("html",)).get_content()
    href = BeautifulSoup(html, "html.parser").find("a", string=text)["href"]
    assert href in message.get_body(preferencelist=("plain",)).get_content()
    parts = urlsplit(href)
    return parts.path


def _fresh(app) -> Browser:
    """A browser of its own, signed out."""
    return Browser(app.test_client())


def _password_works(app, email: str, password: str) -> bool:
    client = _fresh(app)
    _opened(client, "/login")
    return client.post("/login", data={"email": email, "password": password}).status_code == 302


def _queued(app) -> int:
    return jobs.queue(app).huey.pending_count()


# ---- changing the password ------------------------------------------------------------------


def test_changing_the_password_signs_out_every_other_session(app, world, login):
    email = world.a.users["member"].email
    here, elsewhere = login(email), login(email)
    answer = here.post(
        "/profile/password",
        data={"current_password": factories.PASSWORD, "new_password": NEW_PASSWORD},
    )
    assert answer.status_code == 303
    assert _signed_in(here)  # this session goes on
    assert not _signed_in(elsewhere)
    assert _password_works(app, email, NEW_PASSWORD)
    assert not _password_works(app, email, factories.PASSWORD)
    (event,) = db.session.scalars(select(Event).where(Event.type == "user.updated")).all()
    assert event.payload == {"fields": ["password"]}  # audited, never the password


@pytest.mark.parametrize(
    ("current", "new", "field", "message"),
    [
        ("wrong password", NEW_PASSWORD, "current_password", "That is not your password."),
        (factories.PASSWORD, "short", "new_password", "Use at least 10 characters."),
        (factories.PASSWORD, "", "new_password", "Use at least 10 characters."),
        (factories.PASSWORD, "x" * 201, "new_password", "Use at most 200 characters."),
    ],
)
def test_a_bad_password_change_names_its_field_and_changes_nothing(
    app, world, login, current, new, field, message
):
    email = world.a.users["member"].email
    member, other = login(email), login(email)
    answer = member.post(
        "/profile/password", data={"current_password": current, "new_password": new}
    )
    assert answer.status_code == 422
    assert _field_error(answer, field) == message
    assert _signed_in(other)
    assert _password_works(app, email, factories.PASSWORD)


def test_a_password_change_needs_the_csrf_token(app, world, login):
    member = login(world.a.users["member"].email)
    member.csrf = "forged"
    form = {"current_password": factories.PASSWORD, "new_password": NEW_PASSWORD}
    assert member.post("/profile/password", data=form).status_code == 400
    assert _password_works(app, world.a.users["member"].email, factories.PASSWORD)


def test_a_session_from_before_versions_still_works(app, world, browser):
    # A session cookie written before 0020 holds the bare id: version 0.
    user = world.a.users["member"]
    with browser.client.session_transaction() as session:
        session["_user_id"] = str(user.id)
        session["_fresh"] = True
    assert _signed_in(browser)


# ---- reset by mail ----------------------------------------------------------------------------


def _ask_reset(browser, email: str):
    _opened(browser, "/login/forgot")
    return browser.post("/login/forgot", data={"email": email})


def test_the_sign_in_page_offers_a_reset(browser):
    link = _page(browser.get("/login")).find("a", string="Forgot password?")
    assert link["href"] == "/login/forgot"


def test_a_reset_answers_alike_whether_or_not_the_account_exists(app, world, browser, smtp):
    known = _ask_reset(browser, world.a.users["member"].email)
    assert _queued(app) == 1
    unknown = _ask_reset(browser, "nobody@nowhere.test")
    assert _queued(app) == 2  # a job either way: the job looks the account up
    assert known.status_code == unknown.status_code == 200

    def said(response) -> str:
        return _page(response).find(role="status").get_text(" ", strip=True)

    assert said(known).replace(world.a.users["member"].email, "X") == said(unknown).replace(
        "nobody@nowhere.test", "X"
    )
    queued.drain()
    assert [m["To"] for m in smtp.messages] == [world.a.users["member"].email]


def test_the_reset_link_sets_a_new_password_once_and_signs_out_every_session(
    app, world, login, browser, smtp
):
    email = world.a.users["member"].email
    elsewhere = login(email)
    _ask_reset(browser, email.upper())  # any case of the address
    queued.drain()
    (message,) = smtp.messages
    assert message["Subject"] == "Reset your Monark password"
    path = _link_in(message, "Choose a new password")
    stashed = browser.get(path)
    assert stashed.status_code == 303
    assert stashed.headers["Location"] == "/reset"  # the token leaves the address bar
    assert stashed.headers["Referrer-Policy"] == "no-referrer"
    form = _opened(browser, "/reset")
    assert email in form.get_data(as_text=True)
    weak = browser.post("/reset", data={"password": "short"})
    assert weak.status_code == 422
    assert _field_error(weak, "password") == "Use at least 10 characters."
    done = browser.post("/reset", data={"password": NEW_PASSWORD})
    assert done.status_code == 303
    assert done.headers["Location"] == "/login"
    assert not _signed_in(elsewhere)
    assert _password_works(app, email, NEW_PASSWORD)
    assert not _password_works(app, email, factories.PASSWORD)
    browser.get(path)  # the same link again
    again = browser.get("/reset")
    assert again.status_code == 400
    assert "used already" in _page(again).find(role="alert").get_text()
    assert _page(again).find("a", string="Ask for a new reset link")["href"] == "/login/forgot"


def test_an_expired_reset_link_asks_for_another(app, world, browser, monkeypatch):
    user = db.session.get(User, world.a.users["member"].id)
    with app.test_request_context("/"):
        real = time.time
        monkeypatch.setattr("itsdangerous.timed.time.time", lambda: real() - 3601)
        token = accounts.reset_token(user)
        monkeypatch.setattr("itsdangerous.timed.time.time", real)
    browser.get(f"/reset/{token}")
    answer = browser.get("/reset")
    assert answer.status_code == 400
    assert _page(answer).find(role="alert").get_text() == "This link has expired."


@pytest.mark.parametrize("how", ["tampered", "another secret", "other account's fingerprint"])
def test_a_forged_reset_link_does_nothing(app, world, browser, how):
    user = db.session.get(User, world.a.users["member"].id)
    other = db.session.get(User, world.a.users["admin"].id)
    with app.test_request_context("/"):
        token = accounts.reset_token(user)
        if how == "tampered":
            token = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
        elif how == "another secret":
            from itsdangerous import URLSafeTimedSerializer

            token = URLSafeTimedSerializer("not ours", salt=accounts.RESET_SALT).dumps(
                [user.id, accounts._fingerprint(user)]
            )
        else:  # a real signature over someone else's id with this user's fingerprint
            token = accounts._serializer(accounts.RESET_SALT).dumps(
                [other.id, accounts._fingerprint(user)]
            )
    browser.get(f"/reset/{token}")
    answer = browser.get("/reset")
    assert answer.status_code == 400
    assert browser.post("/reset", data={"password": NEW_PASSWORD}).status_code in (400, 403)
    assert _password_works(app, user.email, factories.PASSWORD)
    assert _password_works(app, other.email, factories.PASSWORD)


def test_reset_without_a_link_in_the_session(browser):
    answer = browser.get("/reset")
    assert answer.status_code == 400
    assert "No reset link" in answer.get_data(as_text=True)


def test_reset_requests_are_throttled(app, world, browser):
    for _ in range(10):
        assert _ask_reset(browser, "someone@acme.test").status_code == 200
    throttled = _ask_reset(browser, "someone@acme.test")
    assert throttled.status_code == 429
    assert int(throttled.headers["Retry-After"]) > 0
    assert "Too many requests" in _field_error(throttled, "email")
    assert _queued(app) == 10


def test_a_reset_request_names_a_missing_email_and_needs_csrf(app, browser):
    empty = _ask_reset(browser, "")
    assert empty.status_code == 422
    assert _field_error(empty, "email") == "Give the email you sign in with."
    browser.csrf = "forged"
    assert browser.post("/login/forgot", data={"email": "a@b.test"}).status_code == 400
    assert _queued(app) == 0


# ---- invitations by mail ------------------------------------------------------------------


def test_an_invitation_is_mailed_and_its_link_still_shown(app, world, login, smtp):
    admin = login(world.a.users["admin"].email)
    _opened(admin, "/settings")
    answer = admin.post(
        "/settings/invites", data={"email": "New.Person@example.test", "role": "member"}
    )
    assert answer.status_code == 201
    shown = _page(answer).select_one("#invite-link").get_text()
    assert smtp.messages == []  # sent by the queue, after the answer
    queued.drain()
    (message,) = smtp.messages
    assert message["To"] == "new.person@example.test"
    assert message["Subject"] == "Join Acme on Monark"
    path = _link_in(message, "Join Acme")
    assert urlsplit(shown).path == path  # the link the admin may copy is the mailed one
    visitor = _fresh(app)
    opened = visitor.get(path)
    assert opened.status_code == 303
    assert "Join Acme" in visitor.get("/invite").get_data(as_text=True)


# ---- changing the email -----------------------------------------------------------------------


def _ask_email_change(member, email: str, password: str = factories.PASSWORD):
    return member.post("/profile/email", data={"email": email, "email_password": password})


def test_a_new_email_counts_once_its_link_is_confirmed(app, world, login, smtp):
    user = world.a.users["member"]
    old = user.email
    member = login(old)
    assert _ask_email_change(member, "Member.New@Example.test").status_code == 303
    queued.drain()
    (message,) = smtp.messages
    assert message["To"] == "member.new@example.test"  # the new address, not the old
    path = _link_in(message, "Confirm member.new@example.test")
    assert db.session.get(User, user.id).email == old  # nothing changes before the link
    assert member.get(path).headers["Location"] == "/email/confirm"
    confirm = _opened(member, "/email/confirm")
    assert "member.new@example.test" in confirm.get_data(as_text=True)
    assert member.post("/email/confirm").status_code == 303
    db.session.expire_all()
    assert db.session.get(User, user.id).email == "member.new@example.test"
    assert _password_works(app, "member.new@example.test", factories.PASSWORD)
    member.get(path)  # the same link again
    again = member.get("/email/confirm")
    assert again.status_code == 400
    assert "used already" in _page(again).find(role="alert").get_text()


@pytest.mark.parametrize(
    ("email", "password", "field", "message"),
    [
        ("new@example.test", "wrong password", "email_password", "That is not your password."),
        ("not an email", factories.PASSWORD, "email", "Give a valid email address."),
        ("", factories.PASSWORD, "email", "Give a valid email address."),
        ("admin@acme.test", factories.PASSWORD, "email", "Another account uses this email."),
        ("MEMBER@acme.test", factories.PASSWORD, "email", "That is your email already."),
    ],
)
def test_a_bad_email_change_names_its_field_and_sends_nothing(
    app, world, login, email, password, field, message
):
    member = login(world.a.users["member"].email)
    answer = _ask_email_change(member, email, password)
    assert answer.status_code == 422
    assert _field_error(answer, field) == message
    assert _queued(app) == 0


def test_an_email_link_is_only_for_its_own_account(app, world, login, smtp):
    member = login(world.a.users["member"].email)
    _ask_email_change(member, "member.new@example.test")
    queued.drain()
    path = _link_in(smtp.messages[0], "Confirm member.new@example.test")
    admin = login(world.a.users["admin"].email)
    admin.get(path)
    answer = admin.get("/email/confirm")
    assert answer.status_code == 400
    assert "another account" in _page(answer).find(role="alert").get_text()
    db.session.expire_all()
    assert db.session.get(User, world.a.users["member"].id).email == "member@acme.test"
    assert db.session.get(User, world.a.users["admin"].id).email == "admin@acme.test"


def test_an_email_link_opened_signed_out_asks_to_sign_in_first(app, world, login, smtp):
    member = login(world.a.users["member"].email)
    _ask_email_change(member, "member.new@example.test")
    queued.drain()
    path = _link_in(smtp.messages[0], "Confirm member.new@example.test")
    visitor = _fresh(app)
    visitor.get(path)
    answer = visitor.get("/email/confirm")
    assert answer.status_code == 302
    assert answer.headers["Location"].startswith("/login?next=/email/confirm")


def test_a_password_change_kills_an_open_email_link(app, world, login, smtp):
    member = login(world.a.users["member"].email)
    _ask_email_change(member, "member.new@example.test")
    queued.drain()
    path = _link_in(smtp.messages[0], "Confirm member.new@example.test")
    form = {"current_password": factories.PASSWORD, "new_password": NEW_PASSWORD}
    assert member.post("/profile/password", data=form).status_code == 303
    member.get(path)
    assert member.get("/email/confirm").status_code == 400
