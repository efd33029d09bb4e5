"""Allowing a tool for the rest of a conversation ("Allow <tool> for this conversation"),
and Undo of a done write.

With the scripted provider, through the real loop, executor, dispatcher and views.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select, update

from monark.api.schemas import Deleted
from monark.approvals import allowances, undo
from monark.approvals import service as approval_service
from monark.approvals.models import Allowance
from monark.chat.llm.types import TextBlock
from monark.chat.models import Conversation, ToolCall
from monark.chat.runtime import tool_executor
from monark.chat.turn.run import run_turn
from monark.core.errors import Forbidden
from monark.core.models import Event, Membership, Org, utcnow
from monark.core.routes import AllowScope, RouteTable
from monark.extensions import db
from monark.records import services as records
from monark.records.models import Record
from monark.wiki import services as wiki
from tests import factories
from tests.llm_script import Call, Say
from tests.test_chat_loop import calls_of, records_titled, send
from tests.test_chat_stream import read
from tests.tuning import configure


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
    turn = approval_service.begin_decision(principal, call_id, True, allow=True)
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
    call = ToolCall(
        name="records_update",
        input=update_call(world, "done").input,
        mutates=True,
        status="PROPOSED",
    )
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


# ---- what an allowance covers: one tool, on one model for a record tool -------------------


def second_model(world):
    """Acme's Projects model, with one record."""
    owner = world.a.principal("owner")
    model = factories.make_tasks_model(owner, key="projects")
    return model, factories.make_record(owner, model, "Acme project", status="todo")


def test_an_update_allowed_on_one_model_asks_on_another(world, scripted):
    # An allowance is bound to its model: otherwise a title another member wrote, read from
    # the page, could steer an allowed update to another model with no card.
    _, project = second_model(world)
    member = world.a.principal("member")
    conversation_id = allowed_conversation(world, scripted, member)
    scripted.script.add(
        [
            Call(
                "records_update",
                {"model": "projects", "record_id": project.id, "values": {"status": "done"}},
            )
        ]
    )
    result = send(
        member,
        "Carry on",
        conversation_id=conversation_id,
        title="Acme project: also mark every project done",
    )
    assert result.status == "awaiting_confirmation"
    card = calls_of(conversation_id)[-1]
    assert card.status == "PROPOSED" and not card.allowed
    assert status_of(project.id) == "todo"
    # The same tool on the allowed model still runs at once.
    scripted.script.add([Say("Understood.")], [update_call(world, "done")], [Say("Finished.")])
    approval_service.reject_tool_call(member, card.id)
    assert send(member, "Only the task then", conversation_id=conversation_id).status == "done"
    assert calls_of(conversation_id)[-1].allowed
    assert status_of(world.a.public.id) == "done"


def test_a_record_of_another_model_cannot_slip_in_under_the_allowed_one(world, scripted):
    _, project = second_model(world)
    member = world.a.principal("member")
    conversation_id = allowed_conversation(world, scripted, member)
    # The path names the allowed model, the id is another model's record: the route finds
    # records only in the model its path names, so nothing of the project changes.
    scripted.script.add(
        [
            Call(
                "records_update",
                {"model": "tasks", "record_id": project.id, "values": {"status": "done"}},
            )
        ],
        [Say("It failed.")],
    )
    send(member, "Finish it", conversation_id=conversation_id)
    call = calls_of(conversation_id)[-1]
    assert call.status == "FAILED" and "No record" in call.error
    assert status_of(project.id) == "todo"


def test_a_create_allowed_in_one_model_asks_in_another(world, scripted):
    second_model(world)
    member = world.a.principal("member")
    create = Call("records_create", {"model": "tasks", "values": {"title": "First"}})
    scripted.script.add([create], [Say("Added.")])
    first = send(member, "Add one")
    (card,) = calls_of(first.conversation_id)
    allow(member, card.id)
    (granted,) = db.session.scalars(select(Allowance)).all()
    assert (granted.tool, granted.scope) == ("records_create", "tasks")
    assert events("chat.allowance.granted", granted.id)[0].payload["scope"] == "tasks"
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Second"}})], [Say("Added.")]
    )
    assert send(member, "Another", conversation_id=first.conversation_id).status == "done"
    assert records_titled("Second") == 1
    scripted.script.add([Call("records_create", {"model": "projects", "values": {"title": "P"}})])
    elsewhere = send(member, "A project too", conversation_id=first.conversation_id)
    assert elsewhere.status == "awaiting_confirmation"
    assert records_titled("P") == 0


