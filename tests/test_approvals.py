"""Decisions taken fresh: a proposal past ``CHAT_APPROVAL_TTL`` expires, a write whose target
changed since its card was drawn asks again, and a second decision says what won."""

from __future__ import annotations

from datetime import timedelta

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select, update

from monark.approvals import decision as decisions
from monark.approvals import service as approval_service
from monark.chat.llm.types import ToolResultBlock
from monark.chat.models import ToolCall
from monark.config import _duration
from monark.core.models import Event, utcnow
from monark.extensions import db
from monark.records import services as records
from monark.records.models import Record
from tests.llm_script import Call, Say
from tests.test_chat_loop import calls_of, records_titled, send
from tests.test_chat_stream import read
from tests.tuning import configure


def age(call_id: int, **delta: float) -> None:
    """Make a proposal look older than it is."""
    db.session.execute(
        update(ToolCall)
        .where(ToolCall.id == call_id)
        .values(created_at=utcnow() - timedelta(**delta))
    )
    db.session.commit()


def events(kind: str, call_id: int) -> int:
    return len(
        db.session.scalars(
            select(Event.id).where(Event.type == kind, Event.subject_id == call_id)
        ).all()
    )


def propose_update(world, scripted, principal, **values):
    scripted.script.add(
        [
            Call(
                "records_update",
                {"model": "tasks", "record_id": world.a.public.id, "values": values},
            )
        ]
    )
    proposed = send(principal, "Update it")
    (call,) = calls_of(proposed.conversation_id)
    return call


# ---- expiry ---------------------------------------------------------------------------------


def test_a_proposal_past_its_time_cannot_be_confirmed_and_changes_nothing(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "Late"}})])
    proposed = send(member, "Add Late")
    (call,) = calls_of(proposed.conversation_id)
    age(call.id, days=7, minutes=1)
    with pytest.raises(decisions.ProposalExpired, match="more than 7 days"):
        approval_service.confirm_tool_call(member, call.id)
    db.session.refresh(call)
    assert call.status == "EXPIRED" and call.decided_by_id is None
    assert records_titled("Late") == 0
    assert events("chat.tool_call.expired", call.id) == 1
    assert events("chat.tool_call.confirmed", call.id) == 0
    # Rejecting it is no decision either: it stays expired.
    with pytest.raises(decisions.ProposalExpired):
        approval_service.reject_tool_call(member, call.id)


def test_the_model_learns_that_a_proposal_expired(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "Late"}})])
    proposed = send(member, "Add Late")
    (call,) = calls_of(proposed.conversation_id)
    age(call.id, days=8)
    scripted.script.add([Say("It expired; shall I propose it again?")])
    send(member, "Well?", conversation_id=proposed.conversation_id)
    db.session.refresh(call)
    assert call.status == "EXPIRED" and not call.skipped
    (result,) = [
        b for b in scripted.requests[-1].messages[-1].content if isinstance(b, ToolResultBlock)
    ]
    assert result.is_error and "expired" in result.content
    assert "nothing was changed" in result.content


def test_a_proposal_within_its_time_still_runs(world, scripted):
    member = world.a.principal("member")
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "In time"}})],
        [Say("Done.")],
    )
    proposed = send(member, "Add")
    (call,) = calls_of(proposed.conversation_id)
    age(call.id, days=6, hours=23)
    approval_service.confirm_tool_call(member, call.id)
    assert records_titled("In time") == 1


def test_the_time_a_proposal_waits_is_configurable(app, world, scripted, login, monkeypatch):
    configure(monkeypatch, app, CHAT_APPROVAL_TTL=90.0)
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "Quick"}})])
    proposed = send(world.a.principal("member"), "Add")
    (call,) = calls_of(proposed.conversation_id)
    age(call.id, seconds=91)
    browser = login("member@acme.test")
    page = browser.get(f"/chat/conversations/{proposed.conversation_id}")
    card = BeautifulSoup(page.get_data(as_text=True), "html.parser").select_one(f"#call-{call.id}")
    assert card["data-status"] == "EXPIRED"
    assert "Expired" in card.get_text() and card.find("button", string="Confirm") is None
    response = read(browser.post("/chat/decide", {"decision": f"confirm:{call.id}"}))
    assert response.status_code == 409
    body = response.get_data(as_text=True)
    assert "more than 90 seconds" in body
    assert records_titled("Quick") == 0


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("7d", 604800), ("36h", 129600), ("90m", 5400), ("600s", 600), ("45", 45), ("1.5d", 129600)],
)
def test_approval_ttl_reads_durations(monkeypatch, raw, seconds):
    monkeypatch.setenv("CHAT_APPROVAL_TTL", raw)
    assert _duration("CHAT_APPROVAL_TTL", "7d") == seconds


@pytest.mark.parametrize("raw", ["soon", "0", "-3d", "d", "7w"])
def test_a_bad_approval_ttl_is_named(monkeypatch, raw):
    monkeypatch.setenv("CHAT_APPROVAL_TTL", raw)
    with pytest.raises(RuntimeError, match="CHAT_APPROVAL_TTL"):
        _duration("CHAT_APPROVAL_TTL", "7d")


# ---- the card's before side, read again at Confirm ------------------------------------------


