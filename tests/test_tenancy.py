"""Tenancy: one org's rows never reach another org, by id, in lists, or through API keys;
private records reach only their creator and the roles with records.view_private.

Acme and Globex both have a ``tasks`` model, so a Globex user asking for an Acme record
id under ``tasks`` finds a model of its own and must still get 404. ``projects`` exists in
Acme only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select

from monark.chat import store
from monark.core.keys import revoke_key
from monark.core.models import ApiKey, Event, Org
from monark.core.rbac import ROLES
from monark.extensions import db
from monark.records import services
from monark.records.models import Record, RecordModel
from tests import factories

RECORD_LINK = re.compile(r"^/models/(\w+)/records/(\d+)$")


@dataclass(frozen=True)
class Ids:
    """Plain ids and titles (requests under test may delete the ORM objects)."""

    acme: int
    globex: int
    acme_public: int
    acme_member_private: int
    acme_admin_private: int
    globex_public: int
    globex_private: int
    acme_titles: frozenset[str]
    globex_member: int  # a Globex user id (not a member of Acme)


@pytest.fixture
def ids(world: factories.World) -> Ids:
    a, b = world.a, world.b
    owner = a.principal("owner")
    projects = services.create_model(owner, "projects", "Projects")
    services.add_field(owner, projects, key="name", label="Name", type="text", required=True)
    services.create_record(owner, projects, {"name": "Acme rocket"})
    secret = factories.make_record(a.principal("admin"), a.model, "Acme admin secret", "private")
    # Event types only Acme has: Globex's audit filter must not offer them.
    gone = factories.make_record(owner, a.model, "Acme doomed task")
    services.delete_record(owner, a.model, gone.id)
    factories.make_key(owner, "viewer", "retired key")
    revoke_key(owner, db.session.scalar(select(ApiKey.id).where(ApiKey.name == "retired key")))
    return Ids(
        acme=a.org.id,
        globex=b.org.id,
        acme_public=a.public.id,
        acme_member_private=a.private.id,
        acme_admin_private=secret.id,
        globex_public=b.public.id,
        globex_private=b.private.id,
        acme_titles=frozenset(
            {"Acme public task", "Acme private task", "Acme admin secret", "Acme rocket"}
        ),
        globex_member=b.users["member"].id,
    )


def _soup(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def _listed(response) -> set[int]:
    """Ids of the records linked from a records list page's table."""
    assert response.status_code == 200
    table = _soup(response).select_one("#records-table")
    assert table is not None
    ids = set()
    for link in table.select("tbody a[href]"):
        match = RECORD_LINK.match(link["href"])
        if match:
            ids.add(int(match.group(2)))
    return ids


def _count_shown(response) -> int:
    text = _soup(response).select_one("#records-table p.muted").get_text(" ", strip=True)
    return int(text.split()[0])


def _bearer(app, token: str):
    client = app.test_client()

    def call(method: str, url: str, **kw):
        return client.open(url, method=method, headers={"Authorization": f"Bearer {token}"}, **kw)

    return call


def _record(record_id: int) -> Record | None:
    db.session.expire_all()
    return db.session.get(Record, record_id)


# ---- ids of another org ---------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_acme_record_ids_are_404_to_globex_on_the_web(role, ids: Ids, login):
    """Every record page, read or write, answers 404 (or 403 for lack of permission)."""
    globex = login(f"{role}@globex.test")
    can_write = role in ("owner", "admin", "member")
    for record_id in (ids.acme_public, ids.acme_member_private, ids.acme_admin_private):
        base = f"/models/tasks/records/{record_id}"
        assert globex.get(base).status_code == 404
        for path in ("/edit", "/delete"):
            assert globex.get(base + path).status_code == (404 if can_write else 403)
        edited = globex.post(base + "/edit", {"v_title": "Globex was here", "visibility": "org"})
        assert edited.status_code == (404 if can_write else 403)
        assert globex.post(base + "/delete").status_code == (404 if can_write else 403)
        assert _record(record_id) is not None
    assert _record(ids.acme_public).values == {"title": "Acme public task", "status": "todo"}
    assert _record(ids.acme_public).org_id == ids.acme


