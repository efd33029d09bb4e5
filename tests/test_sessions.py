"""Signed-in sessions: a row per session, listed on the profile, signed out one by one or all
but this one (the revoked client is signed out at its next request); and the development
outbox, which shows an admin their own org's mail only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from bs4 import BeautifulSoup
from flask import Flask
from sqlalchemy import event, select, update

from monark.core import mail, sessions
from monark.core.models import Event, User, UserSession, utcnow
from monark.extensions import db
from tests import factories
from tests import jobs as queued
from tests.conftest import Browser

CHROME_LINUX = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)"
    " Chrome/131.0.0.0 Safari/537.36"
)
FIREFOX_WINDOWS = "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0"


def _page(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def _client(app: Flask, email: str, agent: str = CHROME_LINUX) -> Browser:
    browser = Browser(app.test_client())
    browser.client.environ_base["HTTP_USER_AGENT"] = agent
    return browser.login(email)


def _rows(email: str) -> list[UserSession]:
    db.session.expire_all()
    user = db.session.scalar(select(User).where(User.email == email))
    stmt = select(UserSession).where(UserSession.user_id == user.id).order_by(UserSession.id)
    return list(db.session.scalars(stmt))


def _signed_in(browser: Browser) -> bool:
    return browser.get("/profile").status_code == 200


def _session_rows(browser: Browser) -> list[list[str]]:
    table = _page(browser.get("/profile")).select_one("#sessions table")
    return [
        [td.get_text(" ", strip=True) for td in tr.find_all("td")]
        for tr in table.select("tbody tr")
    ]


def test_a_sign_in_makes_a_session_row_listed_on_the_profile(app, world):
    chrome = _client(app, "member@acme.test")
    _client(app, "member@acme.test", FIREFOX_WINDOWS)
    listed = _session_rows(chrome)
    assert len(listed) == 2
    mine = [row for row in listed if "(this session)" in row[0]]
    assert mine and mine[0][0] == "Chrome on Linux (this session)"
    assert any(row[0] == "Firefox on Windows" for row in listed)
    assert all(row[1] == "127.0.0.1" for row in listed)
    # Only this user's sessions: another member's are not listed.
    _client(app, "viewer@acme.test")
    assert len(_session_rows(chrome)) == 2
    # The cookie holds a token; the row only its digest.
    with chrome.client.session_transaction() as cookie:
        token = cookie[sessions.SESSION_KEY]
    assert {r.token_hash for r in _rows("member@acme.test")} >= {sessions.digest(token)}
    assert token not in {r.token_hash for r in _rows("member@acme.test")}


def test_a_session_signed_out_from_another_is_signed_out_at_its_next_request(app, world):
    here = _client(app, "member@acme.test")
    there = _client(app, "member@acme.test", FIREFOX_WINDOWS)
    other = next(r for r in _rows("member@acme.test") if "Firefox" in r.user_agent)
    response = here.post(f"/profile/sessions/{other.id}/revoke")
    assert response.status_code == 303
    assert "signed out" in here.get("/profile").get_data(as_text=True)
    response = there.get("/models")
    assert response.status_code == 302 and response.headers["Location"].startswith("/login")
    assert _signed_in(here)
    assert [r.revoked_at is not None for r in _rows("member@acme.test")] == [False, True]
    (revoked,) = db.session.scalars(select(Event).where(Event.type == "user.sessions_revoked"))
    assert revoked.payload == {"ids": [other.id]}


def test_another_users_session_cannot_be_signed_out(app, world):
    member = _client(app, "member@acme.test")
    viewer = _client(app, "viewer@acme.test")
    (theirs,) = _rows("viewer@acme.test")
    assert member.post(f"/profile/sessions/{theirs.id}/revoke").status_code == 404
    assert _rows("viewer@acme.test")[0].revoked_at is None
    assert _signed_in(viewer)
    assert member.post("/profile/sessions/not-an-id/revoke").status_code == 404


def test_signing_out_a_session_needs_the_csrf_token(app, world):
    here = _client(app, "member@acme.test")
    there = _client(app, "member@acme.test")
    other = _rows("member@acme.test")[1]
    here.csrf = "forged"
    assert here.post(f"/profile/sessions/{other.id}/revoke").status_code == 400
    assert here.post("/profile/sessions/revoke-others").status_code == 400
    assert _signed_in(there)


def test_sign_out_everywhere_else_keeps_this_session(app, world):
    here = _client(app, "member@acme.test")
    others = [_client(app, "member@acme.test", FIREFOX_WINDOWS) for _ in range(2)]
    response = here.post("/profile/sessions/revoke-others")
    assert response.status_code == 303
    assert "2 other sessions are signed out" in here.get("/profile").get_data(as_text=True)
    assert _signed_in(here)
    assert not any(_signed_in(b) for b in others)
    assert [r.revoked_at is None for r in _rows("member@acme.test")] == [True, False, False]
    listed = _session_rows(here)
    assert len(listed) == 1 and "(this session)" in listed[0][0]


def test_sign_out_everywhere_else_also_ends_a_cookie_from_before_session_rows(app, world):
    here = _client(app, "member@acme.test")
    old = Browser(app.test_client())
    with old.client.session_transaction() as cookie:  # as written before 0021
        cookie["_user_id"] = f"{world.a.users['member'].id}:0"
        cookie["_fresh"] = True
    here.post("/profile/sessions/revoke-others")
    assert not _signed_in(old)
    assert _signed_in(here)


def test_a_cookie_from_before_session_rows_gets_a_row(app, world):
    old = Browser(app.test_client())
    with old.client.session_transaction() as cookie:
        cookie["_user_id"] = str(world.a.users["member"].id)
        cookie["_fresh"] = True
    assert _signed_in(old)
    (row,) = _rows("member@acme.test")
    with old.client.session_transaction() as cookie:
        assert sessions.digest(cookie[sessions.SESSION_KEY]) == row.token_hash
    assert _signed_in(old)
    assert len(_rows("member@acme.test")) == 1  # adopted once


def test_signing_out_ends_the_row(app, world):
    member = _client(app, "member@acme.test")
    member.post("/logout")
    (row,) = _rows("member@acme.test")
    assert row.revoked_at is not None


def test_a_password_change_signs_out_the_other_sessions_and_keeps_this_one(app, world):
    here = _client(app, "member@acme.test")
    there = _client(app, "member@acme.test")
    form = {"current_password": factories.PASSWORD, "new_password": "a much better passphrase"}
    assert here.post("/profile/password", data=form).status_code == 303
    assert _signed_in(here) and not _signed_in(there)
    live = [r for r in _rows("member@acme.test") if r.revoked_at is None]
    assert len(live) == 1 and len(_session_rows(here)) == 1


def test_last_seen_is_written_at_most_once_a_minute(app, world):
    member = _client(app, "member@acme.test")
    (row,) = _rows("member@acme.test")
    first_seen = row.last_seen_at
    member.get("/models")
    assert _rows("member@acme.test")[0].last_seen_at == first_seen
    long_ago = utcnow() - timedelta(minutes=5)
    db.session.execute(update(UserSession).values(last_seen_at=long_ago))
    db.session.commit()
    member.get("/models")
    seen = _rows("member@acme.test")[0].last_seen_at
    assert seen.replace(tzinfo=None) > long_ago.replace(tzinfo=None) + timedelta(minutes=4)


def test_a_request_reads_its_session_in_one_query_with_the_user(app, world):
    member = _client(app, "member@acme.test")
    member.get("/models")  # last seen just written: the next request writes nothing
    seen: list[str] = []

    def _statement(conn, cursor, statement, *args):
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", _statement)
    try:
        assert member.get("/models").status_code == 200
    finally:
        event.remove(db.engine, "before_cursor_execute", _statement)
    about_sessions = [s for s in seen if "user_sessions" in s]
    assert len(about_sessions) == 1
    assert "JOIN user_sessions" in about_sessions[0] and "FROM users" in about_sessions[0]


@pytest.mark.parametrize(
    ("agent", "device"),
    [
        (CHROME_LINUX, "Chrome on Linux"),
        (FIREFOX_WINDOWS, "Firefox on Windows"),
        (
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like"
            " Gecko) Version/18.1 Safari/605.1.15",
            "Safari on macOS",
        ),
        (
            "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15"
            " (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
            "Safari on iOS",
        ),
        (
            "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko)"
            " Chrome/131.0.0.0 Mobile Safari/537.36",
            "Chrome on Android",
        ),
        (
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko)"
            " Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0",
            "Edge on Windows",
        ),
        ("curl/8.5.0", "Unknown device"),
        ("", "Unknown device"),
    ],
)
def test_a_device_is_said_shortly(agent, device):
    assert sessions.device_of(agent) == device


# ---- the development outbox ------------------------------------------------------------------


def _send(app: Flask, to: str, name: str, kind: str = "reset") -> None:
    """A mail of ``kind`` to ``to``, for the account of that address (as the app sends it)."""
    account = db.session.scalar(select(User.id).where(User.email == to))
    with app.test_request_context("/"):
        link = mail.link("auth.login")
        mail.send(kind, to, account, name=name, email=to, link=link)


def _listed(browser: Browser) -> list[str]:
    page = _page(browser.get("/dev/outbox"))
    return [tr.get_text(" ", strip=True) for tr in page.select("tbody tr")]


def _names(app: Flask) -> dict[str, str]:
    """Each outbox file's name by its recipient."""
    folder = mail.state(app).outbox
    found = {}
    for path in folder.glob("*.eml"):
        for line in path.read_text().splitlines():
            if line.startswith("To: "):
                found[line[4:].strip()] = path.name
    return found


