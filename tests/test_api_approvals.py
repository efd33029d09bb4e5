"""Writes of an API key marked "writes need approval": 202, held, decided in the Approvals
inbox, their outcome read from the status URL (and by an MCP agent through approvals_get)."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import timedelta

import httpx2
import pytest
from bs4 import BeautifulSoup
from mcp import ClientSession
from sqlalchemy import func, select

from monark.assistant import conversation_list
from monark.chat.models import Conversation, ConversationKind, Message, ToolCall
from monark.core.keys import create_key
from monark.core.models import ApiKey, Event, utcnow
from monark.extensions import db
from monark.records.models import Record
from tests.factories import add_member, make_key, make_record, make_user
from tests.test_mcp_server import mcp_run, text_of  # noqa: F401  (the fixture, and a helper)
from tests.tuning import configure


def held_key(world, role: str = "member", name: str = "Claude Desktop") -> str:
    return make_key(world.a.principal("owner"), role, name, writes_need_approval=True)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def create(client, token: str, title: str, **values):
    return client.post(
        "/api/v1/models/tasks/records",
        json={"values": {"title": title, **values}},
        headers=bearer(token),
    )


def titled(title: str) -> int:
    return db.session.scalar(select(func.count()).where(Record.title == title))


def held_calls() -> int:
    return db.session.scalar(select(func.count()).select_from(ToolCall))


def decide(browser, approval_id: int, decision: str, reason: str = ""):
    return browser.post(
        f"/approvals/{approval_id}/decide", {"decision": decision, "reason": reason}
    )


def test_a_held_keys_write_answers_202_and_changes_nothing(app, world):
    token = held_key(world)
    response = create(app.test_client(), token, "Held task")
    assert response.status_code == 202, response.get_data(as_text=True)
    body = response.get_json()
    assert body["status"] == "pending" and body["tool"] == "records_create"
    assert body["status_url"].endswith(f"/api/v1/approvals/{body['id']}")
    assert response.headers["Location"] == body["status_url"]
    assert "approval" in body["message"] and "nothing has changed" in body["message"]
    assert titled("Held task") == 0
    call = db.session.get(ToolCall, body["id"])
    assert call.status == "PROPOSED" and call.mutates and call.name == "records_create"
    assert call.input == {"model": "tasks", "values": {"title": "Held task"}}
    assert call.preview["headline"].startswith("create")
    conversation = db.session.get(Conversation, call.conversation_id)
    assert conversation.kind == ConversationKind.API and conversation.title == "Claude Desktop"
    # The key's creator never sees it among their assistant conversations.
    assert conversation not in conversation_list.list_conversations(world.a.principal("owner"))
    # A second write goes to the same conversation.
    again = create(app.test_client(), token, "Held again").get_json()
    assert db.session.get(ToolCall, again["id"]).conversation_id == conversation.id


def test_approved_in_the_inbox_the_write_runs_as_the_key_and_the_status_has_its_result(
    app, world, login
):
    token = held_key(world)
    approval = create(app.test_client(), token, "Approve me").get_json()
    admin = login("admin@acme.test")
    page = BeautifulSoup(admin.get("/approvals").get_data(as_text=True), "html.parser")
    entry = page.select_one(f"#approval-{approval['id']}")
    assert entry is not None
    assert entry.select_one(".approval-key").get_text() == "Claude Desktop"
    assert "Approve me" in entry.get_text()
    assert page.select_one(".approvals-badge").get_text() == "1"

    response = decide(admin, approval["id"], "confirm")
    assert response.status_code == 303
    assert titled("Approve me") == 1
    record_id = db.session.scalar(select(Record.id).where(Record.title == "Approve me"))
    created = db.session.scalar(
        select(Event).where(Event.type == "record.created", Event.subject_id == record_id)
    )
    assert created.actor_kind == "api_key" and created.actor_id == world_key_id(token)
    assert created.payload["approved_by_id"] == world.a.users["admin"].id

    status = app.test_client().get(approval["status_url"], headers=bearer(token))
    assert status.status_code == 200
    out = status.get_json()
    assert out["status"] == "succeeded" and out["decided_by"] == "Acme Admin"
    assert out["result"]["title"] == "Approve me"
    # The rest of the org reads how it ended, not the answer.
    seen = login("viewer@acme.test").get(approval["status_url"]).get_json()
    assert seen["status"] == "succeeded" and seen["result"] is None
    # Decided: it leaves the inbox, and a second decision is refused.
    page = BeautifulSoup(admin.get("/approvals").get_data(as_text=True), "html.parser")
    assert page.select_one(f"#approval-{approval['id']}") is None
    assert page.select_one(".approvals-badge") is None
    decide(admin, approval["id"], "confirm")
    assert titled("Approve me") == 1


def test_the_audit_log_names_a_held_writes_decision_by_its_key(app, world, login):
    token = held_key(world)
    approval = create(app.test_client(), token, "Audited").get_json()
    admin = login("admin@acme.test")
    decide(admin, approval["id"], "confirm")
    soup = BeautifulSoup(admin.get("/audit").get_data(as_text=True), "html.parser")
    actors = [row.select("td")[2].get_text() for row in soup.select("tbody tr")]
    assert "Acme Admin, on API key “Claude Desktop”'s held write" in actors
    # Not a conversation of the assistant's that nobody can open.
    conversation_id = db.session.get(ToolCall, approval["id"]).conversation_id
    assert not any(f"conversation #{conversation_id}" in a for a in actors)
    assert "API key “Claude Desktop”" in actors  # the key's own write, as it ran


def world_key_id(token: str) -> int:
    return db.session.scalar(select(ApiKey.id).where(ApiKey.prefix == token[:10]))


def test_rejected_the_status_says_so_with_the_reason(app, world, login):
    token = held_key(world)
    approval = create(app.test_client(), token, "Reject me").get_json()
    decide(login("member@acme.test"), approval["id"], "reject", "Not this week")
    assert titled("Reject me") == 0
    out = app.test_client().get(approval["status_url"], headers=bearer(token)).get_json()
    assert out["status"] == "rejected" and out["reason"] == "Not this week"
    assert out["result"] is None


def test_keys_without_the_flag_write_at_once(app, world):
    response = create(app.test_client(), world.a.keys["member"], "Straight in")
    assert response.status_code == 201
    assert titled("Straight in") == 1 and held_calls() == 0


def test_reads_of_a_held_key_are_unchanged(app, world):
    response = app.test_client().get(
        "/api/v1/models/tasks/records", headers=bearer(held_key(world))
    )
    assert response.status_code == 200 and held_calls() == 0


def test_bad_requests_are_refused_at_once_and_never_held(app, world):
    token = held_key(world)
    client = app.test_client()
    no_values = client.post("/api/v1/models/tasks/records", json={}, headers=bearer(token))
    assert no_values.status_code == 400
    assert no_values.get_json()["error"]["details"][0]["field"] == "values"
    bad_option = create(client, token, "Bad", status="someday")
    assert bad_option.status_code == 400
    assert any(d["field"] == "values.status" for d in bad_option.get_json()["error"]["details"])
    unknown_model = client.post(
        "/api/v1/models/nope/records", json={"values": {"title": "x"}}, headers=bearer(token)
    )
    assert unknown_model.status_code == 404
    other_org = client.patch(
        f"/api/v1/models/tasks/records/{world.b.public.id}",
        json={"values": {"status": "done"}},
        headers=bearer(token),
    )
    assert other_org.status_code == 404
    viewer = create(client, held_key(world, "viewer"), "Viewer's")
    assert viewer.status_code == 403
    assert held_calls() == 0 and titled("Bad") == 0


def test_only_the_key_or_its_orgs_members_read_an_approval(app, world, login):
    token = held_key(world)
    approval = create(app.test_client(), token, "Mine").get_json()
    client = app.test_client()
    url = f"/api/v1/approvals/{approval['id']}"
    assert client.get(url, headers=bearer(token)).status_code == 200
    assert client.get(url, headers=bearer(world.b.keys["owner"])).status_code == 404
    assert client.get(url, headers=bearer(world.a.keys["owner"])).status_code == 404
    assert login("member@acme.test").get(url).status_code == 200
    assert login("viewer@acme.test").get(url).status_code == 200
    # Another org's member neither lists nor decides it.
    globex = login("owner@globex.test")
    assert f"approval-{approval['id']}" not in globex.get("/approvals").get_data(as_text=True)
    assert decide(globex, approval["id"], "confirm").status_code == 404
    assert titled("Mine") == 0


def test_a_member_without_the_permission_neither_sees_nor_decides_it(app, world, login):
    approval = create(app.test_client(), held_key(world), "Not for viewers").get_json()
    viewer = login("viewer@acme.test")
    assert f"approval-{approval['id']}" not in viewer.get("/approvals").get_data(as_text=True)
    assert decide(viewer, approval["id"], "confirm").status_code == 403
    assert titled("Not for viewers") == 0


def test_new_keys_need_approval_by_default_and_the_form_says_what_it_means(world, login):
    key, _ = create_key(world.a.principal("owner"), "Default", "member")
    assert key.writes_need_approval is True
    owner = login("owner@acme.test")
    page = BeautifulSoup(owner.get("/settings/api-keys").get_data(as_text=True), "html.parser")
    box = page.select_one("#writes_need_approval")
    assert box.has_attr("checked")
    assert "waits in the Approvals inbox" in page.select_one("#writes-need-approval-hint").text
    owner.post(
        "/settings/api-keys", {"name": "Agent", "role": "member", "writes_need_approval": "on"}
    )
    owner.post("/settings/api-keys", {"name": "Script", "role": "member"})
    flags = dict(db.session.execute(select(ApiKey.name, ApiKey.writes_need_approval)).all())
    assert flags["Agent"] is True and flags["Script"] is False


def test_an_mcp_write_waits_and_the_status_tool_reads_it_once_approved(world, mcp_run, login):  # noqa: F811
    token = held_key(world, name="Claude over MCP")

    async def write(client: ClientSession):
        return await client.call_tool(
            "records_create", {"model": "tasks", "values": {"title": "Via MCP"}}
        )

    waiting = mcp_run(token, write)
    assert not waiting.is_error, text_of(waiting)
    assert text_of(waiting).startswith("Waiting for approval in Monark")
    approval_id = waiting.structured_content["id"]
    assert f"approval_id {approval_id}" in text_of(waiting)
    assert titled("Via MCP") == 0

    async def check(client: ClientSession):
        return await client.call_tool("approvals_get", {"approval_id": approval_id})

    assert mcp_run(token, check).structured_content["status"] == "pending"
    admin = login("admin@acme.test")
    assert "Claude over MCP" in admin.get("/approvals").get_data(as_text=True)
    decide(admin, approval_id, "confirm")
    done = mcp_run(token, check)
    assert not done.is_error, text_of(done)
    assert done.structured_content["status"] == "succeeded"
    assert done.structured_content["result"]["title"] == "Via MCP"
    assert titled("Via MCP") == 1


def test_a_held_update_shows_its_before_and_after_in_the_inbox(app, world, login):
    token = held_key(world)
    response = app.test_client().patch(
        f"/api/v1/models/tasks/records/{world.a.public.id}",
        json={"values": {"status": "done"}},
        headers=bearer(token),
    )
    assert response.status_code == 202
    approval_id = response.get_json()["id"]
    assert db.session.get(Record, world.a.public.id).values["status"] == "todo"
    page = BeautifulSoup(
        login("owner@acme.test").get("/approvals").get_data(as_text=True), "html.parser"
    )
    card = page.select_one(f"#approval-{approval_id} .call-write")
    assert card.select_one(".before").get_text() == "todo"
    assert card.select_one(".after").get_text() == "done"
    assert "Acme public task" in card.select_one(".call-head").get_text()


def test_a_large_held_write_is_stored_bounded_and_runs_on_its_first_confirm(
    app, world, login, monkeypatch
):
    """What a key sends is held within ``CHAT_CARD_MAX`` like any card; and its target's
    check at Confirm compares the card as stored with the card drawn now, both bounded."""
    configure(monkeypatch, app, CHAT_CARD_MAX=2_000)
    record = make_record(world.a.principal("owner"), world.a.model, "Long notes", notes="a" * 5_000)
    response = app.test_client().patch(
        f"/api/v1/models/tasks/records/{record.id}",
        json={"values": {"notes": "b" * 5_000}},
        headers=bearer(held_key(world)),
    )
    assert response.status_code == 202
    call = db.session.get(ToolCall, response.get_json()["id"])
    stored = json.dumps(call.preview)
    assert len(stored) < 2_000 + 200 and "more characters]" in stored
    admin = login("admin@acme.test")
    card = BeautifulSoup(admin.get("/approvals").get_data(as_text=True), "html.parser").select_one(
        f"#approval-{call.id} .call-changes"
    )
    assert len(card.get_text()) < 2_000
    decide(admin, call.id, "confirm")
    db.session.expire_all()
    assert db.session.get(ToolCall, call.id).status == "SUCCEEDED"
    assert db.session.get(Record, record.id).values["notes"] == "b" * 5_000


def test_a_held_delete_runs_only_when_approved(app, world, login):
    token, record_id = held_key(world), world.a.public.id
    url = f"/api/v1/models/tasks/records/{record_id}"
    approval = app.test_client().delete(url, headers=bearer(token)).get_json()
    assert db.session.get(Record, record_id) is not None
    decide(login("admin@acme.test"), approval["id"], "confirm")
    db.session.expire_all()
    assert db.session.scalar(select(func.count()).where(Record.id == record_id)) == 0
    out = app.test_client().get(approval["status_url"], headers=bearer(token)).get_json()
    assert out["status"] == "succeeded"


def test_a_key_revoked_before_approval_runs_nothing(app, world, login):
    from monark.core.keys import revoke_key

    token = held_key(world)
    approval = create(app.test_client(), token, "Orphan").get_json()
    revoke_key(world.a.principal("owner"), world_key_id(token))
    decide(login("admin@acme.test"), approval["id"], "confirm")
    call = db.session.get(ToolCall, approval["id"])
    db.session.refresh(call)
    assert call.status == "FAILED" and "revoked" in call.error
    assert titled("Orphan") == 0


def test_the_inbox_shows_a_held_write_only_as_the_member_may_read_its_record(app, world, login):
    # An admin key may update a member's private record; another member holds
    # records.update but may not see that record, so their inbox must not show it either.
    other = make_user("second@acme.test", "Second Member")
    add_member(other, world.a.org, "member")
    token = make_key(world.a.principal("owner"), "admin", "Admin agent", writes_need_approval=True)
    record_id = world.a.private.id
    response = app.test_client().patch(
        f"/api/v1/models/tasks/records/{record_id}",
        json={"values": {"notes": "Nobody else should read this"}},
        headers=bearer(token),
    )
    assert response.status_code == 202
    approval_id = response.get_json()["id"]
    second = login("second@acme.test")
    assert second.get(f"/models/tasks/records/{record_id}").status_code == 404
    entry = BeautifulSoup(second.get("/approvals").get_data(as_text=True), "html.parser")
    card = entry.select_one(f"#approval-{approval_id}")
    assert card is not None and "Acme private task" not in card.get_text()
    card = second.get(f"/chat/calls/{approval_id}").get_data(as_text=True)
    assert "Acme private task" not in card
    # The admin, who may see private records, reads the card as it was drawn.
    admin = login("admin@acme.test").get("/approvals").get_data(as_text=True)
    assert "Acme private task" in admin


def test_a_confirm_from_a_card_edited_since_it_was_opened_runs_nothing(app, world, login):
    approval = create(app.test_client(), held_key(world), "As asked").get_json()
    admin, owner = login("admin@acme.test"), login("owner@acme.test")
    page = BeautifulSoup(admin.get("/approvals").get_data(as_text=True), "html.parser")
    form = page.select_one(f"#approval-{approval['id']} form.call-actions")
    seen = {i["name"]: i.get("value", "") for i in form.select("input[type=hidden]")}
    assert "shown" in seen
    # Another approver edits it while the admin still has the old card open.
    edited = owner.post(f"/chat/calls/{approval['id']}/edit", {"arg.values.title": "Changed"})
    assert edited.status_code == 200
    response = admin.post(f"/approvals/{approval['id']}/decide", {**seen, "decision": "confirm"})
    assert response.status_code == 303
    assert titled("Changed") == 0 and titled("As asked") == 0
    assert db.session.get(ToolCall, approval["id"]).status == "PROPOSED"
    flashes = admin.get("/approvals").get_data(as_text=True)
    assert "edited since it was drawn here" in flashes
    # Decided from the card as it is now, it runs.
    page = BeautifulSoup(admin.get("/approvals").get_data(as_text=True), "html.parser")
    form = page.select_one(f"#approval-{approval['id']} form.call-actions")
    seen = {i["name"]: i.get("value", "") for i in form.select("input[type=hidden]")}
    admin.post(f"/approvals/{approval['id']}/decide", {**seen, "decision": "confirm"})
    assert titled("Changed") == 1


def test_a_held_update_whose_record_was_deleted_meanwhile_fails_cleanly(app, world, login):
    from monark.records import services as records

    token, record_id = held_key(world), world.a.public.id
    approval = (
        app.test_client()
        .patch(
            f"/api/v1/models/tasks/records/{record_id}",
            json={"values": {"status": "done"}},
            headers=bearer(token),
        )
        .get_json()
    )
    records.delete_record(world.a.principal("owner"), world.a.model, record_id)
    admin = login("admin@acme.test")
    decide(admin, approval["id"], "confirm")  # drawn again: the record is gone
    assert "changed since the card was drawn" in admin.get("/approvals").get_data(as_text=True)
    assert decide(admin, approval["id"], "confirm").status_code == 303
    flashes = BeautifulSoup(admin.get("/approvals").get_data(as_text=True), "html.parser")
    assert flashes.select_one(".flash-error").get_text() == (
        f"Confirmed, but it failed: No record {record_id} in Tasks."
    )
    out = app.test_client().get(approval["status_url"], headers=bearer(token)).get_json()
    assert out["status"] == "failed" and out["error"] == f"No record {record_id} in Tasks."


def held_update_of_a_private_record(app, world) -> tuple[dict, int]:
    """An admin key's held update of a record only its owner (the member) and admins read,
    with a second member in the org who cannot read it: the approval and the record id."""
    other = make_user("second@acme.test", "Second Member")
    add_member(other, world.a.org, "member")
    token = make_key(world.a.principal("owner"), "admin", "Admin agent", writes_need_approval=True)
    record_id = world.a.private.id
    approval = (
        app.test_client()
        .patch(
            f"/api/v1/models/tasks/records/{record_id}",
            json={"values": {"status": "done"}},
            headers=bearer(token),
        )
        .get_json()
    )
    return approval, record_id


def test_a_member_who_could_not_make_the_change_cannot_approve_it(app, world, login):
    approval, record_id = held_update_of_a_private_record(app, world)
    second = login("second@acme.test")
    for _ in range(2):  # not once, and not after the card was drawn again either
        assert decide(second, approval["id"], "confirm").status_code == 303
        flashes = second.get("/approvals").get_data(as_text=True)
        assert "could not make this change yourself" in flashes
    db.session.expire_all()
    assert db.session.get(Record, record_id).values.get("status") != "done"
    assert db.session.get(ToolCall, approval["id"]).status == "PROPOSED"
    # A member who may see the record approves it, and it runs.
    decide(login("member@acme.test"), approval["id"], "confirm")
    db.session.expire_all()
    assert db.session.get(Record, record_id).values["status"] == "done"


def test_a_member_who_could_not_make_the_change_cannot_edit_it_either(app, world, login):
    """The write runs as the key: an edit by a member who cannot read the record (or make
    the edited change) would pass what only the key's role may do to the next approver."""
    approval, _record_id = held_update_of_a_private_record(app, world)
    before = dict(db.session.get(ToolCall, approval["id"]).input)
    second = login("second@acme.test")
    form = second.get(f"/chat/calls/{approval['id']}/edit")
    assert form.status_code == 403, form.get_data(as_text=True)
    assert "could not make this change yourself" in form.get_data(as_text=True)
    saved = second.post(
        f"/chat/calls/{approval['id']}/edit",
        {"arg.values.title": "Tampered", "arg.visibility": "org"},
    )
    assert saved.status_code == 403
    db.session.expire_all()
    call = db.session.get(ToolCall, approval["id"])
    assert call.input == before and call.edited_by_id is None
    assert call.status == "PROPOSED"
    # The record's owner, who may make it, still edits it.
    owner = login("member@acme.test")
    assert owner.get(f"/chat/calls/{approval['id']}/edit").status_code == 200
    edited = owner.post(f"/chat/calls/{approval['id']}/edit", {"arg.values.title": "Renamed"})
    assert edited.status_code == 200, edited.get_data(as_text=True)
    db.session.expire_all()
    assert db.session.get(ToolCall, approval["id"]).input["values"]["title"] == "Renamed"
    # Its card shows what the key sent beside the edit: no assistant proposed it.
    card = owner.get("/approvals").get_data(as_text=True)
    assert "As the API key sent it:" in card and "proposed it" not in card


