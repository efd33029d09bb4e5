"""Hand-over: a member asks someone who may approve a proposed write; that member decides
it in their Approvals inbox, as themselves; four eyes; the requester's thread continues."""

from __future__ import annotations

import time

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select

from monark.approvals import handover, inbox
from monark.approvals import service as approval_service
from monark.chat.llm.types import ToolResultBlock
from monark.chat.models import Message, ToolCall
from monark.chat.runtime import tool_executor
from monark.core.errors import Forbidden, ValidationFailed
from monark.core.models import Event, Org
from monark.extensions import db
from monark.records.models import Record
from tests.llm_script import Call, Say
from tests.test_chat_loop import calls_of, records_titled, send


def propose(world, scripted, title: str = "Buy milk") -> ToolCall:
    """Member A's proposal: a record to create."""
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": title}})])
    proposed = send(world.a.principal("member"), f"Add {title}")
    (call,) = calls_of(proposed.conversation_id)
    assert call.status == "PROPOSED"
    return call


def hand(browser, call_id: int, approver_id: int):
    return browser.post(f"/chat/calls/{call_id}/hand-over", {"approver_id": str(approver_id)})


def card_of(html: str, call_id: int):
    return BeautifulSoup(html, "html.parser").select_one(f"#call-{call_id}")


def inbox_ids(browser) -> set[str]:
    page = BeautifulSoup(browser.get("/approvals").get_data(as_text=True), "html.parser")
    return {li["id"] for li in page.select(".approval")}


def badge(browser) -> str | None:
    page = BeautifulSoup(browser.get("/approvals").get_data(as_text=True), "html.parser")
    found = page.select_one(".nav-approvals .approvals-badge")
    return found.get_text() if found else None


def decide(browser, call_id: int, decision: str, reason: str = ""):
    return browser.post(f"/approvals/{call_id}/decide", {"decision": decision, "reason": reason})


def test_the_card_offers_the_members_who_hold_the_permission(world, scripted, login):
    call = propose(world, scripted)
    member = login("member@acme.test")
    html = member.get(f"/chat/conversations/{call.conversation_id}").get_data(as_text=True)
    options = {
        o.get_text() for o in card_of(html, call.id).select("select[name=approver_id] option")
    }
    # records.create: owner, admin and (other) members; never the viewer or the requester.
    assert options == {"Acme Owner", "Acme Admin"}


def test_hand_over_to_a_member_who_holds_the_permission(world, scripted, login):
    call = propose(world, scripted)
    owner_id = world.a.users["owner"].id
    response = hand(login("member@acme.test"), call.id, owner_id)
    assert response.status_code == 200
    card = card_of(response.get_data(as_text=True), call.id)
    assert "Waiting for Acme Owner" in card.get_text()
    assert card.find("button", string="Confirm") is None
    assert card.find("button", string="Reject") is not None  # the requester may withdraw
    page = login("member@acme.test").get(f"/chat/conversations/{call.conversation_id}")
    foot = BeautifulSoup(page.get_data(as_text=True), "html.parser").select_one("#chat-thread-foot")
    assert "needs another member's approval" in foot.get_text()
    db.session.refresh(call)
    assert call.status == "PROPOSED" and call.approver_id == owner_id
    assert call.handed_by_id == world.a.users["member"].id and call.handed_at is not None
    event = db.session.scalar(select(Event).where(Event.type == "chat.tool_call.handed_over"))
    assert event.subject_id == call.id and event.payload["approver_id"] == owner_id
    assert records_titled("Buy milk") == 0


@pytest.mark.parametrize("who", ["viewer", "globex", "self"])
def test_hand_over_is_refused_to_anyone_who_may_not_approve(world, scripted, login, who):
    call = propose(world, scripted)
    approver = {
        "viewer": world.a.users["viewer"],
        "globex": world.b.users["owner"],
        "self": world.a.users["member"],
    }[who]
    response = hand(login("member@acme.test"), call.id, approver.id)
    assert response.status_code == 422
    assert "holds this permission" in response.get_data(as_text=True)
    db.session.refresh(call)
    assert call.approver_id is None
    with pytest.raises(ValidationFailed):
        handover.hand_over(world.a.principal("member"), call.id, approver.id, tool_executor())