def test_the_outbox_shows_an_admin_their_own_orgs_mail_only(app, world, login):
    _send(app, "member@acme.test", "Acme member")
    _send(app, "member@globex.test", "Globex member")
    _send(app, "admin@acme.test", "Acme admin")
    _send(app, "stranger@example.test", "Nobody's")
    queued.drain()
    acme = login("admin@acme.test")
    listed = " ".join(_listed(acme))
    assert "member@acme.test" in listed and "admin@acme.test" in listed
    assert "globex" not in listed and "stranger@example.test" not in listed
    names = _names(app)
    assert acme.get(f"/dev/outbox/{names['member@acme.test']}").status_code == 200
    assert acme.get(f"/dev/outbox/{names['member@globex.test']}").status_code == 404
    assert acme.get(f"/dev/outbox/{names['stranger@example.test']}").status_code == 404
    # Globex's admin sees Globex's, not Acme's.
    globex = " ".join(_listed(login("admin@globex.test")))
    assert "member@globex.test" in globex and "acme.test" not in globex


def test_the_outbox_shows_the_orgs_invitations(app, world, login):
    from tests.test_members import invite_link

    admin = login("admin@acme.test")
    invite_link(admin, "newcomer@example.test")
    queued.drain()
    assert any("newcomer@example.test" in row for row in _listed(admin))
    assert not any("newcomer" in row for row in _listed(login("admin@globex.test")))


