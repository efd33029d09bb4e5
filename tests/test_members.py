"""Invitations (one-time links) and removing members, through the settings page."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.core.models import Event, Invite, Membership, User, utcnow
from monark.extensions import db
from tests import factories

LINK_RE = re.compile(r"https?://[^/]+(/invite/inv_[A-Za-z0-9_-]+)")


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def invite_link(browser, email: str, role: str = "member") -> str:
    """Create an invitation as ``browser`` and return the path of its link."""
    response = browser.post("/settings/invites", {"email": email, "role": role})
    assert response.status_code == 201, response.get_data(as_text=True)[:500]
    link = soup_of(response).select_one("#invite-link").get_text()
    match = LINK_RE.fullmatch(link)
    assert match, link
    return match.group(1)


def event_types_since(event_id: int) -> list[str]:
    db.session.expire_all()
    return list(db.session.scalars(select(Event.type).where(Event.id > event_id)))


def last_event_id() -> int:
    return db.session.scalar(select(func.max(Event.id))) or 0


def membership_of(user_email: str, org) -> Membership | None:
    db.session.expire_all()
    return db.session.scalar(
        select(Membership)
        .join(User, User.id == Membership.user_id)
        .where(User.email == user_email, Membership.org_id == org.id)
    )


# ---- making invitations -------------------------------------------------------------------


def test_invitation_link_is_shown_once_and_stored_as_a_hash(world, login):
    admin = login("admin@acme.test")
    since = last_event_id()
    response = admin.post(
        "/settings/invites", {"email": " New.Person@Example.test ", "role": "viewer"}
    )
    assert response.status_code == 201
    assert response.headers["Cache-Control"] == "no-store"
    path = LINK_RE.fullmatch(soup_of(response).select_one("#invite-link").get_text()).group(1)
    token = path.rsplit("/", 1)[1]
    invite = db.session.scalar(select(Invite))
    assert invite.email == "new.person@example.test"
    assert invite.role == "viewer"
    assert invite.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in str(db.session.execute(select(Invite.__table__)).all())
    assert event_types_since(since) == ["member.invited"]
    # The organization form on the same page still shows the stored settings.
    org_form = soup_of(response).select_one("input[name=chat_enabled]")
    assert org_form.has_attr("checked") and world.a.org.chat_enabled
    event = db.session.scalar(select(Event).where(Event.id > since))
    assert "example" not in str(event.payload)  # ids and roles, not addresses
    # The page lists it as pending; a reload (of /settings/invites, where the boosted form
    # left the address bar) shows the settings page without the link.
    reload = admin.get("/settings/invites")
    assert reload.status_code == 302 and reload.headers["Location"] == "/settings#invites"
    page = soup_of(admin.get("/settings"))
    assert page.select_one("#invite-link") is None
    assert "new.person@example.test" in page.select_one("#invites table").get_text()


@pytest.mark.parametrize(
    ("email", "role", "field", "message"),
    [
        ("", "member", "email", "Give an email address"),
        ("not-an-email", "member", "email", "Give an email address"),
        ("member@acme.test", "member", "email", "already a member"),
        ("someone@example.test", "superuser", "role", "Choose one of"),
        ("someone@example.test", "owner", "role", "Only an owner"),
    ],
)
def test_bad_invitations_name_the_field_and_store_nothing(
    world, login, email, role, field, message
):
    admin = login("admin@acme.test")
    response = admin.post("/settings/invites", {"email": email, "role": role})
    assert response.status_code == 422
    error = soup_of(response).select_one(
        f"#invites .has-error #invite-{field}-error, #invites .has-error .error"
    )
    assert error is not None and message in error.get_text()
    assert db.session.scalar(select(func.count(Invite.id))) == 0


def test_owner_may_invite_an_owner(world, login):
    path = invite_link(login("owner@acme.test"), "partner@example.test", "owner")
    assert db.session.scalar(select(Invite.role)) == "owner"
    assert path.startswith("/invite/inv_")


def test_inviting_again_replaces_the_older_link(world, login, browser):
    admin = login("admin@acme.test")
    old = invite_link(admin, "twice@example.test")
    new = invite_link(admin, "twice@example.test")
    assert browser.get(old, follow_redirects=True).status_code == 404
    assert browser.get(new, follow_redirects=True).status_code == 200
    types = list(db.session.scalars(select(Event.type).order_by(Event.id)))[-3:]
    assert types == ["member.invited", "invite.revoked", "member.invited"]


# ---- the token stays out of addresses ---------------------------------------------------------


def test_opening_a_link_moves_its_token_into_the_session_and_out_of_the_address(
    world, login, browser
):
    path = invite_link(login("admin@acme.test"), "newcomer@example.test")
    token = path.rsplit("/", 1)[1]
    opened = browser.get(path)
    assert opened.status_code == 303 and opened.headers["Location"] == "/invite"
    assert opened.headers["Referrer-Policy"] == "no-referrer"
    page = browser.get("/invite")
    assert page.status_code == 200 and "Join Acme" in page.get_data(as_text=True)
    assert token not in page.get_data(as_text=True)
    forms = soup_of(page).select("main form")
    assert forms and all(f.get("action") in (None, "/invite") for f in forms)
    browser._refresh_token(page.get_data(as_text=True))
    done = browser.post("/invite", {"name": "Nia Newcomer", "password": "a long enough secret"})
    assert done.status_code == 303
    # Joined: the session no longer holds the token.
    after = browser.get("/invite")
    assert after.status_code == 404 and "No invitation is open" in after.get_data(as_text=True)


def test_a_second_invitation_link_replaces_the_first(world, login, browser):
    acme = invite_link(login("admin@acme.test"), "twice@example.test")
    globex = invite_link(login("admin@globex.test"), "twice@example.test", "viewer")
    browser.get(acme)
    browser.get(globex)
    text = soup_of(browser.get("/invite")).get_text(" ", strip=True)
    assert "Join Globex" in text and "as viewer" in text


def test_the_invitation_page_without_a_link_says_to_open_one(world, browser):
    response = browser.get("/invite")
    assert response.status_code == 404
    assert "Open the invitation link you were sent" in response.get_data(as_text=True)


def test_a_link_too_long_to_be_an_invitation_is_refused_at_once(world, browser):
    response = browser.get("/invite/inv_" + "x" * 5000)
    assert response.status_code == 404
    assert "not valid any more" in response.get_data(as_text=True)
    with browser.client.session_transaction() as session:
        assert "invite_token" not in session


# ---- accepting -----------------------------------------------------------------------------


def test_newcomer_creates_an_account_and_joins(world, login, browser):
    path = invite_link(login("admin@acme.test"), "newcomer@example.test", "member")
    page = browser.get(path, follow_redirects=True)
    assert page.status_code == 200
    assert page.headers["Cache-Control"] == "no-store"
    assert page.headers["Referrer-Policy"] == "no-referrer"
    text = soup_of(page).get_text(" ", strip=True)
    assert "Join Acme" in text and "as member" in text and "newcomer@example.test" in text
    browser._refresh_token(page.get_data(as_text=True))

    since = last_event_id()
    bad = browser.post("/invite", {"name": "", "password": "short"})
    assert bad.status_code == 422
    soup = soup_of(bad)
    assert "Give your name" in soup.select_one("#name-error").get_text()
    assert "at least 10" in soup.select_one("#password-error").get_text()
    assert db.session.scalar(select(User).where(User.email == "newcomer@example.test")) is None

    done = browser.post("/invite", {"name": "Nia Newcomer", "password": "a long enough secret"})
    assert done.status_code == 303 and done.headers["Location"].endswith("/")
    joined = membership_of("newcomer@example.test", world.a.org)
    assert joined is not None and joined.role == "member"
    assert event_types_since(since) == ["member.joined"]
    # Signed in, in Acme, seeing Acme's records.
    home = browser.get("/models/tasks/records")
    assert home.status_code == 200 and "Acme public task" in home.get_data(as_text=True)
    # The link is spent.
    again = browser.get(path, follow_redirects=True)
    assert again.status_code == 404
    assert "not valid any more" in again.get_data(as_text=True)


def test_existing_account_joins_with_its_password(world, login, browser):
    path = invite_link(login("admin@acme.test"), "owner@globex.test", "viewer")
    page = browser.get(path, follow_redirects=True)
    assert "Enter its password" in page.get_data(as_text=True)
    assert soup_of(page).select_one("input[name=name]") is None
    browser._refresh_token(page.get_data(as_text=True))

    wrong = browser.post("/invite", {"password": "not the password"})
    assert wrong.status_code == 422
    assert "not right" in soup_of(wrong).select_one("#password-error").get_text()
    assert membership_of("owner@globex.test", world.a.org) is None

    ok = browser.post("/invite", {"password": factories.PASSWORD})
    assert ok.status_code == 303
    assert membership_of("owner@globex.test", world.a.org).role == "viewer"
    # The new org is the current one, and Globex is still theirs.
    assert "Acme public task" in browser.get("/models/tasks/records").get_data(as_text=True)
    assert membership_of("owner@globex.test", world.b.org).role == "owner"


def test_signed_in_invitee_joins_with_one_click(world, login):
    path = invite_link(login("admin@acme.test"), "owner@globex.test", "member")
    gil = login("owner@globex.test")
    page = gil.get(path, follow_redirects=True)
    assert "Join Acme" in soup_of(page).select_one("button.primary").get_text()
    assert gil.post("/invite").status_code == 303
    assert membership_of("owner@globex.test", world.a.org).role == "member"


def test_someone_else_signed_in_cannot_use_the_link(world, login):
    path = invite_link(login("admin@acme.test"), "newcomer@example.test")
    member_of_globex = login("member@globex.test")
    page = member_of_globex.get(path, follow_redirects=True)
    assert "You are signed in as member@globex.test" in page.get_data(as_text=True)
    refused = member_of_globex.post("/invite")
    assert refused.status_code == 403
    assert membership_of("member@globex.test", world.a.org) is None
    assert db.session.scalar(select(Invite.accepted_at)) is None


def test_revoked_and_expired_links_are_refused(world, login, browser):
    admin = login("admin@acme.test")
    revoked = invite_link(admin, "revoked@example.test")
    expired = invite_link(admin, "expired@example.test")
    invite = db.session.scalar(select(Invite).where(Invite.email == "revoked@example.test"))
    assert admin.post(f"/settings/invites/{invite.id}/revoke").status_code == 303
    db.session.execute(
        Invite.__table__.update()
        .where(Invite.email == "expired@example.test")
        .values(expires_at=utcnow() - timedelta(minutes=1))
    )
    db.session.commit()
    for path in (revoked, expired):
        response = browser.get(path, follow_redirects=True)
        assert response.status_code == 404
        assert "not valid any more" in response.get_data(as_text=True)
    # Neither is listed as pending any more.
    assert soup_of(admin.get("/settings")).select_one("#invites table") is None


# ---- removing members ------------------------------------------------------------------------


def test_admin_removes_a_member_who_loses_access_but_not_their_records(world, login):
    ben = login("member@acme.test")
    assert ben.get("/models/tasks/records").status_code == 200
    admin = login("admin@acme.test")
    ms = membership_of("member@acme.test", world.a.org)
    since = last_event_id()
    response = admin.post(f"/settings/members/{ms.id}/remove", follow_redirects=True)
    assert "Acme Member was removed" in response.get_data(as_text=True)
    assert membership_of("member@acme.test", world.a.org) is None
    assert event_types_since(since) == ["member.removed"]
    # Their private record is still there (admins see it); they are signed out of Acme.
    assert "Acme private task" in admin.get("/models/tasks/records").get_data(as_text=True)
    assert ben.get("/models/tasks/records").status_code == 302


def test_admin_cannot_remove_an_owner_or_themselves(world, login):
    admin = login("admin@acme.test")
    owner_ms = membership_of("owner@acme.test", world.a.org)
    assert admin.post(f"/settings/members/{owner_ms.id}/remove").status_code == 403
    own = membership_of("admin@acme.test", world.a.org)
    response = admin.post(f"/settings/members/{own.id}/remove", follow_redirects=True)
    assert "Ask another admin" in response.get_data(as_text=True)
    assert membership_of("admin@acme.test", world.a.org) is not None
    assert membership_of("owner@acme.test", world.a.org) is not None
    # The page offers no Remove button for either.
    buttons = [
        b["aria-label"]
        for b in soup_of(admin.get("/settings")).select("button[aria-label^=Remove]")
    ]
    assert buttons == ["Remove Acme Member", "Remove Acme Viewer"]


def test_owner_removes_another_owner(world, login):
    other = factories.make_user("second@acme.test", "Second Owner")
    ms = factories.add_member(other, world.a.org, "owner")
    owner = login("owner@acme.test")
    assert owner.post(f"/settings/members/{ms.id}/remove").status_code == 303
    assert membership_of("second@acme.test", world.a.org) is None


def test_a_removed_or_demoted_admins_invitations_stop_working(world, login, browser):
    admin = login("admin@acme.test")
    removed_link = invite_link(admin, "friend@example.test", "admin")
    owner = login("owner@acme.test")
    demoted_link = invite_link(login("admin@globex.test"), "pal@example.test")
    # Acme's owner removes the admin: their pending invitation is revoked with them.
    ms = membership_of("admin@acme.test", world.a.org)
    assert owner.post(f"/settings/members/{ms.id}/remove").status_code == 303
    assert db.session.scalar(select(Invite.revoked_at).where(Invite.email == "friend@example.test"))
    assert browser.get(removed_link, follow_redirects=True).status_code == 404
    # Globex's admin becomes a member: the link they made no longer vouches for anyone.
    globex_admin = membership_of("admin@globex.test", world.b.org)
    globex_admin.role = "member"
    db.session.commit()
    gone = browser.get(demoted_link, follow_redirects=True)
    assert gone.status_code == 404
    assert "can no longer invite" in gone.get_data(as_text=True)