def test_the_approvers_inbox_shows_it_and_nobody_else_sees_or_decides_it(world, scripted, login):
    call = propose(world, scripted)
    member = login("member@acme.test")
    hand(member, call.id, world.a.users["owner"].id)
    owner = login("owner@acme.test")
    assert inbox_ids(owner) == {f"approval-{call.id}"}
    page = owner.get("/approvals").get_data(as_text=True)
    assert "Asked by <strong>Acme Member</strong> via the assistant" in page
    assert "Buy milk" in page
    # The admin holds the permission but was not asked; Globex's owner is another org.
    for other in (login("admin@acme.test"), login("owner@globex.test"), member):
        assert inbox_ids(other) == set()
        assert decide(other, call.id, "confirm").status_code == 404
    with pytest.raises(Exception, match="No such approval request"):
        inbox.get_request(world.a.principal("admin"), tool_executor(), call.id)
    assert records_titled("Buy milk") == 0


def test_an_approver_who_lost_the_permission_cannot_decide(world, scripted, login):
    call = propose(world, scripted)
    hand(login("member@acme.test"), call.id, world.a.users["admin"].id)
    from monark.core.models import Membership

    membership = db.session.scalar(
        select(Membership).where(Membership.user_id == world.a.users["admin"].id)
    )
    membership.role = "viewer"
    db.session.commit()
    admin = login("admin@acme.test")
    assert inbox_ids(admin) == set()
    assert decide(admin, call.id, "confirm").status_code == 403
    assert records_titled("Buy milk") == 0


def test_the_approvers_confirm_runs_the_write_as_them_requested_by_the_member(
    world, scripted, login
):
    call = propose(world, scripted)
    hand(login("member@acme.test"), call.id, world.a.users["owner"].id)
    response = decide(login("owner@acme.test"), call.id, "confirm")
    assert response.status_code == 303
    db.session.refresh(call)
    assert call.status == "SUCCEEDED" and call.decided_by_id == world.a.users["owner"].id
    record = db.session.scalar(select(Record).where(Record.title == "Buy milk"))
    assert record.creator_id == world.a.users["owner"].id
    created = db.session.scalar(
        select(Event).where(Event.type == "record.created", Event.subject_id == record.id)
    )
    assert created.actor_kind == "assistant"
    assert created.actor_id == world.a.users["owner"].id  # approved by B …
    assert created.payload["requested_by_id"] == world.a.users["member"].id  # … asked by A
    assert created.conversation_id == call.conversation_id
    confirmed = db.session.scalar(
        select(Event).where(Event.type == "chat.tool_call.confirmed", Event.subject_id == call.id)
    )
    assert confirmed.actor_id == world.a.users["owner"].id
    assert confirmed.payload["requested_by_id"] == world.a.users["member"].id
    # A second decision changes nothing.
    decide(login("owner@acme.test"), call.id, "confirm")
    assert records_titled("Buy milk") == 1


def test_the_approver_may_reject_with_a_reason(world, scripted, login):
    call = propose(world, scripted)
    hand(login("member@acme.test"), call.id, world.a.users["owner"].id)
    decide(login("owner@acme.test"), call.id, "reject", "We have milk")
    db.session.refresh(call)
    assert call.status == "REJECTED" and call.reject_reason == "We have milk"
    assert call.decided_by_id == world.a.users["owner"].id
    assert records_titled("Buy milk") == 0


def test_while_handed_over_the_requester_cannot_confirm_but_may_withdraw(world, scripted, login):
    call = propose(world, scripted)
    member = world.a.principal("member")
    hand(login("member@acme.test"), call.id, world.a.users["owner"].id)
    with pytest.raises(Forbidden, match="Waiting for Acme Owner"):
        approval_service.confirm_tool_call(member, call.id)
    scripted.script.add([Say("Withdrawn.")])
    approval_service.reject_tool_call(member, call.id, "Never mind")
    db.session.refresh(call)
    assert call.status == "REJECTED"
    owner = login("owner@acme.test")
    assert inbox_ids(owner) == set()
    decide(owner, call.id, "confirm")
    assert records_titled("Buy milk") == 0


def test_a_four_eyes_tool_cannot_be_confirmed_by_the_requester(world, scripted, login):
    admin = login("admin@acme.test")
    admin.post("/settings/four-eyes", {"four_eyes": "records_create"})
    assert db.session.get(Org, world.a.org.id).chat_four_eyes == ["records_create"]
    call = propose(world, scripted)
    member = login("member@acme.test")
    html = member.get(f"/chat/conversations/{call.conversation_id}").get_data(as_text=True)
    card = card_of(html, call.id)
    assert card.find("button", string="Confirm") is None
    assert "four eyes" in card.get_text()
    with pytest.raises(Forbidden, match="four eyes"):
        approval_service.confirm_tool_call(world.a.principal("member"), call.id)
    # Refused on the server whatever the page shows.
    refused = member.post("/chat/decide", {"decision": f"confirm:{call.id}"})
    assert refused.status_code == 403
    assert records_titled("Buy milk") == 0
    hand(member, call.id, world.a.users["admin"].id)
    decide(admin, call.id, "confirm")
    assert records_titled("Buy milk") == 1