def test_the_status_shows_a_private_records_answer_only_to_who_may_read_it(app, world, login):
    other = make_user("second@acme.test", "Second Member")
    add_member(other, world.a.org, "member")
    token = make_key(world.a.principal("owner"), "admin", "Admin agent", writes_need_approval=True)
    approval = (
        app.test_client()
        .patch(
            f"/api/v1/models/tasks/records/{world.a.private.id}",
            json={"values": {"notes": "Secret plans"}},
            headers=bearer(token),
        )
        .get_json()
    )
    decide(login("admin@acme.test"), approval["id"], "confirm")
    mine = app.test_client().get(approval["status_url"], headers=bearer(token)).get_json()
    assert mine["status"] == "succeeded" and mine["result"]["values"]["notes"] == "Secret plans"
    assert login("admin@acme.test").get(approval["status_url"]).get_json()["result"] is not None
    # Another member holds records.update but may not see the record: how it ended only.
    seen = login("second@acme.test").get(approval["status_url"]).get_json()
    assert seen["status"] == "succeeded" and seen["result"] is None


def test_each_requests_decision_is_named_after_its_card(app, world, login):
    token = held_key(world)
    ids = [create(app.test_client(), token, title).get_json()["id"] for title in ("One", "Two")]
    page = BeautifulSoup(
        login("admin@acme.test").get("/approvals").get_data(as_text=True), "html.parser"
    )
    for approval_id, title in zip(ids, ("One", "Two"), strict=True):
        form = page.select_one(f"#approval-{approval_id} form.call-actions")
        named = page.find(id=form["aria-labelledby"])  # its buttons say which request
        assert "create a record in Tasks" in named.get_text()
        assert title in page.find(id=form["aria-describedby"]).get_text()


