"""Issue 14, points 3 and 5: "Allow <tool> for this conversation", and Undo of a done write.

With the scripted provider, through the real loop, executor, dispatcher and views.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from monark.chat import allowances, service
from monark.chat.models import Allowance, Conversation, ToolCall
from monark.chat.runtime import tool_executor
from monark.chat.turns import run_turn
from monark.core.errors import Forbidden
from monark.core.models import Event, Org, utcnow
from monark.extensions import db
from monark.records.models import Record
from tests.llm_script import Call, Say
from tests.test_chat_loop import calls_of, records_titled, send


def events(kind: str, subject_id: int | None = None) -> list[Event]:
    stmt = select(Event).where(Event.type == kind)
    if subject_id is not None:
        stmt = stmt.where(Event.subject_id == subject_id)
    return list(db.session.scalars(stmt))


def update_call(world, status: str, record_id: int | None = None) -> Call:
    record_id = record_id or world.a.public.id
    return Call(
        "records_update", {"model": "tasks", "record_id": record_id, "values": {"status": status}}
    )


def allow(principal, call_id: int):
    """Choose "Allow <tool> for this conversation" on a card."""
    turn = service.begin_decision(
        principal, call_id, True, on_confirm=allowances.granting(principal)
    )
    return run_turn(turn)


def allowed_conversation(world, scripted, principal):
    """A conversation where ``principal`` allowed records_update on a first card."""
    scripted.script.add([update_call(world, "doing")], [Say("Done.")])
    first = send(principal, "Start it")
    (card,) = calls_of(first.conversation_id)
    assert card.status == "PROPOSED"
    allow(principal, card.id)
    db.session.refresh(card)
    assert card.status == "SUCCEEDED" and not card.allowed
    return first.conversation_id


def status_of(record_id: int) -> str | None:
    db.session.expire_all()
    return db.session.get(Record, record_id).values.get("status")


# ---- allowances -----------------------------------------------------------------------------


def test_an_allowed_tool_runs_at_once_later_in_the_conversation(world, scripted):
    member = world.a.principal("member")
    conversation_id = allowed_conversation(world, scripted, member)
    assert status_of(world.a.public.id) == "doing"
    (granted,) = db.session.scalars(select(Allowance)).all()
    assert (granted.conversation_id, granted.user_id, granted.tool) == (
        conversation_id,
        member.user_id,
        "records_update",
    )
    assert len(events("chat.allowance.granted", granted.id)) == 1

    scripted.script.add([update_call(world, "done")], [Say("Finished.")])
    result = send(member, "Finish it", conversation_id=conversation_id)
    assert result.status == "done"  # no card waited
    later = calls_of(conversation_id)[-1]
    assert later.status == "SUCCEEDED" and later.allowed and later.decided_by_id is None
    assert status_of(world.a.public.id) == "done"
    assert len(events("chat.tool_call.allowed", later.id)) == 1
    assert len(events("chat.tool_call.proposed", later.id)) == 0
    # The model read the result as for any call.
    assert '"status": "done"' in str(scripted.requests[-1].messages[-1])
    # It keeps what undoing it needs.
    assert later.undo["reverse"]["arguments"]["values"] == {"status": "doing"}


def test_another_tool_still_asks(world, scripted):
    member = world.a.principal("member")
    conversation_id = allowed_conversation(world, scripted, member)
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "New"}})])
    result = send(member, "Add one", conversation_id=conversation_id)
    assert result.status == "awaiting_confirmation"
    assert records_titled("New") == 0


def test_an_allowance_never_applies_in_another_conversation(world, scripted):
    member = world.a.principal("member")
    allowed_conversation(world, scripted, member)
    scripted.script.add([update_call(world, "done")])
    other = send(member, "Finish it, elsewhere")
    assert other.status == "awaiting_confirmation"
    (call,) = calls_of(other.conversation_id)
    assert call.status == "PROPOSED" and not call.allowed
    assert status_of(world.a.public.id) == "doing"


def test_an_allowance_never_applies_to_another_user(world, scripted):
    member = world.a.principal("member")
    conversation_id = allowed_conversation(world, scripted, member)
    # Another member of the org whose principal reaches the same conversation (the store
    # only lets its creator in; the allowance itself checks the user too).
    conversation = db.session.get(Conversation, conversation_id)
    admin = world.a.principal("admin")
    call = ToolCall(name="records_update", mutates=True, status="PROPOSED")
    specs = {s.name: s for s in tool_executor().specs()}
    assert allowances.applies(member, conversation, specs["records_update"], call)
    assert not allowances.applies(admin, conversation, specs["records_update"], call)


def test_a_revoked_allowance_asks_again(world, scripted):
    member = world.a.principal("member")
    conversation_id = allowed_conversation(world, scripted, member)
    (granted,) = db.session.scalars(select(Allowance)).all()
    allowances.revoke(member, granted.id)
    assert len(events("chat.allowance.revoked", granted.id)) == 1
    scripted.script.add([update_call(world, "done")])
    result = send(member, "Finish it", conversation_id=conversation_id)
    assert result.status == "awaiting_confirmation"
    assert status_of(world.a.public.id) == "doing"


def test_only_its_user_can_revoke_an_allowance(world, scripted):
    member = world.a.principal("member")
    allowed_conversation(world, scripted, member)
    (granted,) = db.session.scalars(select(Allowance)).all()
    with pytest.raises(Exception, match="No such allowance"):
        allowances.revoke(world.a.principal("admin"), granted.id)
    db.session.refresh(granted)
    assert granted.revoked_at is None


def test_an_allowance_lapses_when_the_conversation_was_idle(world, scripted, app):
    member = world.a.principal("member")
    conversation_id = allowed_conversation(world, scripted, member)
    idle = app.config["CHAT_ALLOWANCE_IDLE"]
    db.session.execute(
        update(Conversation)
        .where(Conversation.id == conversation_id)
        .values(last_activity_at=utcnow() - timedelta(seconds=idle + 60))
    )
    db.session.commit()
    scripted.script.add([update_call(world, "done")])
    result = send(member, "Finish it", conversation_id=conversation_id)
    assert result.status == "awaiting_confirmation"  # the new message did not revive it
    (granted,) = db.session.scalars(select(Allowance)).all()
    assert granted.revoked_at is not None
    assert len(events("chat.allowance.lapsed", granted.id)) == 1


def test_the_org_switch_off_refuses_an_allowance_and_stops_those_given(world, scripted):
    member = world.a.principal("member")
    conversation_id = allowed_conversation(world, scripted, member)
    db.session.get(Org, world.a.org.id).chat_allowances_enabled = False
    db.session.commit()
    scripted.script.add([update_call(world, "done")])
    result = send(member, "Finish it", conversation_id=conversation_id)
    assert result.status == "awaiting_confirmation"
    card = calls_of(conversation_id)[-1]
    with pytest.raises(Forbidden, match="switched off"):
        allow(member, card.id)
    db.session.refresh(card)
    assert card.status == "PROPOSED"  # the refused choice decided nothing
    assert len(db.session.scalars(select(Allowance)).all()) == 1  # only the first one


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("records_delete", {"model": "tasks", "record_id": None}),
        ("automation_enable", {"automation_id": 1, "enabled": True}),
    ],
)
def test_a_delete_or_an_automation_switch_cannot_be_allowed(world, scripted, tool, arguments):
    member = world.a.principal("owner")
    arguments = {k: (world.a.public.id if v is None else v) for k, v in arguments.items()}
    scripted.script.add([Call(tool, arguments)])
    proposed = send(member, "Do it")
    (card,) = calls_of(proposed.conversation_id)
    with pytest.raises(Forbidden, match="always asks"):
        allow(member, card.id)
    db.session.refresh(card)
    assert card.status == "PROPOSED"
    assert db.session.scalars(select(Allowance)).all() == []


def test_an_always_confirm_tool_cannot_be_allowed(world, scripted):
    db.session.get(Org, world.a.org.id).chat_always_confirm = ["records_update"]
    db.session.commit()
    member = world.a.principal("member")
    scripted.script.add([update_call(world, "doing")])
    proposed = send(member, "Start it")
    (card,) = calls_of(proposed.conversation_id)
    with pytest.raises(Forbidden, match="always ask"):
        allow(member, card.id)
    assert db.session.scalars(select(Allowance)).all() == []