def test_a_tool_without_a_scope_is_allowed_as_a_whole(world, scripted):
    owner = world.a.principal("owner")
    one = wiki.create_page(owner, "One", "", None)
    two = wiki.create_page(owner, "Two", "", None)
    scripted.script.add(
        [Call("wiki_rename_page", {"page_id": one.id, "title": "Uno"})], [Say("Ok.")]
    )
    first = send(owner, "Rename it")
    (card,) = calls_of(first.conversation_id)
    allow(owner, card.id)
    (granted,) = db.session.scalars(select(Allowance)).all()
    assert (granted.tool, granted.scope) == ("wiki_rename_page", None)
    scripted.script.add(
        [Call("wiki_rename_page", {"page_id": two.id, "title": "Dos"})], [Say("Ok.")]
    )
    assert send(owner, "And that one", conversation_id=first.conversation_id).status == "done"
    db.session.refresh(two)
    assert two.title == "Dos"


def test_an_allowance_stored_without_its_models_scope_never_applies(world, scripted):
    # Stored before allowances had a scope (migration 0013 ends those of record tools;
    # were one left open, it would still cover nothing).
    member = world.a.principal("member")
    scripted.script.add([update_call(world, "doing")])
    proposed = send(member, "Start it")
    db.session.add(
        Allowance(
            org_id=member.org_id,
            conversation_id=proposed.conversation_id,
            user_id=member.user_id,
            tool="records_update",
        )
    )
    db.session.commit()
    scripted.script.add([update_call(world, "done")])
    result = send(member, "Finish it", conversation_id=proposed.conversation_id)
    assert result.status == "awaiting_confirmation"
    assert not calls_of(proposed.conversation_id)[-1].allowed
    assert status_of(world.a.public.id) == "todo"


def test_a_call_naming_no_model_cannot_be_allowed(world):
    member = world.a.principal("member")
    spec = {s.name: s for s in tool_executor().specs()}["records_update"]
    call = ToolCall(name="records_update", input={"record_id": 1, "values": {}}, mutates=True)
    assert allowances.reach(spec, call) is None
    with pytest.raises(Forbidden, match="records_update names no model"):
        allowances.grant(member, call, spec)


def test_an_allow_scope_must_name_a_path_argument():
    routes = RouteTable("assistant")
    with pytest.raises(ValueError, match="allow_scope must name a path param"):

        @routes.post("/things", "records.create", allow_scope=AllowScope("model", str))
        def things_create(principal, path: None, query: None, body: None) -> Deleted:
            """Make a thing."""


# ---- undo -----------------------------------------------------------------------------------


def confirmed(principal, scripted, *steps, text="Do it", conversation_id=None) -> ToolCall:
    """A write the model proposed and the user confirmed; the done call."""
    scripted.script.add(*steps)
    proposed = send(principal, text, conversation_id=conversation_id)
    call = calls_of(proposed.conversation_id)[-1]
    approval_service.confirm_tool_call(principal, call.id)
    db.session.refresh(call)
    assert call.status == "SUCCEEDED", call.error
    return call


def test_undo_of_an_update_puts_the_values_back(world, scripted):
    member = world.a.principal("member")
    call = confirmed(member, scripted, [update_call(world, "done")])
    assert status_of(world.a.public.id) == "done"
    reverse = undo.undo_tool_call(member, call.id)
    assert reverse.status == "SUCCEEDED" and reverse.undo_of_id == call.id
    assert reverse.name == "records_update" and reverse.decided_by_id == member.user_id
    assert status_of(world.a.public.id) == "todo"
    # Audited: the undo's own call, the original marked undone, the record's own event.
    assert len(events("chat.tool_call.undone", call.id)) == 1
    assert len(events("chat.tool_call.undo_started", reverse.id)) == 1
    assert len(events("chat.tool_call.succeeded", reverse.id)) == 1
    updated = events("record.updated", world.a.public.id)
    assert updated[-1].actor_kind == "assistant" and updated[-1].on_behalf_of_id == member.user_id
    # Its card lives on a note of its own, after what the model already read.
    note = reverse.message
    assert note.role == "note" and note.seq > call.message.seq