# ---- a decision cut off while its write ran ----------------------------------------------


def left_running(call_id: int, approver_id: int, lease_left: float) -> None:
    """The rows a decision leaves when its process dies mid-write: the call EXECUTING, its
    conversation's lease (``lease_left`` s from now; negative: run out). The write itself was
    in the run's own transaction, which died with it."""
    call = db.session.get(ToolCall, call_id)
    call.status, call.decided_by_id, call.decided_at = "EXECUTING", approver_id, utcnow()
    conversation = db.session.get(Conversation, call.conversation_id)
    conversation.turn_id = uuid.uuid4().hex
    conversation.turn_started_at = utcnow()
    conversation.turn_lease_until = utcnow() + timedelta(seconds=lease_left)
    db.session.commit()


def test_a_held_write_whose_decision_died_is_settled_and_asked_again(app, world, login):
    token = held_key(world)
    approval = create(app.test_client(), token, "Cut off").get_json()
    left_running(approval["id"], world.a.users["admin"].id, lease_left=-1)

    out = app.test_client().get(approval["status_url"], headers=bearer(token)).get_json()
    assert out["status"] == "failed" and "nothing was changed" in out["error"]
    again_id = out["asked_again_as"]
    assert again_id and f"approval {again_id}" in out["error"]
    assert titled("Cut off") == 0
    db.session.expire_all()
    again = db.session.get(ToolCall, again_id)
    assert again.status == "PROPOSED" and again.retry_of_id == approval["id"]
    assert again.input == {"model": "tasks", "values": {"title": "Cut off"}}
    assert again.conversation_id == db.session.get(ToolCall, approval["id"]).conversation_id
    assert db.session.get(Conversation, again.conversation_id).turn_id is None
    # Read again, it is asked again no second time.
    app.test_client().get(approval["status_url"], headers=bearer(token))
    assert held_calls() == 2

    admin = login("admin@acme.test")
    page = BeautifulSoup(admin.get("/approvals").get_data(as_text=True), "html.parser")
    assert page.select_one(f"#approval-{approval['id']}") is None
    note = page.select_one(f"#approval-{again_id} .approval-note").get_text()
    assert "Acme Admin approved this" in note and "nothing was changed" in note
    decide(admin, again_id, "confirm")
    assert titled("Cut off") == 1
    done = app.test_client().get(f"/api/v1/approvals/{again_id}", headers=bearer(token))
    assert done.get_json()["status"] == "succeeded"