def test_an_update_whose_before_changed_is_drawn_again_and_not_run(world, scripted):
    member, owner = world.a.principal("member"), world.a.principal("owner")
    call = propose_update(world, scripted, member, status="done")
    assert call.preview["changes"][0] == {"field": "Status", "before": "todo", "after": "done"}
    record = db.session.get(Record, world.a.public.id)
    records.update_record(owner, world.a.model, world.a.public.id, {"status": "doing"})
    db.session.commit()
    with pytest.raises(decisions.ProposalChanged, match="confirm again"):
        approval_service.confirm_tool_call(member, call.id)
    db.session.refresh(call)
    db.session.refresh(record)
    assert record.values["status"] == "doing"  # nothing ran
    assert call.status == "PROPOSED"
    assert call.preview["changes"][0] == {"field": "Status", "before": "doing", "after": "done"}
    assert events("chat.tool_call.redrawn", call.id) == 1
    # Asked again, with the card as it is now: it runs.
    scripted.script.add([Say("Done.")])
    approval_service.confirm_tool_call(member, call.id)
    db.session.refresh(record)
    assert record.values["status"] == "done"


def test_a_long_before_changed_past_what_the_card_kept_still_asks_again(
    app, world, scripted, monkeypatch
):
    """The card keeps the start of a long value (``CHAT_CARD_MAX``); the check at Confirm
    is of the whole value, so a change near its end is a change."""
    configure(monkeypatch, app, CHAT_CARD_MAX=2_000)
    member, owner = world.a.principal("member"), world.a.principal("owner")
    records.update_record(owner, world.a.model, world.a.public.id, {"notes": "a" * 5_000})
    db.session.commit()
    call = propose_update(world, scripted, member, notes="Short now")
    assert "more characters]" in call.preview["changes"][0]["before"]
    records.update_record(
        owner, world.a.model, world.a.public.id, {"notes": "a" * 4_990 + "z" * 10}
    )
    db.session.commit()
    with pytest.raises(decisions.ProposalChanged):
        approval_service.confirm_tool_call(member, call.id)
    db.session.expire_all()
    assert db.session.get(Record, world.a.public.id).values["notes"].endswith("z" * 10)
    assert db.session.get(ToolCall, call.id).status == "PROPOSED"


def test_a_change_to_a_field_the_card_does_not_show_does_not_block(world, scripted):
    member, owner = world.a.principal("member"), world.a.principal("owner")
    call = propose_update(world, scripted, member, status="done")
    record = db.session.get(Record, world.a.public.id)
    records.update_record(
        owner, world.a.model, world.a.public.id, {"notes": "Another hand was here"}
    )
    db.session.commit()
    scripted.script.add([Say("Done.")])
    approval_service.confirm_tool_call(member, call.id)
    db.session.refresh(record)
    assert record.values["status"] == "done"
    assert record.values["notes"] == "Another hand was here"


def test_a_renamed_target_asks_again(world, scripted):
    member, owner = world.a.principal("member"), world.a.principal("owner")
    call = propose_update(world, scripted, member, status="done")
    records.update_record(owner, world.a.model, world.a.public.id, {"title": "Renamed meanwhile"})
    db.session.commit()
    with pytest.raises(decisions.ProposalChanged):
        approval_service.confirm_tool_call(member, call.id)
    db.session.refresh(call)
    assert "Renamed meanwhile" in call.preview["headline"]


def test_a_delete_shows_what_goes_and_asks_again_when_it_changed(world, scripted):
    member, owner = world.a.principal("member"), world.a.principal("owner")
    scripted.script.add(
        [Call("records_delete", {"model": "tasks", "record_id": world.a.public.id})]
    )
    proposed = send(owner, "Delete it")
    (call,) = calls_of(proposed.conversation_id)
    assert {"field": "Status", "before": "todo", "after": None} in call.preview["changes"]
    records.update_record(member, world.a.model, world.a.public.id, {"status": "done"})
    db.session.commit()
    with pytest.raises(decisions.ProposalChanged):
        approval_service.confirm_tool_call(owner, call.id)
    assert db.session.get(Record, world.a.public.id) is not None


def test_confirm_on_a_changed_target_answers_409_with_the_new_card(world, scripted, login):
    member, owner = world.a.principal("member"), world.a.principal("owner")
    call = propose_update(world, scripted, member, status="done")
    records.update_record(owner, world.a.model, world.a.public.id, {"status": "doing"})
    db.session.commit()
    browser = login("member@acme.test")
    response = read(browser.post("/chat/decide", {"decision": f"confirm:{call.id}"}))
    assert response.status_code == 409
    body = response.get_data(as_text=True)
    assert "changed since the card was drawn" in body
    card = BeautifulSoup(body, "html.parser").select_one(f"#call-{call.id}")
    assert card["data-status"] == "PROPOSED"
    assert card.select_one(".before").get_text() == "doing"
    assert card.find("button", string="Confirm") is not None


# ---- a second decision ----------------------------------------------------------------------


def test_a_second_decision_answers_409_saying_what_won(world, scripted, login):
    member = world.a.principal("member")
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Twice"}})],
        [Say("Done.")],
    )
    proposed = send(member, "Add")
    (call,) = calls_of(proposed.conversation_id)
    call_id = call.id
    browser = login("member@acme.test")
    first = read(browser.post("/chat/decide", {"decision": f"confirm:{call_id}"}))
    assert first.status_code == 200
    second = read(browser.post("/chat/decide", {"decision": f"reject:{call_id}"}))
    assert second.status_code == 409
    body = second.get_data(as_text=True)
    assert "already confirmed by Acme Member" in body
    card = BeautifulSoup(body, "html.parser").select_one(f"#call-{call_id}")
    assert card["data-status"] == "SUCCEEDED"
    assert [b.get_text() for b in card.find_all("button")] == ["Undo"]  # no decision left
    assert records_titled("Twice") == 1