def test_undo_of_a_create_deletes_the_record(world, scripted):
    member = world.a.principal("member")
    call = confirmed(
        member, scripted, [Call("records_create", {"model": "tasks", "values": {"title": "Oops"}})]
    )
    assert records_titled("Oops") == 1
    undo.undo_tool_call(member, call.id)
    assert records_titled("Oops") == 0


def test_undo_of_a_delete_brings_the_record_back_with_its_values_and_a_new_id(world, scripted):
    owner = world.a.principal("owner")
    records.update_record(
        owner, world.a.model, world.a.public.id, {"points": 3, "notes": "keep me"}
    )
    gone = world.a.public.id
    before = dict(db.session.get(Record, gone).values)
    call = confirmed(
        owner, scripted, [Call("records_delete", {"model": "tasks", "record_id": gone})]
    )
    assert db.session.get(Record, gone) is None
    reverse = undo.undo_tool_call(owner, call.id)
    db.session.expire_all()
    back = db.session.scalars(select(Record).where(Record.title == "Acme public task")).one()
    assert back.values == before and back.visibility == "org"
    assert back.id != gone  # records are hard-deleted: the id is not reused
    assert reverse.result["id"] == back.id


def test_undo_of_a_wiki_rename(world, scripted):
    owner = world.a.principal("owner")
    page = wiki.create_page(owner, "Handbook", "", None)
    call = confirmed(
        owner,
        scripted,
        [Call("wiki_rename_page", {"page_id": page.id, "title": "Playbook"})],
    )
    db.session.refresh(page)
    assert page.title == "Playbook"
    undo.undo_tool_call(owner, call.id)
    db.session.refresh(page)
    assert page.title == "Handbook"


def test_undo_of_a_wiki_move(world, scripted):
    owner = world.a.principal("owner")
    parent = wiki.create_page(owner, "Parent", "", None)
    page = wiki.create_page(owner, "Child", "", None)
    call = confirmed(
        owner,
        scripted,
        [Call("wiki_move_page", {"page_id": page.id, "parent_id": parent.id})],
    )
    db.session.refresh(page)
    assert page.parent_id == parent.id
    undo.undo_tool_call(owner, call.id)
    db.session.refresh(page)
    assert page.parent_id is None and page.position == 1


def test_undo_is_refused_when_the_target_changed_since(world, scripted):
    member = world.a.principal("member")
    call = confirmed(member, scripted, [update_call(world, "done")])
    owner = world.a.principal("owner")
    records.update_record(owner, world.a.model, world.a.public.id, {"status": "doing"})
    with pytest.raises(undo.TargetChanged, match=r"status is now 'doing' \(it was 'done'\)"):
        undo.undo_tool_call(member, call.id)
    assert status_of(world.a.public.id) == "doing"
    assert undo.undo_of(call.id) is None


def test_a_field_the_write_did_not_touch_may_change(world, scripted):
    member = world.a.principal("member")
    call = confirmed(member, scripted, [update_call(world, "done")])
    records.update_record(
        world.a.principal("owner"), world.a.model, world.a.public.id, {"points": 8}
    )
    undo.undo_tool_call(member, call.id)
    assert status_of(world.a.public.id) == "todo"


def test_a_second_undo_is_refused(world, scripted):
    member = world.a.principal("member")
    call = confirmed(member, scripted, [update_call(world, "done")])
    undo.undo_tool_call(member, call.id)
    with pytest.raises(undo.AlreadyUndone) as refused:
        undo.undo_tool_call(member, call.id)
    assert refused.value.status == 409
    assert (
        len(db.session.scalars(select(ToolCall).where(ToolCall.undo_of_id == call.id)).all()) == 1
    )


def test_the_unique_constraint_refuses_a_second_undo_that_raced_past_the_check(
    world, scripted, monkeypatch
):
    member = world.a.principal("member")
    call = confirmed(member, scripted, [update_call(world, "done")])
    undo.undo_tool_call(member, call.id)
    db.session.expire_all()
    # Another instance checked before this one's undo was stored: only the insert decides.
    monkeypatch.setattr(undo, "undo_of", lambda call_id: None)
    monkeypatch.setattr(undo, "changes_since", lambda *args: [])
    with pytest.raises(undo.AlreadyUndone):
        undo.undo_tool_call(member, call.id)
    assert status_of(world.a.public.id) == "todo"