def test_four_eyes_takes_only_write_tools(world, login):
    admin = login("admin@acme.test")
    admin.post("/settings/four-eyes", {"four_eyes": "records_list"})
    assert db.session.get(Org, world.a.org.id).chat_four_eyes == []
    assert login("member@acme.test").post("/settings/four-eyes", {}).status_code == 403


def wait_for_reply(conversation_id: int, text: str, timeout: float = 10.0) -> Message:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        db.session.rollback()
        found = db.session.scalar(
            select(Message).where(Message.conversation_id == conversation_id, Message.text == text)
        )
        if found is not None and found.status == "complete":
            return found
        time.sleep(0.05)
    raise AssertionError(f"no reply {text!r}")


def test_the_requesters_thread_continues_when_they_open_it(world, scripted, login):
    call = propose(world, scripted)
    member = login("member@acme.test")
    hand(member, call.id, world.a.users["owner"].id)
    decide(login("owner@acme.test"), call.id, "confirm")
    assert len(scripted.requests) == 1  # the approval itself asks the model nothing
    scripted.script.add([Say("Acme Owner approved it: Buy milk is on the list.")])
    member.get(f"/chat/conversations/{call.conversation_id}")
    wait_for_reply(call.conversation_id, "Acme Owner approved it: Buy milk is on the list.")
    (result,) = [
        b for b in scripted.requests[-1].messages[-1].content if isinstance(b, ToolResultBlock)
    ]
    assert not result.is_error and "Buy milk" in result.content
    # Heard once: opening it again starts nothing.
    time.sleep(0.2)
    member.get(f"/chat/conversations/{call.conversation_id}")
    time.sleep(0.3)
    assert len(scripted.requests) == 2


def test_the_badge_counts_what_waits_for_the_member(world, scripted, login):
    first = propose(world, scripted, "One")
    second = propose(world, scripted, "Two")
    member = login("member@acme.test")
    owner = login("owner@acme.test")
    assert badge(owner) is None
    hand(member, first.id, world.a.users["owner"].id)
    hand(member, second.id, world.a.users["owner"].id)
    assert badge(owner) == "2"
    assert badge(member) is None and badge(login("admin@acme.test")) is None
    decide(owner, first.id, "reject")
    assert badge(owner) == "1"


def test_the_audit_log_names_who_asked_and_who_approved(world, scripted, login):
    call = propose(world, scripted)
    hand(login("member@acme.test"), call.id, world.a.users["owner"].id)
    decide(login("owner@acme.test"), call.id, "confirm")
    page = BeautifulSoup(
        login("admin@acme.test").get("/audit?type=record.created").get_data(as_text=True),
        "html.parser",
    )
    rows = [r.get_text(" ", strip=True) for r in page.select("tbody tr")]
    (row,) = [r for r in rows if "requested by" in r]
    assert "requested by: Acme Member" in row and "Acme Owner" in row


def test_a_viewer_hands_a_write_they_may_not_make_to_a_member(world, scripted, login):
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "Tea"}})])
    proposed = send(world.a.principal("viewer"), "Add Tea")
    (call,) = calls_of(proposed.conversation_id)
    viewer = login("viewer@acme.test")
    html = viewer.get(f"/chat/conversations/{call.conversation_id}").get_data(as_text=True)
    card = card_of(html, call.id)
    assert "lacks records.create" in card.get_text()
    options = {o.get_text() for o in card.select("select[name=approver_id] option")}
    assert options == {"Acme Owner", "Acme Admin", "Acme Member"}
    assert hand(viewer, call.id, world.a.users["member"].id).status_code == 200
    decide(login("member@acme.test"), call.id, "confirm")
    record = db.session.scalar(select(Record).where(Record.title == "Tea"))
    assert record.creator_id == world.a.users["member"].id


def test_a_request_past_its_time_leaves_the_inbox_and_cannot_be_confirmed(world, scripted, login):
    from tests.test_approvals import age

    call = propose(world, scripted)
    hand(login("member@acme.test"), call.id, world.a.users["owner"].id)
    age(call.id, days=8)
    owner = login("owner@acme.test")
    assert inbox_ids(owner) == set()
    decide(owner, call.id, "confirm")
    db.session.refresh(call)
    assert call.status == "EXPIRED" and records_titled("Buy milk") == 0