@pytest.mark.parametrize("auth", ["session", "key"])
def test_acme_record_ids_are_404_to_globex_in_the_api(auth, ids: Ids, world, app, login):
    call = (
        login("owner@globex.test").api if auth == "session" else _bearer(app, world.b.keys["owner"])
    )
    for record_id in (ids.acme_public, ids.acme_member_private, ids.acme_admin_private):
        url = f"/api/v1/models/tasks/records/{record_id}"
        assert call("GET", url).status_code == 404
        patch = call("PATCH", url, json={"values": {"title": "Globex was here"}})
        assert patch.status_code == 404
        assert patch.get_json()["error"]["code"] == "not_found"
        assert call("DELETE", url).status_code == 404
        assert _record(record_id) is not None
    assert _record(ids.acme_public).values["title"] == "Acme public task"


@pytest.mark.parametrize("auth", ["web", "session", "key"])
def test_a_model_only_acme_has_is_404_to_globex(auth, ids: Ids, world, app, login):
    if auth == "key":
        call = _bearer(app, world.b.keys["owner"])
    else:
        globex = login("owner@globex.test")
        call = globex.api
    if auth == "web":
        for path in ("records", "records/new", "settings"):
            assert globex.get(f"/models/projects/{path}").status_code == 404
        assert globex.post("/models/projects/records/new", {"v_name": "x"}).status_code == 404
        added = globex.post("/models/projects/fields", {"key": "k", "label": "K", "type": "text"})
        assert added.status_code == 404
        deleted = globex.post("/models/projects/delete", {"confirm_key": "projects"})
        assert deleted.status_code == 404
        assert "projects" not in globex.get("/models").get_data(as_text=True)
    else:
        for path in ("", "/records"):
            assert call("GET", f"/api/v1/models/projects{path}").status_code == 404
        created = call("POST", "/api/v1/models/projects/records", json={"values": {"name": "x"}})
        assert created.status_code == 404
    model = db.session.scalar(select(RecordModel).where(RecordModel.key == "projects"))
    assert model is not None and model.org_id == ids.acme
    assert [f.key for f in model.fields] == ["name"]
    assert db.session.scalar(select(Record.title).where(Record.model_id == model.id)) == (
        "Acme rocket"
    )


def test_acme_field_member_and_key_ids_are_404_to_globex(ids: Ids, world, login):
    acme_field = next(f.id for f in world.a.model.fields if f.key == "notes")
    acme_key = db.session.scalar(
        select(ApiKey.id).where(ApiKey.name == "member key", ApiKey.org_id == ids.acme)
    )
    acme_membership = world.a.users["viewer"].memberships[0].id
    globex = login("owner@globex.test")
    field_url = f"/models/tasks/fields/{acme_field}"
    assert globex.post(field_url, {"label": "Mine now"}).status_code == 404
    assert globex.post(field_url + "/delete").status_code == 404
    role_url = f"/settings/members/{acme_membership}/role"
    assert globex.post(role_url, {"role": "owner"}).status_code == 404
    assert globex.post(f"/settings/api-keys/{acme_key}/revoke").status_code == 404
    db.session.expire_all()
    assert world.a.model.fields[-1].label == "Notes"
    assert world.a.users["viewer"].memberships[0].role == "viewer"
    assert db.session.get(ApiKey, acme_key).revoked_at is None


