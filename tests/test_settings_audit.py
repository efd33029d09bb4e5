"""Org settings, roles, the profile switch, API keys and the audit log, with their events."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.config import load_config
from monark.core.models import ApiKey, Event, Membership, Org, User
from monark.extensions import db
from tests import factories
from tests.llm_script import Say
from tests.test_chat_loop import send
from tests.tuning import configure

KEYS = "/settings/api-keys"


# ---- helpers --------------------------------------------------------------------------


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def flashes(soup: BeautifulSoup) -> list[str]:
    return [p.get_text(strip=True) for p in soup.select(".flashes .flash")]


def last_event_id() -> int:
    return db.session.scalar(select(func.max(Event.id))) or 0


def events_since(event_id: int) -> list[Event]:
    db.session.expire_all()
    return list(db.session.scalars(select(Event).where(Event.id > event_id).order_by(Event.id)))


def assert_one_event(
    since: int,
    type: str,
    *,
    actor: User,
    subject_type: str,
    subject_id: int,
    org: Org,
    not_in_payload: tuple[str, ...] = (),
) -> Event:
    """Exactly one new event, of this type and actor, naming ids and no field values."""
    events = events_since(since)
    assert [e.type for e in events] == [type]
    event = events[0]
    assert event.org_id == org.id
    assert (event.actor_kind, event.actor_id) == ("user", actor.id)
    assert (event.subject_type, event.subject_id) == (subject_type, subject_id)
    text = json.dumps(event.payload)
    for value in not_in_payload:
        assert value not in text, (value, event.payload)
    return event


def membership(world, role: str) -> Membership:
    return db.session.scalar(
        select(Membership).where(
            Membership.user_id == world.a.users[role].id, Membership.org_id == world.a.org.id
        )
    )


def role_of(world, role: str) -> str:
    db.session.expire_all()
    return membership(world, role).role


# ---- org settings -----------------------------------------------------------------------


def _checked(soup: BeautifulSoup, name: str) -> bool:
    return soup.select_one(f"input[name={name}]").has_attr("checked")


def test_org_settings_page_shows_the_current_state(login, world):
    response = login("admin@acme.test").get("/settings")
    assert response.status_code == 200
    soup = soup_of(response)
    assert soup.select_one("#name")["value"] == "Acme"
    assert _checked(soup, "chat_enabled") and _checked(soup, "ai_agent_enabled")
    assert not _checked(soup, "branding_enabled")
    assert soup.select_one("#assistant_name")["value"] == ""
    emails = [row.select("td")[1].get_text(strip=True) for row in soup.select("tbody tr")]
    assert sorted(emails) == sorted(f"{r}@acme.test" for r in world.a.users)
    assert soup.find("a", string="API keys")["href"] == KEYS


def test_org_settings_toggles_and_branding(login, world):
    browser = login("admin@acme.test")
    admin, org = world.a.users["admin"], world.a.org
    since = last_event_id()
    response = browser.post(
        "/settings", {"name": "Acme", "branding_enabled": "on", "assistant_name": "Nova"}
    )
    assert response.status_code == 303 and response.headers["Location"] == "/settings"
    event = assert_one_event(
        since,
        "org.updated",
        actor=admin,
        subject_type="org",
        subject_id=org.id,
        org=org,
        not_in_payload=("Nova", "Acme"),
    )
    assert sorted(event.payload["fields"]) == [
        "ai_agent_enabled",
        "assistant_name",
        "branding_enabled",
        "chat_enabled",
    ]
    db.session.expire_all()
    stored = db.session.get(Org, org.id)
    assert (stored.chat_enabled, stored.ai_agent_enabled) == (False, False)
    assert (stored.branding_enabled, stored.assistant_name) == (True, "Nova")
    page = soup_of(browser.get("/settings"))
    assert flashes(page) == ["Settings saved."]
    assert not _checked(page, "chat_enabled") and not _checked(page, "ai_agent_enabled")
    assert _checked(page, "branding_enabled")
    assert page.select_one("#assistant_name")["value"] == "Nova"
    assert "Now: Nova." in page.get_text()

    # Turning one switch back on records just that field.
    since = last_event_id()
    form = {"name": "Acme", "chat_enabled": "on", "branding_enabled": "on"}
    assert browser.post("/settings", {**form, "assistant_name": "Nova"}).status_code == 303
    event = assert_one_event(
        since, "org.updated", actor=admin, subject_type="org", subject_id=org.id, org=org
    )
    assert event.payload == {"fields": ["chat_enabled"]}
    # Saving without a change writes no event.
    since = last_event_id()
    assert browser.post("/settings", {**form, "assistant_name": "Nova"}).status_code == 303
    assert events_since(since) == []


def test_branding_without_a_name_is_a_field_error(login, world):
    browser = login("admin@acme.test")
    since = last_event_id()
    response = browser.post(
        "/settings", {"name": "Acme Renamed", "branding_enabled": "on", "assistant_name": "  "}
    )
    assert response.status_code == 422
    soup = soup_of(response)
    error = soup.select_one("#assistant_name-error")
    assert error is not None and "name" in error.get_text()
    assert soup.select_one("#assistant_name")["aria-invalid"] == "true"
    # The typed input is kept.
    assert soup.select_one("#name")["value"] == "Acme Renamed"
    assert _checked(soup, "branding_enabled") and not _checked(soup, "chat_enabled")
    db.session.expire_all()
    stored = db.session.get(Org, world.a.org.id)
    assert (stored.name, stored.branding_enabled, stored.chat_enabled) == ("Acme", False, True)
    assert events_since(since) == []
    empty = browser.post("/settings", {"name": "", "chat_enabled": "on"})
    assert empty.status_code == 422
    assert soup_of(empty).select_one("#name-error") is not None
    assert events_since(since) == []


@pytest.mark.parametrize(
    "field, value",
    [
        ("name", "Glo\r\nBcc: x@evil.test"),
        ("name", "Acme\u202egnp.exe"),
        ("assistant_name", "No\tva"),
        ("assistant_name", "\u2066Nova"),
    ],
    ids=["org-line-break", "org-bidi", "assistant-tab", "assistant-isolate"],
)
def test_names_shown_on_one_line_refuse_line_breaks_and_direction_overrides(
    login, world, field, value
):
    browser = login("admin@acme.test")
    since = last_event_id()
    form = {"name": "Acme", "branding_enabled": "on", "assistant_name": "Nova", field: value}
    response = browser.post("/settings", form)
    assert response.status_code == 422
    assert "bidirectional" in soup_of(response).select_one(f"#{field}-error").get_text()
    db.session.expire_all()
    assert db.session.get(Org, world.a.org.id).name == "Acme"
    assert events_since(since) == []


# ---- roles --------------------------------------------------------------------------------


def _change_role(browser, world, role: str, new_role: str):
    return browser.post(f"/settings/members/{membership(world, role).id}/role", {"role": new_role})


def test_admin_changes_a_members_role(login, world):
    browser = login("admin@acme.test")
    since = last_event_id()
    response = _change_role(browser, world, "member", "viewer")
    assert response.status_code == 303
    assert role_of(world, "member") == "viewer"
    event = assert_one_event(
        since,
        "member.role_changed",
        actor=world.a.users["admin"],
        subject_type="membership",
        subject_id=membership(world, "member").id,
        org=world.a.org,
        not_in_payload=("Acme Member", "member@acme.test"),
    )
    # Ids and roles only (the audit log says "from member to viewer"), never a name.
    assert event.payload == {
        "user_id": world.a.users["member"].id,
        "fields": ["role"],
        "from": "member",
        "to": "viewer",
    }
    assert flashes(soup_of(browser.get("/settings"))) == ["Acme Member is now a viewer."]


def test_only_owners_make_or_unmake_owners(login, world):
    browser = login("admin@acme.test")
    since = last_event_id()
    promote = _change_role(browser, world, "member", "owner")
    assert promote.status_code == 403
    assert role_of(world, "member") == "member"
    demote = _change_role(browser, world, "owner", "admin")
    assert demote.status_code == 403
    assert role_of(world, "owner") == "owner"
    unknown = _change_role(browser, world, "member", "superuser")
    assert unknown.status_code == 303
    assert role_of(world, "member") == "member"
    page = soup_of(browser.get("/settings"))
    assert any("Choose one of" in f for f in flashes(page))
    assert events_since(since) == []
    # The page offers an admin neither an owner's row nor the owner role, nor their own row.
    selects = {
        s["id"]: [o["value"] for o in s.select("option")] for s in page.select("select[id^=role-]")
    }
    owner_ms, admin_ms = membership(world, "owner").id, membership(world, "admin").id
    assert f"role-{owner_ms}" not in selects and f"role-{admin_ms}" not in selects
    assert all(options == ["admin", "member", "viewer"] for options in selects.values())


def test_owner_makes_an_owner_and_the_last_owner_stays(login, world):
    browser = login("owner@acme.test")
    since = last_event_id()
    # Alone, the owner cannot step down.
    response = _change_role(browser, world, "owner", "admin")
    assert response.status_code == 303
    assert role_of(world, "owner") == "owner"
    assert flashes(soup_of(browser.get("/settings"))) == [
        "The organization needs at least one owner."
    ]
    assert events_since(since) == []
    # With a second owner, they can.
    assert _change_role(browser, world, "admin", "owner").status_code == 303
    assert role_of(world, "admin") == "owner"
    assert_one_event(
        since,
        "member.role_changed",
        actor=world.a.users["owner"],
        subject_type="membership",
        subject_id=membership(world, "admin").id,
        org=world.a.org,
    )
    since = last_event_id()
    assert _change_role(browser, world, "owner", "admin").status_code == 303
    assert role_of(world, "owner") == "admin"
    assert [e.type for e in events_since(since)] == ["member.role_changed"]


# ---- profile --------------------------------------------------------------------------------


def test_profile_ai_switch(login, world):
    browser = login("member@acme.test")
    user = world.a.users["member"]
    page = soup_of(browser.get("/profile"))
    assert _checked(page, "ai_agent_enabled")
    since = last_event_id()
    response = browser.post("/profile", {})
    assert response.status_code == 303
    db.session.expire_all()
    assert db.session.get(User, user.id).ai_agent_enabled is False
    event = assert_one_event(
        since, "user.updated", actor=user, subject_type="user", subject_id=user.id, org=world.a.org
    )
    assert event.payload == {"fields": ["ai_agent_enabled"]}
    page = soup_of(browser.get("/profile"))
    assert flashes(page) == ["Profile saved."]
    assert not _checked(page, "ai_agent_enabled")
    since = last_event_id()
    browser.post("/profile", {})
    assert events_since(since) == []
    browser.post("/profile", {"ai_agent_enabled": "on"})
    db.session.expire_all()
    assert db.session.get(User, user.id).ai_agent_enabled is True
    assert [e.type for e in events_since(since)] == ["user.updated"]


# ---- API keys -------------------------------------------------------------------------------


def _create_key(browser, name: str = "CI bot", role: str = "member") -> tuple[str, ApiKey]:
    # 201 and the page with the token, once, in the answer to the POST itself.
    response = browser.post(KEYS, {"name": name, "role": role})
    assert response.status_code == 201, response.get_data(as_text=True)[:1000]
    assert response.headers["Cache-Control"] == "no-store"
    page = soup_of(response)
    token = page.select_one("#new-token").get_text(strip=True)
    assert flashes(page) == [f"Key {name} created. Copy it now: it is not shown again."]
    assert re.fullmatch(r"mrk_[A-Za-z0-9_-]{40,}", token), token
    key = db.session.scalar(select(ApiKey).where(ApiKey.name == name))
    return token, key


def test_a_new_key_is_shown_once_and_stored_hashed(login, world):
    browser = login("admin@acme.test")
    since = last_event_id()
    token, key = _create_key(browser)
    assert_one_event(
        since,
        "apikey.created",
        actor=world.a.users["admin"],
        subject_type="api_key",
        subject_id=key.id,
        org=world.a.org,
        not_in_payload=(token, token[:10], "CI bot", "member"),
    )
    assert (key.org_id, key.role, key.created_by_id) == (
        world.a.org.id,
        "member",
        world.a.users["admin"].id,
    )
    # Stored only as its SHA-256 digest: no column holds the token.
    assert key.key_hash == hashlib.sha256(token.encode()).hexdigest()
    with db.engine.connect() as conn:
        rows = conn.execute(select(ApiKey.__table__)).all()
    assert rows
    for row in rows:
        for value in row:
            assert token not in str(value)
    # The next page view does not show it again; the list shows the prefix only.
    again = browser.get(KEYS)
    assert token not in again.get_data(as_text=True)
    soup = soup_of(again)
    assert soup.select_one("#new-token") is None
    row = next(tr for tr in soup.select("tbody tr") if tr.td.get_text(strip=True) == "CI bot")
    assert row.select_one("code").get_text(strip=True) == f"{token[:10]}…"


def test_using_and_revoking_a_key(app, login, world):
    browser = login("admin@acme.test")
    token, key = _create_key(browser, "Robot", "viewer")
    assert key.last_used_at is None
    api = app.test_client()
    headers = {"Authorization": f"Bearer {token}"}
    me = api.get("/api/v1/me", headers=headers)
    assert me.status_code == 200
    assert me.get_json()["actor_kind"] == "api_key"
    assert me.get_json()["role"] == "viewer"
    assert me.get_json()["api_key"] == {"id": key.id, "name": "Robot"}
    db.session.expire_all()
    assert db.session.get(ApiKey, key.id).last_used_at is not None
    page = soup_of(browser.get(KEYS))
    row = next(tr for tr in page.select("tbody tr") if tr.td.get_text(strip=True) == "Robot")
    assert "UTC" in row.select("td")[4].get_text()

    since = last_event_id()
    response = browser.post(f"{KEYS}/{key.id}/revoke")
    assert response.status_code == 303
    assert_one_event(
        since,
        "apikey.revoked",
        actor=world.a.users["admin"],
        subject_type="api_key",
        subject_id=key.id,
        org=world.a.org,
        not_in_payload=("Robot",),
    )
    denied = api.get("/api/v1/me", headers=headers)
    assert denied.status_code == 401
    assert denied.get_json()["error"]["code"] == "unauthorized"
    page = soup_of(browser.get(KEYS))
    assert flashes(page) == ["Key Robot revoked."]
    row = next(tr for tr in page.select("tbody tr") if tr.td.get_text(strip=True) == "Robot")
    assert row.select_one(".badge").get_text(strip=True) == "revoked"
    assert row.find("button") is None
    # Revoking twice is harmless and writes nothing more.
    since = last_event_id()
    assert browser.post(f"{KEYS}/{key.id}/revoke").status_code == 303
    assert events_since(since) == []
    # Other keys still work.
    other = api.get("/api/v1/me", headers={"Authorization": f"Bearer {world.a.keys['viewer']}"})
    assert other.status_code == 200


def _session_data(app, browser) -> str:
    """The decoded session cookie (signed, not encrypted: anyone holding it can read it)."""
    cookie = browser.client.get_cookie("session")
    if cookie is None:
        return ""
    serializer = app.session_interface.get_signing_serializer(app)
    return json.dumps(serializer.loads(cookie.value))


def test_a_new_key_never_enters_the_session_cookie(app, login, world):
    browser = login("admin@acme.test")
    token, _ = _create_key(browser)
    assert "_user_id" in _session_data(app, browser)  # a real, decodable session
    assert token not in _session_data(app, browser)
    assert token[4:20] not in _session_data(app, browser)
    # The flash went out with the 201 page; a reload is a plain GET: no key, no token.
    since = last_event_id()
    again = browser.get(KEYS)
    assert again.status_code == 200 and token not in again.get_data(as_text=True)
    assert flashes(soup_of(again)) == []
    assert events_since(since) == []
    assert token not in _session_data(app, browser)


def test_a_key_cannot_outrank_its_creator(login, world):
    browser = login("admin@acme.test")
    form = soup_of(browser.get(KEYS))
    assert [o["value"] for o in form.select("#role option")] == ["admin", "member", "viewer"]
    keys_before = db.session.scalar(select(func.count()).select_from(ApiKey))
    since = last_event_id()
    for data, field in (
        ({"name": "Too strong", "role": "owner"}, "role"),
        ({"name": "Unknown", "role": "superuser"}, "role"),
        ({"name": "  ", "role": "viewer"}, "name"),
    ):
        response = browser.post(KEYS, data)
        assert response.status_code == 422
        soup = soup_of(response)
        assert soup.select_one("#new-token") is None
        errors = soup.select(".field.has-error")
        assert errors and soup.select_one(f"#{field}").find_parent(class_="has-error")
    assert "higher role" in soup_of(browser.post(KEYS, {"name": "X", "role": "owner"})).text
    assert db.session.scalar(select(func.count()).select_from(ApiKey)) == keys_before
    assert events_since(since) == []
    # An admin may make an admin key.
    _create_key(browser, "Peer", "admin")


def test_owner_may_make_an_owner_key(login, world):
    browser = login("owner@acme.test")
    form = soup_of(browser.get(KEYS))
    assert [o["value"] for o in form.select("#role option")] == [
        "owner",
        "admin",
        "member",
        "viewer",
    ]
    _, key = _create_key(browser, "Root", "owner")
    assert key.role == "owner"


# ---- the audit log ----------------------------------------------------------------------------


def _audit_rows(soup: BeautifulSoup) -> list[tuple[str, str, str]]:
    """(type, actor, subject) per row."""
    rows = []
    for tr in soup.select("#audit-table tbody tr"):
        cells = [td.get_text(" ", strip=True) for td in tr.select("td")]
        rows.append((cells[1], cells[2], cells[3]))
    return rows


def test_audit_lists_events_newest_first_in_pages_of_50(login, world):
    owner = world.a.principal("owner")
    made = [factories.make_record(owner, world.a.model, f"Audit secret {i}").id for i in range(50)]
    acme_total = db.session.scalar(select(func.count()).where(Event.org_id == world.a.org.id))
    assert acme_total == 64  # 14 from the world, 50 records
    browser = login("admin@acme.test")
    response = browser.get("/audit")
    assert response.status_code == 200
    soup = soup_of(response)
    first = _audit_rows(soup)
    assert len(first) == 50
    assert first[0] == ("record.created", "Acme Owner", f"record #{made[-1]}")
    assert [row[2] for row in first[:50]] == [f"record #{i}" for i in reversed(made)]
    # No field values appear in the log.
    assert "Audit secret" not in soup.get_text()
    assert soup.find("a", string=re.compile("Newest")) is None
    older = soup.find("a", string=re.compile("Older"))
    second = soup_of(browser.get(older["href"]))
    rest = _audit_rows(second)
    assert len(rest) == 14
    assert rest[-1][0] == "model.created"  # the oldest
    assert second.find("a", string=re.compile("Older")) is None
    assert second.find("a", string=re.compile("Newest"))["href"] == "/audit"
    # Only Acme's events: Globex's record never shows.
    shown = {row[2] for row in first + rest}
    assert f"record #{world.b.public.id}" not in shown


def test_audit_filters_by_type_and_actor(app, login, world):
    # One event by an API key, so that actor exists.
    created = app.test_client().post(
        "/api/v1/models/tasks/records",
        json={"values": {"title": "By key"}},
        headers={"Authorization": f"Bearer {world.a.keys['member']}"},
    )
    assert created.status_code == 201
    key = db.session.scalar(
        select(ApiKey).where(ApiKey.org_id == world.a.org.id, ApiKey.name == "member key")
    )
    browser = login("admin@acme.test")

    soup = soup_of(browser.get("/audit?type=apikey.created"))
    rows = _audit_rows(soup)
    assert len(rows) == 4 and {r[0] for r in rows} == {"apikey.created"}
    # Each names its key, not its id.
    assert "API key “member key”" in {r[2] for r in rows}
    assert soup.select_one("#type option[selected]")["value"] == "apikey.created"

    member = world.a.users["member"]
    rows = _audit_rows(soup_of(browser.get(f"/audit?actor=user:{member.id}")))
    assert rows == [("record.created", "Acme Member", f"record #{world.a.private.id}")]

    rows = _audit_rows(soup_of(browser.get(f"/audit?actor=api_key:{key.id}")))
    assert rows == [("record.created", "API key “member key”", f"record #{created.json['id']}")]

    owner = world.a.users["owner"]
    rows = _audit_rows(soup_of(browser.get(f"/audit?type=field.created&actor=user:{owner.id}")))
    assert len(rows) == 7 and {r[0] for r in rows} == {"field.created"}

    empty = soup_of(browser.get("/audit?actor=assistant"))
    assert _audit_rows(empty) == []
    assert empty.select_one("#audit-table .empty").get_text(strip=True) == "No events match."

    options = [o["value"] for o in soup.select("#actor option")]
    assert f"user:{member.id}" in options and f"api_key:{key.id}" in options
    assert f"user:{world.b.users['member'].id}" not in options

    # The htmx request for the table gets the fragment only.
    fragment = browser.get(
        "/audit?type=model.created", headers={"HX-Request": "true", "HX-Target": "div#audit-table"}
    )
    html = fragment.get_data(as_text=True)
    assert "<main" not in html and html.lstrip().startswith('<div id="audit-table">')
    assert [r[0] for r in _audit_rows(soup_of(fragment))] == ["model.created"]


def test_audit_filter_by_user_includes_their_assistant_actions(login, world):
    member = world.a.users["member"]
    via_assistant = world.a.principal("member").via_assistant(7)
    made = factories.make_record(via_assistant, world.a.model, "By the assistant")
    # Someone else's assistant work is not the member's.
    factories.make_record(world.a.principal("owner").via_assistant(8), world.a.model, "Other")
    browser = login("admin@acme.test")
    rows = _audit_rows(soup_of(browser.get(f"/audit?actor=user:{member.id}")))
    assert rows == [
        (
            "record.created",
            "Acme Member via the assistant (conversation #7)",
            f"record #{made.id}",
        ),
        ("record.created", "Acme Member", f"record #{world.a.private.id}"),
    ]
    # "The assistant (any user)" still lists every assistant action, and only those.
    rows = _audit_rows(soup_of(browser.get("/audit?actor=assistant")))
    assert [r[1].split(" via ")[0] for r in rows] == ["Acme Owner", "Acme Member"]


def test_a_refused_page_says_so_in_plain_words(world, login):
    response = login("viewer@acme.test").get("/settings")
    assert response.status_code == 403
    text = soup_of(response).get_text(" ", strip=True)
    assert "Your role in Acme (viewer) does not allow this." in text
    assert "Ask an admin of Acme" in text


def test_audit_names_models_and_links_records_that_still_exist(world, login):
    from monark.records import services as records

    owner = world.a.principal("owner")
    kept = factories.make_record(owner, world.a.model, "Kept")
    gone = factories.make_record(owner, world.a.model, "Gone")
    records.delete_record(owner, world.a.model, gone.id)
    soup = soup_of(login("admin@acme.test").get("/audit"))
    rows = [tr.select("td") for tr in soup.select("#audit-table tbody tr")]
    by_subject = {td[3].get_text(strip=True): td for td in rows}
    link = by_subject[f"record #{kept.id}"][3].select_one("a")
    assert link["href"] == f"/models/tasks/records/{kept.id}"
    assert by_subject[f"record #{gone.id}"][3].select_one("a") is None
    assert "model: Tasks" in by_subject[f"record #{kept.id}"][4].get_text()
    assert "model_id" not in soup.select_one("#audit-table").get_text()


def test_audit_names_the_member_of_member_events(world, login):
    from monark.settings import members

    ms = membership(world, "viewer")
    members.remove_member(world.a.principal("owner"), ms.id)
    soup = soup_of(login("admin@acme.test").get("/audit?type=member.removed"))
    details = soup.select_one("#audit-table tbody tr td:last-child").get_text()
    assert "member: Acme Viewer" in details and "user_id" not in details


def test_audit_can_hide_chat_messages(world, login, scripted):
    from monark.chat.turn.start import SendInput, send_message
    from tests.llm_script import Say

    scripted.script.add([Say("Hello.")])
    send_message(world.a.principal("member"), SendInput(text="Hi"))
    admin = login("admin@acme.test")

    def types(query: str) -> set[str]:
        soup = soup_of(admin.get(f"/audit{query}"))
        return {code.get_text() for code in soup.select("#audit-table tbody td:nth-child(2) code")}

    assert "chat.message.created" in types("")
    hidden = types("?hide_chat=1")
    assert "chat.message.created" not in hidden and "chat.conversation.created" in hidden
    box = soup_of(admin.get("/audit?hide_chat=1")).select_one("input[name=hide_chat]")
    assert box.has_attr("checked")


# ---- the assistant's name -------------------------------------------------------------


def test_monark_assistant_name_is_read_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MONARK_ASSISTANT_NAME", "Ada")
    assert load_config(str(tmp_path))["MONARK_ASSISTANT_NAME"] == "Ada"
    monkeypatch.delenv("MONARK_ASSISTANT_NAME")
    assert load_config(str(tmp_path))["MONARK_ASSISTANT_NAME"] == "Chrysa"


@pytest.mark.parametrize(
    ("deployment", "branding", "expected"),
    [
        ("Ada", None, "Ada"),  # the deployment's name
        ("Ada", "Nova", "Nova"),  # an org with branding on names its own
        ("  ", None, "Chrysa"),  # blank: the default
    ],
)
def test_one_resolved_name_feeds_the_prompt_and_the_page(
    app, world, login, scripted, monkeypatch, deployment, branding, expected
):
    configure(monkeypatch, app, MONARK_ASSISTANT_NAME=deployment)
    if branding:
        org = db.session.get(Org, world.a.org.id)
        org.branding_enabled, org.assistant_name = True, branding
        db.session.commit()
    page = soup_of(login("member@acme.test").get("/models/tasks/records"))
    assert page.select_one("#assistant-toggle").get_text(strip=True) == expected
    assert page.select_one(".assistant-name").get_text(strip=True) == expected
    scripted.script.add([Say("Hello.")])
    send(world.a.principal("member"), "Who are you?")
    system = scripted.requests[-1].system
    assert system.startswith(f"You are {expected},")
    others = {"Ada", "Nova", "Chrysa"} - {expected}
    assert not any(name in system for name in others)