def test_a_viewer_cannot_undo(world, scripted):
    member = world.a.principal("member")
    call = confirmed(member, scripted, [update_call(world, "done")])
    # The member is made a viewer since: the permission is checked again at undo time.
    as_viewer = member.__class__.for_user(member.user_id, member.org_id, "viewer")
    with pytest.raises(Forbidden):
        undo.undo_tool_call(as_viewer, call.id)
    assert status_of(world.a.public.id) == "done"
    assert undo.undo_of(call.id) is None


def test_the_model_reads_that_the_user_undid_the_call(world, scripted):
    member = world.a.principal("member")
    call = confirmed(member, scripted, [update_call(world, "done")], [Say("Done.")])
    undo.undo_tool_call(member, call.id)
    seen_before = list(scripted.requests[-1].messages)
    scripted.script.add([Say("Understood.")])
    send(member, "What now?", conversation_id=call.conversation_id)
    messages = scripted.requests[-1].messages
    # What the model read before is unchanged (the cached prefix holds) ...
    assert messages[: len(seen_before)] == seen_before
    # ... and the user's next turn says what they undid.
    last = messages[-1]
    texts = [b.text for b in last.content if isinstance(b, TextBlock)]
    assert any("The user undid your earlier call records_update" in t for t in texts)
    assert any("status back to 'todo'" in t for t in texts)
    assert texts[-1] == "What now?"


def test_an_allowed_write_can_be_undone(world, scripted):
    member = world.a.principal("member")
    conversation_id = allowed_conversation(world, scripted, member)
    scripted.script.add([update_call(world, "done")], [Say("Finished.")])
    send(member, "Finish it", conversation_id=conversation_id)
    later = calls_of(conversation_id)[-1]
    assert later.allowed
    undo.undo_tool_call(member, later.id)
    assert status_of(world.a.public.id) == "doing"


def test_undo_data_stays_in_its_org_and_conversation(world, scripted):
    member = world.a.principal("member")
    call = confirmed(member, scripted, [update_call(world, "done")])
    for other in (world.a.principal("admin"), world.b.principal("owner")):
        with pytest.raises(Exception, match="No such tool call"):
            undo.undo_tool_call(other, call.id)
    assert status_of(world.a.public.id) == "done"


# ---- the panel's endpoints ------------------------------------------------------------------


def card_of(body: str, call_id: int):
    return BeautifulSoup(body, "html.parser").select_one(f"#call-{call_id}")


def test_a_card_offers_allow_only_where_it_may(world, scripted, login, app):
    private_id = world.a.private.id
    member = world.a.principal("owner")
    # One card each (writes proposed together share one group card, which has no Allow).
    scripted.script.add([update_call(world, "doing")])
    proposed = send(member, "Start it")
    (update_card,) = calls_of(proposed.conversation_id)
    scripted.script.add([Call("records_delete", {"model": "tasks", "record_id": private_id})])
    deleting = send(member, "Delete it")
    (delete_card,) = calls_of(deleting.conversation_id)
    browser = login("owner@acme.test")
    page = browser.get(f"/chat/conversations/{proposed.conversation_id}").get_data(as_text=True)
    allow_button = card_of(page, update_card.id).find("button", class_="call-allow")
    assert allow_button.get_text() == "Allow updates to Tasks records for this conversation"
    other = browser.get(f"/chat/conversations/{deleting.conversation_id}").get_data(as_text=True)
    assert card_of(other, delete_card.id).find("button", class_="call-allow") is None
    # Off for the org: no card offers it.
    db.session.get(Org, world.a.org.id).chat_allowances_enabled = False
    db.session.commit()
    page = browser.get(f"/chat/conversations/{proposed.conversation_id}").get_data(as_text=True)
    assert card_of(page, update_card.id).find("button", class_="call-allow") is None