# ---- lists never show another org's rows ----------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_globex_lists_show_only_globex_records(role, ids: Ids, login):
    globex = login(f"{role}@globex.test")
    sees_private = role in ("owner", "admin", "member")  # Globex's private one is the member's
    expected = {ids.globex_public} | ({ids.globex_private} if sees_private else set())

    page = globex.get("/models/tasks/records")
    assert _listed(page) == expected
    assert _count_shown(page) == len(expected)
    assert not any(t in page.get_data(as_text=True) for t in ids.acme_titles)
    # Search and filter run inside the org too.
    assert _listed(globex.get("/models/tasks/records?q=acme")) == set()
    assert _listed(globex.get("/models/tasks/records?field=status&value=todo")) == {
        ids.globex_public
    }

    listed = globex.api("GET", "/api/v1/models/tasks/records?limit=100").get_json()
    assert {r["id"] for r in listed["items"]} == expected
    assert globex.api("GET", "/api/v1/models/tasks/records?q=acme").get_json()["items"] == []

    models = globex.api("GET", "/api/v1/models").get_json()["items"]
    assert [m["key"] for m in models] == ["tasks"]
    cards = _soup(globex.get("/models")).select("ul.cards li h2")
    assert [c.get_text(strip=True) for c in cards] == ["Tasks"]


def test_the_audit_log_shows_only_the_orgs_own_events(ids: Ids, world, login):
    admin = login("admin@globex.test")
    page = admin.get("/audit")
    assert page.status_code == 200
    soup = _soup(page)
    shown = [
        tuple(td.get_text(" ", strip=True) for td in tr.select("td")[1:4:2])
        for tr in soup.select("#audit-table tbody tr")
    ]
    own = db.session.scalars(
        select(Event).where(Event.org_id == ids.globex).order_by(Event.id.desc())
    ).all()
    assert 0 < len(own) < 50  # one page
    keys = dict(
        db.session.execute(select(ApiKey.id, ApiKey.name).where(ApiKey.org_id == ids.globex)).all()
    )

    def subject(e: Event) -> str:  # a key is named by its (own org's) name
        if e.subject_type == "api_key" and e.subject_id in keys:
            return f"API key “{keys[e.subject_id]}”"
        return f"{e.subject_type} #{e.subject_id}"

    assert shown == [(e.type, subject(e)) for e in own]
    assert any(e.subject_type == "api_key" for e in own)

    types = {o["value"] for o in soup.select("#type option") if o["value"]}
    assert types == {e.type for e in own}
    assert not types & {"record.deleted", "apikey.revoked"}  # Acme-only event types
    actors = {o.get_text(strip=True) for o in soup.select("#actor option")}
    assert not [a for a in actors if "Acme" in a]
    assert {"Globex Owner", "Globex Viewer", "API key owner key"} <= actors

    acme_owner = world.a.users["owner"].id
    filtered = admin.get(f"/audit?actor=user:{acme_owner}")
    assert _soup(filtered).select("#audit-table tbody tr") == []


def test_settings_lists_show_only_the_orgs_members_and_keys(ids: Ids, world, login):
    globex = login("owner@globex.test")
    emails = [
        tr.select("td")[1].get_text(strip=True)
        for tr in _soup(globex.get("/settings")).select("table tbody tr")
    ]
    assert sorted(emails) == sorted(f"{role}@globex.test" for role in ROLES)
    keys = _soup(globex.get("/settings/api-keys")).select("table tbody tr")
    prefixes = {tr.select("td")[1].get_text(strip=True).rstrip("…") for tr in keys}
    assert prefixes == {token[:10] for token in world.b.keys.values()}


@pytest.mark.parametrize(
    ("email", "listed"),
    [("member@acme.test", True), ("owner@acme.test", False), ("member@globex.test", False)],
)
def test_assistant_conversations_are_listed_for_their_creator_only(email, listed, world, login):
    store.create_conversation(world.a.principal("member"), "Acme launch plans")
    db.session.commit()
    page = login(email).get("/chat/conversations")
    assert page.status_code == 200
    titles = [t.get_text(strip=True) for t in _soup(page).select(".chat-title")]
    assert titles == (["Acme launch plans"] if listed else [])


# ---- private records ------------------------------------------------------------------


@pytest.fixture
def second_member(world: factories.World) -> str:
    """Another Acme member, who created neither private record."""
    user = factories.make_user("member2@acme.test", "Acme Member Two")
    factories.add_member(user, world.a.org, "member")
    return user.email