def test_in_a_group_a_four_eyes_write_keeps_waiting_when_the_rest_is_confirmed(
    world, scripted, login
):
    from tests.test_chat_stream import read

    record_id, owner_id = world.a.public.id, world.a.users["owner"].id
    org = db.session.get(Org, world.a.org.id)
    org.chat_four_eyes = ["records_update"]
    db.session.commit()
    update = Call(
        "records_update",
        {"model": "tasks", "record_id": record_id, "values": {"status": "done"}},
    )
    create = Call("records_create", {"model": "tasks", "values": {"title": "Grouped"}})
    scripted.script.add([create, update])
    proposed = send(world.a.principal("member"), "Both")
    made, changed = (c.id for c in calls_of(proposed.conversation_id))
    message_id = db.session.get(ToolCall, made).message_id
    member = login("member@acme.test")
    page = BeautifulSoup(
        member.get(f"/chat/conversations/{proposed.conversation_id}").get_data(as_text=True),
        "html.parser",
    )
    boxes = page.select('.call-group input[name="selected"]')
    assert [int(b["value"]) for b in boxes] == [made]
    assert "four eyes" in card_of(str(page), changed).get_text()
    # Even asked for both, the group confirms only what is the member's to confirm.
    read(
        member.post(
            "/chat/decide-group",
            {"decision": f"confirm:{message_id}", "selected": [str(made), str(changed)]},
        )
    )
    db.session.expire_all()
    assert db.session.get(ToolCall, made).status == "SUCCEEDED"
    assert db.session.get(ToolCall, changed).status == "PROPOSED"
    assert db.session.get(Record, record_id).values["status"] == "todo"
    hand(member, changed, owner_id)
    decide(login("owner@acme.test"), changed, "confirm")
    db.session.expire_all()
    assert db.session.get(Record, record_id).values["status"] == "done"


def test_the_approver_may_edit_a_request_and_confirm_runs_the_edit(world, scripted, login):
    record_id, owner_id = world.a.public.id, world.a.users["owner"].id
    scripted.script.add(
        [
            Call(
                "records_update",
                {"model": "tasks", "record_id": record_id, "values": {"status": "done"}},
            )
        ]
    )
    proposed = send(world.a.principal("member"), "Finish it")
    (call_id,) = (c.id for c in calls_of(proposed.conversation_id))
    hand(login("member@acme.test"), call_id, owner_id)
    owner = login("owner@acme.test")
    form = BeautifulSoup(
        owner.get(f"/chat/calls/{call_id}/edit").get_data(as_text=True), "html.parser"
    )
    assert form.select_one("form.call-editing")["hx-post"] == f"/chat/calls/{call_id}/edit"
    saved = owner.post(f"/chat/calls/{call_id}/edit", {"arg.values.status": "doing"})
    assert saved.status_code == 200
    card = card_of(saved.get_data(as_text=True), call_id)
    assert "Edited by Acme Owner" in card.get_text()
    assert [a.get_text() for a in card.select(".after")] == ["doing"]
    assert card.find("button", string="Confirm") is not None  # still the inbox's card
    # Another member can neither open nor save the form.
    assert login("admin@acme.test").get(f"/chat/calls/{call_id}/edit").status_code == 404
    decide(owner, call_id, "confirm")
    db.session.expire_all()
    assert db.session.get(Record, record_id).values["status"] == "doing"
    assert db.session.get(ToolCall, call_id).edited_by_id == owner_id


def test_a_four_eyes_tool_is_never_allowed_for_the_conversation(world, scripted, login):
    from monark.approvals import allowances
    from monark.approvals.models import Allowance
    from monark.chat.models import Conversation

    org = db.session.get(Org, world.a.org.id)
    org.chat_four_eyes = ["records_create"]
    db.session.commit()
    call = propose(world, scripted)
    member = login("member@acme.test")
    html = member.get(f"/chat/conversations/{call.conversation_id}").get_data(as_text=True)
    card = card_of(html, call.id)
    assert card.find("button", string=lambda t: t and t.startswith("Allow")) is None
    refused = member.post("/chat/allow", {"tool_call_id": str(call.id)})
    assert refused.status_code == 403
    assert db.session.scalar(select(Allowance.id)) is None
    # An allowance made before the tool became four-eyes no longer applies.
    spec = next(s for s in tool_executor().specs() if s.name == "records_create")
    conversation = db.session.get(Conversation, call.conversation_id)
    assert not allowances.applies(world.a.principal("member"), conversation, spec, call)
    assert records_titled("Buy milk") == 0