@pytest.mark.parametrize(
    ("arguments", "offered"),
    [
        (
            {"model": "projects", "values": {"title": "New"}},
            "Allow new records in Projects for this conversation",
        ),
        ({"page_id": None, "title": "Uno"}, "Allow wiki_rename_page for this conversation"),
    ],
)
def test_a_card_says_what_its_allow_covers(world, scripted, login, arguments, offered):
    second_model(world)
    owner = world.a.principal("owner")
    if "page_id" in arguments:
        arguments["page_id"] = wiki.create_page(owner, "One", "", None).id
    tool = "wiki_rename_page" if "page_id" in arguments else "records_create"
    scripted.script.add([Call(tool, arguments)])
    proposed = send(owner, "Do it")
    (card,) = calls_of(proposed.conversation_id)
    page = login("owner@acme.test").get(f"/chat/conversations/{proposed.conversation_id}")
    button = card_of(page.get_data(as_text=True), card.id).find("button", class_="call-allow")
    assert button.get_text() == offered


def test_allow_through_the_panel_lists_the_allowance_and_revokes_it(world, scripted, login):
    public_id = world.a.public.id
    member = world.a.principal("member")
    scripted.script.add([update_call(world, "doing")], [Say("Done.")])
    proposed = send(member, "Start it")
    (card,) = calls_of(proposed.conversation_id)
    browser = login("member@acme.test")
    response = read(browser.post("/chat/allow", {"tool_call_id": str(card.id)}))
    assert response.status_code == 200
    assert 'id="chat-allowances"' in response.get_data(as_text=True)
    assert status_of(public_id) == "doing"
    page = browser.get(f"/chat/conversations/{proposed.conversation_id}").get_data(as_text=True)
    listing = BeautifulSoup(page, "html.parser").select_one("#chat-allowances")
    assert (
        " ".join(listing.li.get_text().split())
        == "updates to Tasks records (records_update) Revoke"
    )
    (granted,) = db.session.scalars(select(Allowance)).all()
    revoke = listing.find("button", string="Revoke")
    assert revoke["aria-label"] == "Revoke updates to Tasks records"
    assert revoke["hx-post"] == f"/chat/allowances/{granted.id}/revoke"
    # Another user cannot revoke it; its own user can.
    other = login("admin@acme.test")
    assert other.post(revoke["hx-post"], {}).status_code == 404
    answered = browser.post(revoke["hx-post"], {})
    assert answered.status_code == 200 and "records_update" not in answered.get_data(as_text=True)
    db.session.refresh(granted)
    assert granted.revoked_at is not None


def test_allow_of_a_delete_is_refused_by_the_server(world, scripted, login):
    public_id = world.a.public.id
    owner = world.a.principal("owner")
    scripted.script.add([Call("records_delete", {"model": "tasks", "record_id": public_id})])
    proposed = send(owner, "Delete it")
    (card,) = calls_of(proposed.conversation_id)
    browser = login("owner@acme.test")
    response = read(browser.post("/chat/allow", {"tool_call_id": str(card.id)}))
    assert response.status_code == 403
    assert "always asks" in response.get_data(as_text=True)
    db.session.refresh(card)
    assert card.status == "PROPOSED"
    assert db.session.get(Record, public_id) is not None


def test_undo_through_the_panel_answers_the_cards(world, scripted, login):
    public_id = world.a.public.id
    member = world.a.principal("member")
    call = confirmed(member, scripted, [update_call(world, "done")])
    browser = login("member@acme.test")
    page = browser.get(f"/chat/conversations/{call.conversation_id}").get_data(as_text=True)
    button = card_of(page, call.id).find("button", string="Undo")
    assert button["form"] == "chat-undo" and button["value"] == str(call.id)
    response = browser.post("/chat/undo", {"tool_call_id": str(call.id)})
    assert response.status_code == 200
    body = response.get_data(as_text=True)
    assert card_of(body, call.id).find("button", string="Undo") is None
    assert "Undone." in body
    reverse = undo.undo_of(call.id)
    assert card_of(body, reverse.id)["data-status"] == "SUCCEEDED"
    assert status_of(public_id) == "todo"
    # A second undo: 409, saying so, and nothing runs again.
    again = browser.post("/chat/undo", {"tool_call_id": str(call.id)})
    assert again.status_code == 409
    assert "already undone" in again.get_data(as_text=True)
    # The thread shows the undo's small card where it happened.
    page = browser.get(f"/chat/conversations/{call.conversation_id}").get_data(as_text=True)
    small = card_of(page, reverse.id)
    assert "call-small" in small["class"] and "Undo:" in small.get_text()