VISIBLE = {  # which of Acme's tasks each signed-in user sees
    "owner@acme.test": {"public", "member_private", "admin_private"},
    "admin@acme.test": {"public", "member_private", "admin_private"},
    "member@acme.test": {"public", "member_private"},  # its creator
    "member2@acme.test": {"public"},
    "viewer@acme.test": {"public"},
}


@pytest.mark.parametrize("email", VISIBLE)
def test_private_records_reach_their_creator_and_admins_only(email, ids: Ids, second_member, login):
    by_name = {
        "public": ids.acme_public,
        "member_private": ids.acme_member_private,
        "admin_private": ids.acme_admin_private,
    }
    visible = {by_name[name] for name in VISIBLE[email]}
    user = login(email)

    page = user.get("/models/tasks/records")
    assert _listed(page) == visible
    assert _count_shown(page) == len(visible)
    private_search = user.get("/models/tasks/records?q=private")
    assert _listed(private_search) == visible & {ids.acme_member_private}
    assert _count_shown(private_search) == len(visible & {ids.acme_member_private})

    listed = user.api("GET", "/api/v1/models/tasks/records").get_json()["items"]
    assert {r["id"] for r in listed} == visible

    for record_id in by_name.values():
        expected = 200 if record_id in visible else 404
        assert user.get(f"/models/tasks/records/{record_id}").status_code == expected
        api = user.api("GET", f"/api/v1/models/tasks/records/{record_id}")
        assert api.status_code == expected
    titles = {"member_private": "Acme private task", "admin_private": "Acme admin secret"}
    for name, title in titles.items():
        assert (title in page.get_data(as_text=True)) == (name in VISIBLE[email])


@pytest.mark.parametrize(
    ("role", "sees"), [("owner", True), ("admin", True), ("member", False), ("viewer", False)]
)
def test_api_keys_see_private_records_only_by_role(role, sees, ids: Ids, world, app):
    """A key has no user, so it is nobody's creator: only view_private reveals private rows."""
    call = _bearer(app, world.a.keys[role])
    listed = {r["id"] for r in call("GET", "/api/v1/models/tasks/records").get_json()["items"]}
    private = {ids.acme_member_private, ids.acme_admin_private}
    assert listed == {ids.acme_public} | (private if sees else set())
    for record_id in private:
        expected = 200 if sees else 404
        assert call("GET", f"/api/v1/models/tasks/records/{record_id}").status_code == expected


def test_a_members_private_record_is_hidden_from_another_members_writes(
    ids: Ids, second_member, login
):
    other = login(second_member)
    url = f"/api/v1/models/tasks/records/{ids.acme_member_private}"
    assert other.api("PATCH", url, json={"values": {"status": "done"}}).status_code == 404
    assert other.api("DELETE", url).status_code == 404
    page = f"/models/tasks/records/{ids.acme_member_private}"
    assert other.post(page + "/edit", {"v_title": "Taken", "visibility": "org"}).status_code == 404
    assert other.post(page + "/delete").status_code == 404
    record = _record(ids.acme_member_private)
    assert record.visibility == "private"
    assert record.values == {"title": "Acme private task"}


# ---- API keys act in their own org ----------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_an_api_key_acts_in_its_own_org_only(role, ids: Ids, world, app):
    call = _bearer(app, world.a.keys[role])
    me = call("GET", "/api/v1/me").get_json()
    assert (me["org"]["id"], me["role"], me["user"]) == (ids.acme, role, None)
    models = {m["key"] for m in call("GET", "/api/v1/models").get_json()["items"]}
    assert models == {"tasks", "projects"}
    globex_url = f"/api/v1/models/tasks/records/{ids.globex_public}"
    assert call("GET", globex_url).status_code == 404
    write = 404 if role != "viewer" else 403
    assert call("PATCH", globex_url, json={"values": {"status": "done"}}).status_code == write
    assert call("DELETE", globex_url).status_code == write
    assert _record(ids.globex_public).values == {"title": "Globex public task", "status": "todo"}