def test_the_inbox_settles_a_decision_that_died_too(app, world, login):
    approval = create(app.test_client(), held_key(world), "Seen in the inbox").get_json()
    left_running(approval["id"], world.a.users["admin"].id, lease_left=-1)
    page = BeautifulSoup(
        login("member@acme.test").get("/approvals").get_data(as_text=True), "html.parser"
    )
    [entry] = page.select(".approval")
    assert "asked again" in entry.select_one(".approval-note").get_text().lower()
    assert db.session.get(ToolCall, approval["id"]).status == "FAILED"


def test_the_assistants_approvals_get_asks_a_cut_off_write_again_for_real(app, world, scripted):
    """The in-app assistant reads through the dispatcher, in a read-only unit: settling
    the cut-off write is kept all the same, and the approval it names exists."""
    from monark.chat.turn.start import SendInput, send_message
    from tests.llm_script import Call, Say

    approval = create(app.test_client(), held_key(world), "Asked by the assistant").get_json()
    left_running(approval["id"], world.a.users["admin"].id, lease_left=-1)
    scripted.script.add(
        [Call("approvals_get", {"approval_id": approval["id"]})], [Say("It was cut off.")]
    )
    result = send_message(world.a.principal("member"), SendInput(text="How did it go?"))
    read = db.session.scalars(
        select(ToolCall).where(ToolCall.conversation_id == result.conversation_id)
    ).one()
    assert read.status == "SUCCEEDED" and read.result["status"] == "failed"
    again_id = read.result["asked_again_as"]
    db.session.expire_all()
    again = db.session.get(ToolCall, again_id)
    assert again is not None and again.status == "PROPOSED"
    assert again.retry_of_id == approval["id"]
    assert db.session.get(ToolCall, approval["id"]).status == "FAILED"
    assert held_calls() == 3  # the held write, its request asked again, the assistant's read