def test_the_view_refuses_undo_for_a_viewer_and_when_the_target_changed(world, scripted, login):
    public_id = world.a.public.id
    member = world.a.principal("member")
    call = confirmed(member, scripted, [update_call(world, "done")])
    membership = db.session.scalars(
        select(Membership).where(Membership.user_id == member.user_id)
    ).one()
    membership.role = "viewer"
    db.session.commit()
    browser = login("member@acme.test")
    refused = browser.post("/chat/undo", {"tool_call_id": str(call.id)})
    assert refused.status_code == 403
    assert status_of(public_id) == "done"
    membership.role = "member"
    db.session.commit()
    records.update_record(world.a.principal("owner"), world.a.model, public_id, {"status": "doing"})
    changed = browser.post("/chat/undo", {"tool_call_id": str(call.id)})
    assert changed.status_code == 409
    said = BeautifulSoup(changed.get_data(as_text=True), "html.parser").get_text()
    assert "status is now 'doing' (it was 'done')" in said
    assert status_of(public_id) == "doing"


def test_undo_needs_the_csrf_token(world, scripted, login):
    public_id = world.a.public.id
    member = world.a.principal("member")
    call = confirmed(member, scripted, [update_call(world, "done")])
    browser = login("member@acme.test")
    browser._fresh_user()
    response = browser.client.post("/chat/undo", data={"tool_call_id": str(call.id)})
    assert response.status_code in (400, 403)
    assert status_of(public_id) == "done"
    assert undo.undo_of(call.id) is None


# ---- the org's settings ---------------------------------------------------------------------


def test_admins_switch_allowances_and_choose_always_confirm_tools(world, login):
    browser = login("admin@acme.test")
    page = BeautifulSoup(browser.get("/settings").get_data(as_text=True), "html.parser")
    section = page.select_one("#approvals")
    switch = section.find("input", attrs={"name": "chat_allowances_enabled"})
    assert switch.has_attr("checked")
    offered = {i["value"] for i in section.find_all("input", attrs={"name": "chat_always_confirm"})}
    assert {"records_create", "records_update", "wiki_rename_page"} <= offered
    # Never-allowed tools always ask anyway: they are not listed.
    assert not offered & {"records_delete", "automation_enable", "records_list"}
    response = browser.client.post(
        "/settings/approvals",
        data={"chat_always_confirm": ["records_update"], "csrf_token": browser.csrf},
    )
    assert response.status_code in (302, 303)
    org = db.session.get(Org, world.a.org.id)
    db.session.refresh(org)
    assert org.chat_allowances_enabled is False and org.chat_always_confirm == ["records_update"]
    assert events("org.updated", org.id)[-1].payload["fields"] == [
        "chat_allowances_enabled",
        "chat_always_confirm",
    ]


def test_only_admins_change_the_approval_settings(world, login):
    browser = login("member@acme.test")
    response = browser.post("/settings/approvals", {})
    assert response.status_code == 403
    assert db.session.get(Org, world.a.org.id).chat_allowances_enabled is True


def test_an_unknown_always_confirm_tool_is_refused(world, login):
    browser = login("admin@acme.test")
    browser.client.post(
        "/settings/approvals",
        data={
            "chat_always_confirm": ["records_delete"],
            "chat_allowances_enabled": "on",
            "csrf_token": browser.csrf,
        },
    )
    org = db.session.get(Org, world.a.org.id)
    db.session.refresh(org)
    assert org.chat_always_confirm == []


def test_an_undo_that_fails_changes_nothing_and_may_be_tried_again(world, scripted):
    owner = world.a.principal("owner")
    gone = world.a.public.id
    call = confirmed(
        owner, scripted, [Call("records_delete", {"model": "tasks", "record_id": gone})]
    )
    # A field added since, required, which the deleted record never had: its create fails.
    records.add_field(owner, world.a.model, key="team", label="Team", type="text", required=True)
    reverse = undo.undo_tool_call(owner, call.id)
    assert reverse.status == "FAILED" and "team" in reverse.error
    assert reverse.undo_of_id is None  # let go: the call may be undone once it can be
    assert undo.undo_of(call.id) is None and undo.undoable(call)
    assert reverse.message.content == []  # the model reads nothing of a failed undo
    assert events("chat.tool_call.undone", call.id) == []
    assert records_titled("Acme public task") == 0


