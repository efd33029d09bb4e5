"""Four eyes without holes: a key's write of a four-eyes tool is held whatever the key says
and never approved by the key's creator; whoever last set a call's arguments never confirms
it; a call is handed over once; the hand-over list offers only who may read the target; a
revoked key's held writes are rejected with the reason."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select, update

from monark.approvals import service as approval_service
from monark.chat.models import ToolCall
from monark.core.models import ApiKey, Org
from monark.extensions import db
from monark.records.models import Record
from tests.factories import add_member, make_key, make_user
from tests.llm_script import Call, Say
from tests.test_api_approvals import bearer, create, titled
from tests.test_chat_loop import calls_of, send
from tests.test_handover import card_of, decide, hand, inbox_ids, propose


def four_eyes(world, *tools: str) -> None:
    org = db.session.get(Org, world.a.org.id)
    org.chat_four_eyes = list(tools)
    db.session.commit()


def proposed_update(world, scripted, record_id: int, status: str = "done") -> ToolCall:
    """The member's proposed update of a task's status."""
    arguments = {"model": "tasks", "record_id": record_id, "values": {"status": status}}
    scripted.script.add([Call("records_update", arguments)])
    proposed = send(world.a.principal("member"), "Change it")
    (call,) = calls_of(proposed.conversation_id)
    assert call.status == "PROPOSED"
    return call


def status_of(record_id: int) -> str:
    db.session.expire_all()
    return db.session.get(Record, record_id).values["status"]


def test_a_keys_write_of_a_four_eyes_tool_is_held_though_the_key_writes_at_once(app, world):
    four_eyes(world, "records_create")
    token = make_key(world.a.principal("owner"), "member", "Script")  # not marked
    response = create(app.test_client(), token, "Guarded task")
    assert response.status_code == 202, response.get_data(as_text=True)
    assert titled("Guarded task") == 0
    # Other tools of the same key still write at once.
    four_eyes(world, "records_update")
    assert create(app.test_client(), token, "Plain task").status_code == 201


def test_the_keys_creator_never_approves_its_four_eyes_write(app, world, login):
    four_eyes(world, "records_create")
    token = make_key(world.a.principal("admin"), "member", "Admin's script")
    approval = create(app.test_client(), token, "Checked task").get_json()
    admin = login("admin@acme.test")
    decide(admin, approval["id"], "confirm")
    call = db.session.get(ToolCall, approval["id"])
    db.session.refresh(call)
    assert call.status == "PROPOSED" and titled("Checked task") == 0
    decide(login("owner@acme.test"), approval["id"], "confirm")
    db.session.refresh(call)
    assert call.status == "SUCCEEDED" and titled("Checked task") == 1


def test_the_inbox_offers_confirm_only_to_who_may_confirm(app, world, login):
    four_eyes(world, "records_create")
    token = make_key(world.a.principal("admin"), "member", "Admin's script")
    approval = create(app.test_client(), token, "Offered task").get_json()

    def entry(email: str):
        page = BeautifulSoup(login(email).get("/approvals").get_data(as_text=True), "html.parser")
        return page.select_one(f"#approval-{approval['id']}")

    mine = entry("admin@acme.test")  # the key's creator
    assert mine.select_one('button[value="confirm"]') is None
    assert mine.select_one('button[value="reject"]') is not None
    assert "another member with the permission confirms this" in mine.get_text()
    theirs = entry("owner@acme.test")
    assert theirs.select_one('button[value="confirm"]') is not None
    assert "another member" not in theirs.get_text()


def test_an_approver_who_edits_a_four_eyes_call_hands_it_back_to_the_requester(
    world, scripted, login
):
    four_eyes(world, "records_update")
    record_id, owner_id = world.a.public.id, world.a.users["owner"].id
    call = proposed_update(world, scripted, record_id)
    member = login("member@acme.test")
    hand(member, call.id, owner_id)
    owner = login("owner@acme.test")
    saved = owner.post(f"/chat/calls/{call.id}/edit", {"arg.values.status": "doing"})
    assert saved.status_code in (200, 303)
    db.session.refresh(call)
    assert call.edited_by_id == owner_id and call.approver_id is None
    # The approver set these arguments: they can no longer confirm them.
    assert f"approval-{call.id}" not in inbox_ids(owner)
    assert decide(owner, call.id, "confirm").status_code == 404
    assert status_of(record_id) == "todo"
    # The requester sees the edited card with Confirm, and confirms what the approver set.
    page = member.get(f"/chat/conversations/{call.conversation_id}").get_data(as_text=True)
    card = card_of(page, call.id)
    assert card.find("button", string="Confirm") is not None
    assert "Edited by Acme Owner" in card.get_text()
    approval_service.confirm_tool_call(world.a.principal("member"), call.id)
    assert status_of(record_id) == "doing"


def test_handing_an_already_handed_call_to_someone_else_answers_409(world, scripted, login):
    call = proposed_update(world, scripted, world.a.public.id)
    member = login("member@acme.test")
    owner_id, admin_id = world.a.users["owner"].id, world.a.users["admin"].id
    assert hand(member, call.id, owner_id).status_code == 200
    again = hand(member, call.id, admin_id)  # a crafted POST: the card offers no list now
    assert again.status_code == 409
    db.session.refresh(call)
    assert call.approver_id == owner_id
    assert f"approval-{call.id}" in inbox_ids(login("owner@acme.test"))


def test_a_hand_over_that_loses_a_race_says_to_whom_it_went(world, scripted, monkeypatch):
    from monark.approvals import handover
    from monark.chat.runtime import tool_executor
    from monark.core.errors import Conflict

    call = proposed_update(world, scripted, world.a.public.id)
    owner_id, admin_id = world.a.users["owner"].id, world.a.users["admin"].id
    now = handover.utcnow

    def then_another_tab_wins():
        # After this request's checks, before its update: another request hands it over.
        with db.engine.begin() as other:
            other.execute(
                update(ToolCall).where(ToolCall.id == call.id).values(approver_id=owner_id)
            )
        return now()

    monkeypatch.setattr(handover, "utcnow", then_another_tab_wins)
    with pytest.raises(Conflict, match="already handed to Acme Owner"):
        handover.hand_over(world.a.principal("member"), call.id, admin_id, tool_executor())


def test_the_hand_over_list_offers_only_members_who_may_read_the_target(world, scripted, login):
    other = make_user("member2@acme.test", "Acme Member Two")
    add_member(other, world.a.org, "member")
    call = proposed_update(world, scripted, world.a.private.id)  # private to the member
    member = login("member@acme.test")
    page = member.get(f"/chat/conversations/{call.conversation_id}").get_data(as_text=True)
    options = {
        o.get_text() for o in card_of(page, call.id).select("select[name=approver_id] option")
    }
    assert options == {"Acme Owner", "Acme Admin"}  # Member Two cannot read the record
    assert hand(member, call.id, other.id).status_code == 422
    # A public record's list still offers every member who holds the permission.
    public = proposed_update(world, scripted, world.a.public.id)
    page = member.get(f"/chat/conversations/{public.conversation_id}").get_data(as_text=True)
    options = {
        o.get_text() for o in card_of(page, public.id).select("select[name=approver_id] option")
    }
    assert options == {"Acme Owner", "Acme Admin", "Acme Member Two"}


def test_revoking_a_key_rejects_its_held_writes_with_the_reason(app, world, login):
    token = make_key(world.a.principal("owner"), "member", "Agent", writes_need_approval=True)
    approval = create(app.test_client(), token, "Never run").get_json()
    key_id = db.session.scalar(select(ApiKey.id).where(ApiKey.name == "Agent"))
    owner = login("owner@acme.test")
    assert owner.post(f"/settings/api-keys/{key_id}/revoke").status_code == 303
    call = db.session.get(ToolCall, approval["id"])
    db.session.refresh(call)
    assert call.status == "REJECTED" and "revoked" in call.reject_reason
    assert f"approval-{call.id}" not in inbox_ids(owner)
    seen = login("viewer@acme.test").get(approval["status_url"]).get_json()
    assert seen["status"] == "rejected" and "revoked" in seen["reason"]
    assert app.test_client().get(approval["status_url"], headers=bearer(token)).status_code == 401
    assert titled("Never run") == 0
    page = BeautifulSoup(owner.get("/approvals").get_data(as_text=True), "html.parser")
    assert page.select_one(".approvals-badge") is None


def test_the_requesters_open_panel_hears_the_approvers_decision(world, scripted, login):
    call = propose(world, scripted)
    member = login("member@acme.test")
    hand(member, call.id, world.a.users["owner"].id)
    page = member.get(f"/chat/conversations/{call.conversation_id}").get_data(as_text=True)
    waiter = BeautifulSoup(page, "html.parser").select_one("#chat-await")
    assert waiter is not None  # the open panel waits for the approver
    url = waiter["hx-sse:connect"]
    assert f"calls={call.id}" in url
    decide(login("owner@acme.test"), call.id, "confirm")
    body = member.get(url).get_data(as_text=True)
    assert "event: done" in body
    assert "Confirmed by Acme Owner" in body  # the card, drawn again as decided


def test_an_open_panel_that_catches_the_decisions_turn_still_hears_the_answer(
    app, world, scripted, login
):
    """Under load the panel's look can fall while the approver's decision still holds the
    conversation's turn: it waits that turn out, then the model's answer begins and is
    followed (following the decision's turn alone ended with no answer)."""
    import threading
    import time

    from monark.chat.turn import lease

    call = propose(world, scripted)
    member = login("member@acme.test")
    hand(member, call.id, world.a.users["owner"].id)
    page = member.get(f"/chat/conversations/{call.conversation_id}").get_data(as_text=True)
    url = BeautifulSoup(page, "html.parser").select_one("#chat-await")["hx-sse:connect"]
    decide(login("owner@acme.test"), call.id, "confirm")
    scripted.script.add([Say("The owner approved it: Buy milk is on the list.")])
    # The decision's turn, as the panel's look sees it: settled, its lease still held.
    held = lease.claim(call.conversation_id)

    def its_turn_ends() -> None:
        time.sleep(0.6)
        with app.app_context():
            lease.give_back(call.conversation_id, held)

    ending = threading.Thread(target=its_turn_ends)
    ending.start()
    body = member.get(url).get_data(as_text=True)
    ending.join()
    assert "The owner approved it: Buy milk is on the list." in body
    assert "event: done" in body