def test_a_decision_still_running_is_left_alone(app, world, login):
    token = held_key(world)
    approval = create(app.test_client(), token, "Still running").get_json()
    left_running(approval["id"], world.a.users["admin"].id, lease_left=60)
    out = app.test_client().get(approval["status_url"], headers=bearer(token)).get_json()
    assert out["status"] == "running" and out["asked_again_as"] is None
    login("admin@acme.test").get("/approvals")
    assert held_calls() == 1
    assert db.session.get(ToolCall, approval["id"]).status == "EXECUTING"


def test_a_keys_writes_are_decided_one_at_a_time(app, world, login):
    token = held_key(world)
    running = create(app.test_client(), token, "Running now").get_json()
    waiting = create(app.test_client(), token, "Next one").get_json()
    left_running(running["id"], world.a.users["admin"].id, lease_left=60)
    admin = login("admin@acme.test")
    decide(admin, waiting["id"], "confirm")
    assert "being approved right now" in admin.get("/approvals").get_data(as_text=True)
    assert titled("Next one") == 0
    assert db.session.get(ToolCall, waiting["id"]).status == "PROPOSED"


def test_a_decision_that_breaks_off_mid_write_keeps_nothing_and_is_asked_again(app, world):
    from sqlalchemy.exc import OperationalError

    from monark.api import key_holds as api_approvals
    from tests.test_turn_faults import _FailingWrites

    token = held_key(world)
    approval = create(app.test_client(), token, "Broken off").get_json()
    admin = world.a.principal("admin")
    # Storing the call's result (in the write's own transaction), then storing its failure:
    # both refused, so the decision raises.
    refused = _FailingWrites(("UPDATE chat_tool_calls", "duration_ms"))
    with refused, pytest.raises(OperationalError):
        api_approvals.decide(admin, approval["id"], True, None)
    assert refused.hits == 2
    db.session.rollback()
    call = db.session.get(ToolCall, approval["id"])
    assert call.status == "FAILED"  # settled as it broke off: not left running
    assert db.session.get(Conversation, call.conversation_id).turn_id is None
    out = app.test_client().get(approval["status_url"], headers=bearer(token)).get_json()
    assert out["status"] == "failed" and out["asked_again_as"]
    assert titled("Broken off") == 0