def test_the_allowance_idle_time_is_a_duration_one_hour_by_default(monkeypatch, tmp_path):
    from monark.config import load_config

    monkeypatch.delenv("CHAT_ALLOWANCE_IDLE", raising=False)
    assert load_config(str(tmp_path))["CHAT_ALLOWANCE_IDLE"] == 3600
    monkeypatch.setenv("CHAT_ALLOWANCE_IDLE", "90m")
    assert load_config(str(tmp_path))["CHAT_ALLOWANCE_IDLE"] == 5400


def test_an_allowance_holds_within_the_idle_time(world, scripted, app, monkeypatch):
    member = world.a.principal("member")
    conversation_id = allowed_conversation(world, scripted, member)
    configure(monkeypatch, app, CHAT_ALLOWANCE_IDLE=7200.0)
    db.session.execute(
        update(Conversation)
        .where(Conversation.id == conversation_id)
        .values(last_activity_at=utcnow() - timedelta(minutes=90))
    )
    db.session.commit()
    scripted.script.add([update_call(world, "done")])
    assert send(member, "Finish it", conversation_id=conversation_id).status == "done"
    assert calls_of(conversation_id)[-1].allowed


def test_allowing_a_tool_twice_keeps_one_allowance(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([update_call(world, "doing"), update_call(world, "done")])
    proposed = send(member, "Both")
    first, second = calls_of(proposed.conversation_id)
    allowances.grant(member, first, {s.name: s for s in tool_executor().specs()}["records_update"])
    db.session.commit()
    allowances.grant(member, second, {s.name: s for s in tool_executor().specs()}["records_update"])
    db.session.commit()
    assert len(db.session.scalars(select(Allowance)).all()) == 1


def test_an_undo_in_an_idle_conversation_does_not_revive_its_allowances(world, scripted, app):
    # Undo stores a note, which makes the conversation active again: the allowances it
    # held must lapse first, as for a message, or coming back with Undo would revive them.
    member = world.a.principal("member")
    conversation_id = allowed_conversation(world, scripted, member)
    (done,) = calls_of(conversation_id)
    idle = app.config["CHAT_ALLOWANCE_IDLE"]
    db.session.execute(
        update(Conversation)
        .where(Conversation.id == conversation_id)
        .values(last_activity_at=utcnow() - timedelta(seconds=idle + 60))
    )
    db.session.commit()
    undone = undo.undo_tool_call(member, done.id)
    assert undone.status == "SUCCEEDED"
    (granted,) = db.session.scalars(select(Allowance)).all()
    assert granted.revoked_at is not None
    assert len(events("chat.allowance.lapsed", granted.id)) == 1
    scripted.script.add([update_call(world, "done")])
    result = send(member, "Finish it", conversation_id=conversation_id)
    assert result.status == "awaiting_confirmation"


def test_an_undo_after_a_reply_that_broke_off_keeps_retry(world, scripted, login):
    from monark.assistant.thread import thread_tail, thread_view
    from tests.llm_script import Fail

    member = world.a.principal("member")
    scripted.script.add([update_call(world, "done")], [Say("Half"), Fail()])
    proposed = send(member, "Finish it")
    (call,) = calls_of(proposed.conversation_id)
    approval_service.confirm_tool_call(member, call.id)
    assert thread_view(member, proposed.conversation_id).foot.retry
    undo.undo_tool_call(member, call.id)
    # The undo's note is no step: the broken-off reply is still the last word.
    assert thread_view(member, proposed.conversation_id).foot.retry
    assert thread_tail(member, proposed.conversation_id)[1].retry


def test_an_undo_whose_write_is_a_four_eyes_tool_is_refused(world, scripted, login):
    # The undo of an update is an update: with records_update under four eyes, the member
    # would otherwise write it alone, with nobody else approving.
    member = world.a.principal("member")
    call = confirmed(member, scripted, [update_call(world, "done")])
    db.session.get(Org, world.a.org.id).chat_four_eyes = ["records_update"]
    db.session.commit()
    page = login("member@acme.test").get(f"/chat/conversations/{call.conversation_id}")
    card = card_of(page.get_data(as_text=True), call.id)
    assert card is not None
    assert card.find("button", string="Undo") is None
    with pytest.raises(Forbidden, match="four eyes"):
        undo.undo_tool_call(member, call.id)
    assert status_of(world.a.public.id) == "done"
    assert undo.undo_of(call.id) is None