def test_an_admin_never_reads_the_account_mail_of_an_owner_or_of_another_orgs_member(
    app, world, login
):
    from monark.core.models import Membership
    from tests.test_members import invite_link

    admin = login("admin@acme.test")
    invite_link(admin, "owner@globex.test")  # invited: the invitation shows, nothing else
    # Acme's member also joins Globex: their reset link would sign into Globex too.
    db.session.add(
        Membership(org_id=world.b.org.id, user_id=world.a.users["member"].id, role="viewer")
    )
    db.session.commit()
    for to in ("owner@acme.test", "owner@globex.test", "member@acme.test", "viewer@acme.test"):
        _send(app, to, "Someone")
    queued.drain()
    resets = [
        p for p in mail.state(app).outbox.glob("*.eml") if "X-Monark-Kind: reset" in p.read_text()
    ]
    names = {
        line[4:].strip(): p.name
        for p in resets
        for line in p.read_text().splitlines()
        if line.startswith("To: ")
    }
    listed = " ".join(_listed(admin))
    assert "Reset" in listed and "viewer@acme.test" in listed  # of this org alone, below
    for hidden in ("owner@acme.test", "owner@globex.test", "member@acme.test"):
        assert not any(hidden in row and "Reset" in row for row in _listed(admin)), hidden
    assert admin.get(f"/dev/outbox/{names['owner@globex.test']}").status_code == 404
    assert admin.get(f"/dev/outbox/{names['member@acme.test']}").status_code == 404
    # An owner's reach takes in the admins and every role below, of this org alone.
    owner = login("owner@acme.test")
    assert owner.get(f"/dev/outbox/{names['viewer@acme.test']}").status_code == 200
    assert owner.get(f"/dev/outbox/{names['member@acme.test']}").status_code == 404


def test_signing_out_with_a_cookie_from_before_session_rows_leaves_no_row(app, world):
    old = Browser(app.test_client())
    with old.client.session_transaction() as cookie:
        cookie["_user_id"] = str(world.a.users["member"].id)
        cookie["_fresh"] = True
    old._refresh_token(old.get("/profile").get_data(as_text=True))
    assert old.post("/logout").status_code == 302
    assert [r for r in _rows("member@acme.test") if r.revoked_at is None] == []
    assert not _signed_in(old)