def test_a_key_creates_in_its_own_org_even_where_both_have_the_model(ids: Ids, world, app):
    before = db.session.scalar(select(Event.id).order_by(Event.id.desc()).limit(1))
    created = _bearer(app, world.a.keys["member"])(
        "POST", "/api/v1/models/tasks/records", json={"values": {"title": "Made by a key"}}
    )
    assert created.status_code == 201
    record = _record(created.get_json()["id"])
    assert (record.org_id, record.model_id) == (ids.acme, world.a.model.id)
    event = db.session.scalar(select(Event).where(Event.id > before))
    assert (event.org_id, event.type, event.actor_kind) == (ids.acme, "record.created", "api_key")
    globex = _bearer(app, world.b.keys["owner"])
    assert globex("GET", f"/api/v1/models/tasks/records/{record.id}").status_code == 404


def test_a_key_beats_the_session_cookie_of_another_org(ids: Ids, world, login):
    """A Globex browser sending an Acme key acts as the key: in Acme, nowhere else."""
    globex = login("owner@globex.test")
    key = {"Authorization": f"Bearer {world.a.keys['viewer']}"}
    me = globex.api("GET", "/api/v1/me", headers=key).get_json()
    assert (me["org"]["id"], me["role"]) == (ids.acme, "viewer")
    url = f"/api/v1/models/tasks/records/{ids.globex_public}"
    assert globex.api("GET", url, headers=key).status_code == 404


def test_a_user_field_rejects_a_member_of_another_org(ids: Ids, world, login):
    acme = login("member@acme.test")
    url = f"/api/v1/models/tasks/records/{ids.acme_public}"
    patch = acme.api("PATCH", url, json={"values": {"assignee": ids.globex_member}})
    assert patch.status_code == 400
    assert patch.get_json()["error"]["details"][0]["field"] == "values.assignee"
    form = {"v_title": "Acme public task", "v_assignee": str(ids.globex_member)}
    assert acme.post(f"/models/tasks/records/{ids.acme_public}/edit", form).status_code == 422
    assert "assignee" not in _record(ids.acme_public).values


# ---- a user in two orgs ---------------------------------------------------------------


@pytest.fixture
def consultant(world: factories.World) -> str:
    """A viewer of Acme (first membership) and the owner of Globex."""
    user = factories.make_user("consultant@example.test", "Consultant")
    factories.add_member(user, world.a.org, "viewer")
    factories.add_member(user, world.b.org, "owner")
    factories.make_org("Initech")  # an org the consultant does not belong to
    return user.email


def test_a_user_in_two_orgs_sees_one_org_at_a_time(ids: Ids, consultant, login):
    user = login(consultant)
    me = user.api("GET", "/api/v1/me").get_json()
    assert (me["org"]["id"], me["role"]) == (ids.acme, "viewer")
    assert _listed(user.get("/models/tasks/records")) == {ids.acme_public}
    assert user.get("/models/new").status_code == 403
    assert user.get(f"/models/tasks/records/{ids.globex_public}").status_code == 404

    switched = user.post("/orgs/switch", {"org_id": str(ids.globex)})
    assert switched.status_code == 302
    me = user.api("GET", "/api/v1/me").get_json()
    assert (me["org"]["id"], me["role"]) == (ids.globex, "owner")
    assert _listed(user.get("/models/tasks/records")) == {ids.globex_public, ids.globex_private}
    assert user.get(f"/models/tasks/records/{ids.acme_public}").status_code == 404
    assert user.get("/models/projects/records").status_code == 404
    assert user.get("/models/new").status_code == 200

    initech = db.session.scalar(select(Org.id).where(Org.name == "Initech"))
    refused = user.post("/orgs/switch", {"org_id": str(initech)})
    assert refused.status_code == 302
    assert user.api("GET", "/api/v1/me").get_json()["org"]["id"] == ids.globex


def test_switching_into_an_org_without_membership_changes_nothing(ids: Ids, login):
    globex = login("owner@globex.test")
    assert globex.post("/orgs/switch", {"org_id": str(ids.acme)}).status_code == 302
    assert globex.api("GET", "/api/v1/me").get_json()["org"]["id"] == ids.globex
    assert globex.get(f"/models/tasks/records/{ids.acme_public}").status_code == 404