def test_an_inbox_confirm_from_a_card_drawn_before_an_edit_runs_nothing(world, scripted, login):
    record_id, owner_id = world.a.public.id, world.a.users["owner"].id
    scripted.script.add(
        [
            Call(
                "records_update",
                {"model": "tasks", "record_id": record_id, "values": {"status": "done"}},
            )
        ]
    )
    proposed = send(world.a.principal("member"), "Finish it")
    (call_id,) = (c.id for c in calls_of(proposed.conversation_id))
    requester = login("member@acme.test")
    hand(requester, call_id, owner_id)
    owner = login("owner@acme.test")
    page = BeautifulSoup(owner.get("/approvals").get_data(as_text=True), "html.parser")
    shown = page.select_one(f'form[action="/approvals/{call_id}/decide"] input[name="shown"]')
    # The approver edits it in another tab after this inbox page drew the card.
    assert (
        owner.post(f"/chat/calls/{call_id}/edit", {"arg.values.status": "doing"}).status_code == 200
    )
    owner.post(f"/approvals/{call_id}/decide", {"decision": "confirm", "shown": shown["value"]})
    db.session.expire_all()
    assert db.session.get(Record, record_id).values["status"] == "todo"
    assert db.session.get(ToolCall, call_id).status == "PROPOSED"
    # Drawn again, the card shows the edit, and its Confirm runs it.
    page = BeautifulSoup(owner.get("/approvals").get_data(as_text=True), "html.parser")
    shown = page.select_one(f'form[action="/approvals/{call_id}/decide"] input[name="shown"]')
    owner.post(f"/approvals/{call_id}/decide", {"decision": "confirm", "shown": shown["value"]})
    db.session.expire_all()
    assert db.session.get(Record, record_id).values["status"] == "doing"


def test_once_handed_over_the_requester_can_no_longer_edit_what_the_approver_reviews(
    world, scripted, login
):
    # Otherwise the requester could change the write after the approver opened it, and the
    # approver's Confirm would run arguments they never saw (a way around four eyes).
    call = propose(world, scripted, "Buy milk")
    member = login("member@acme.test")
    handed = card_of(
        hand(member, call.id, world.a.users["owner"].id).get_data(as_text=True), call.id
    )
    assert handed.find("button", string="Edit") is None
    assert member.get(f"/chat/calls/{call.id}/edit").status_code == 409
    saved = member.post(f"/chat/calls/{call.id}/edit", {"arg.values.title": "Buy a boat"})
    assert saved.status_code == 409
    db.session.refresh(call)
    assert call.input["values"]["title"] == "Buy milk" and call.edited_by_id is None
    decide(login("owner@acme.test"), call.id, "confirm")
    assert records_titled("Buy milk") == 1 and records_titled("Buy a boat") == 0


def test_each_write_of_a_group_may_be_handed_over(world, scripted, login):
    scripted.script.add(
        [
            Call("records_create", {"model": "tasks", "values": {"title": "Tea"}}),
            Call("records_create", {"model": "tasks", "values": {"title": "Cake"}}),
        ]
    )
    proposed = send(world.a.principal("viewer"), "Add both")
    tea, cake = calls_of(proposed.conversation_id)
    viewer = login("viewer@acme.test")
    page = viewer.get(f"/chat/conversations/{proposed.conversation_id}").get_data(as_text=True)
    for call in (tea, cake):
        card = card_of(page, call.id)
        assert card.select_one("select[name=approver_id]") is not None, card
    handed = card_of(
        hand(viewer, tea.id, world.a.users["member"].id).get_data(as_text=True), tea.id
    )
    assert "Waiting for Acme Member" in handed.get_text()
    assert handed.select_one('input[name="selected"]') is None
    decide(login("member@acme.test"), tea.id, "confirm")
    assert records_titled("Tea") == 1 and records_titled("Cake") == 0


def test_when_the_approver_can_no_longer_approve_the_requester_may_ask_someone_else(
    world, scripted, login
):
    from monark.core.models import Membership

    call = propose(world, scripted)
    member = login("member@acme.test")
    hand(member, call.id, world.a.users["admin"].id)
    membership = db.session.scalar(
        select(Membership).where(Membership.user_id == world.a.users["admin"].id)
    )
    membership.role = "viewer"  # or they left the org: either way, they cannot decide it
    db.session.commit()
    page = member.get(f"/chat/conversations/{call.conversation_id}").get_data(as_text=True)
    card = card_of(page, call.id)
    assert "can no longer approve" in card.get_text()
    options = {o.get_text() for o in card.select("select[name=approver_id] option")}
    assert options == {"Acme Owner"}
    assert hand(member, call.id, world.a.users["owner"].id).status_code == 200
    decide(login("owner@acme.test"), call.id, "confirm")
    assert records_titled("Buy milk") == 1