def test_a_cut_off_write_of_a_key_revoked_since_is_not_asked_again(app, world, login):
    from monark.core.keys import revoke_key

    token = held_key(world)
    approval = create(app.test_client(), token, "Orphaned run").get_json()
    left_running(approval["id"], world.a.users["admin"].id, lease_left=-1)
    revoke_key(world.a.principal("owner"), world_key_id(token))
    out = login("member@acme.test").get(approval["status_url"]).get_json()
    assert out["status"] == "failed" and out["asked_again_as"] is None
    assert "not asked again" in out["error"] and held_calls() == 1


# ---- one conversation per key, whatever arrives at once ----------------------------------


def test_first_writes_of_one_key_at_once_share_one_conversation(app, world, live_server):
    keys, per_key = 4, 5
    tokens = [held_key(world, name=f"Agent {k}") for k in range(keys)]
    db.session.remove()  # the server's threads use their own sessions
    start = threading.Barrier(keys * per_key)
    answers: list[int] = []
    lock = threading.Lock()

    def write(token: str, n: int) -> None:
        with httpx2.Client(base_url=live_server, timeout=60) as http:
            start.wait()
            response = http.post(
                "/api/v1/models/tasks/records",
                json={"values": {"title": f"At once {n}"}},
                headers=bearer(token),
            )
        with lock:
            answers.append(response.status_code)

    threads = [
        threading.Thread(target=write, args=(token, n)) for token in tokens for n in range(per_key)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert answers == [202] * (keys * per_key)
    for token in tokens:
        [conversation_id] = db.session.scalars(
            select(Conversation.id).where(Conversation.api_key_id == world_key_id(token))
        ).all()
        calls = db.session.scalar(
            select(func.count()).where(ToolCall.conversation_id == conversation_id)
        )
        seqs = db.session.scalars(
            select(Message.seq).where(Message.conversation_id == conversation_id)
        ).all()
        assert calls == per_key and sorted(seqs) == list(range(1, per_key + 1))
