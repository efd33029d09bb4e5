"""Editing a proposed write before deciding, and one decision on the several writes a
step proposed: a form typed by the tool's schema, the route's own checks, locked targets;
confirm selected / reject all, each write on its own, and a step budget that starts again
after every decision."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.chat.llm.types import ToolResultBlock, ToolUseBlock
from monark.chat.models import Message, ToolCall
from monark.core.models import Event
from monark.extensions import db
from monark.records.models import Record
from tests.factories import make_record
from tests.llm_script import Call, Say
from tests.test_chat_loop import calls_of, records_titled, send
from tests.test_chat_stream import read
from tests.tuning import configure


def html(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def propose(scripted, principal, *calls: Call, text: str = "Do it"):
    """The conversation and its stored calls, as plain ids (requests end the session)."""
    scripted.script.add(list(calls))
    proposed = send(principal, text)
    stored = calls_of(proposed.conversation_id)
    return proposed.conversation_id, [
        SimpleNamespace(id=c.id, message_id=c.message_id, conversation_id=c.conversation_id)
        for c in stored
    ]


def now(call) -> ToolCall:
    """The call as stored now."""
    db.session.expire_all()
    return db.session.get(ToolCall, call.id)


def update_call(world, **values) -> Call:
    return Call(
        "records_update", {"model": "tasks", "record_id": world.a.public.id, "values": values}
    )


def status_of(record_id: int) -> str | None:
    db.session.expire_all()
    return db.session.get(Record, record_id).values.get("status")


def event_count(kind: str, call_id: int) -> int:
    return db.session.scalar(
        select(func.count()).where(Event.type == kind, Event.subject_id == call_id)
    )


# ---- Edit ------------------------------------------------------------------------------------


def test_the_edit_form_is_typed_by_the_models_fields(world, scripted, login):
    member = world.a.principal("member")
    _, (call,) = propose(
        scripted, member, Call("records_create", {"model": "tasks", "values": {"title": "Draft"}})
    )
    form = html(login("member@acme.test").get(f"/chat/calls/{call.id}/edit"))
    status = form.select_one('select[name="arg.values.status"]')
    assert [o["value"] for o in status.select("option")] == ["", "todo", "doing", "done"]
    assert form.select_one('input[name="arg.values.due"]')["type"] == "date"
    assert form.select_one('input[name="arg.values.points"]')["type"] == "number"
    assert form.select_one('textarea[name="arg.values.notes"]') is not None
    title = form.select_one('input[name="arg.values.title"]')
    assert title["value"] == "Draft" and title.has_attr("required")
    assignee = form.select_one('select[name="arg.values.assignee"]')
    assert "Acme Member" in assignee.get_text()
    urgent = form.select_one('select[name="arg.values.urgent"]')
    assert [o.get_text() for o in urgent.select("option")] == ["—", "Yes", "No"]
    # The model the record goes into is not on the form: it names the target.
    assert form.select_one('[name="arg.model"]') is None


def test_a_saved_edit_redraws_the_card_and_confirm_runs_exactly_that(world, scripted, login):
    member, record_id = world.a.principal("member"), world.a.public.id
    conversation_id, (call,) = propose(scripted, member, update_call(world, status="done"))
    browser = login("member@acme.test")
    saved = browser.post(
        f"/chat/calls/{call.id}/edit", {"arg.values.status": "doing", "arg.values.points": "5"}
    )
    assert saved.status_code == 200
    card = html(saved).select_one(f"#call-{call.id}")
    assert card["data-status"] == "PROPOSED"
    assert "Edited by Acme Member" in card.get_text()
    afters = [a.get_text() for a in card.select(".after")]
    assert afters == ["doing", "5"]
    call = now(call)
    assert call.input["values"] == {"status": "doing", "points": 5}
    assert call.original_input["values"] == {"status": "done"}
    assert call.edited_by_id == world.a.users["member"].id
    assert event_count("chat.tool_call.edited", call.id) == 1
    (edited,) = db.session.scalars(
        select(Event).where(Event.type == "chat.tool_call.edited", Event.subject_id == call.id)
    )
    assert sorted(edited.payload["fields"]) == ["values.points", "values.status"]
    scripted.script.add([Say("Done as you changed it.")])
    read(browser.post("/chat/decide", {"decision": f"confirm:{call.id}"}))
    assert status_of(record_id) == "doing"
    # The model sees what it asked for, and reads in the result what the user changed.
    request = scripted.requests[-1].messages
    (use,) = [b for b in request[-2].content if isinstance(b, ToolUseBlock)]
    assert use.input["values"] == {"status": "done"}
    (result,) = [b for b in request[-1].content if isinstance(b, ToolResultBlock)]
    assert "edited your arguments" in result.content and "values.status" in result.content
    assert conversation_id


def test_an_edit_never_moves_the_write_to_another_record(world, scripted, login):
    member, record_id = world.a.principal("member"), world.a.public.id
    other = make_record(world.a.principal("owner"), world.a.model, "Another task", status="todo")
    db.session.commit()
    _, (call,) = propose(scripted, member, update_call(world, status="done"))
    browser = login("member@acme.test")
    browser.post(
        f"/chat/calls/{call.id}/edit",
        {
            "arg.values.status": "doing",
            "arg.record_id": str(other.id),
            "arg.model": "other",
        },
    )
    call = now(call)
    assert call.input["record_id"] == record_id and call.input["model"] == "tasks"
    assert call.input["values"] == {"status": "doing"}


def test_an_edit_the_fields_refuse_names_the_field_and_stores_nothing(world, scripted, login):
    member = world.a.principal("member")
    _, (call,) = propose(
        scripted, member, Call("records_create", {"model": "tasks", "values": {"title": "Draft"}})
    )
    browser = login("member@acme.test")
    typed = browser.post(
        f"/chat/calls/{call.id}/edit",
        {"arg.values.title": "", "arg.values.points": "lots", "arg.values.status": "todo"},
    )
    assert typed.status_code == 422
    form = html(typed)
    errors = {e["id"]: e.get_text() for e in form.select(".field-error")}
    assert errors == {
        f"edit-{call.id}-values-title-error": "Title is required.",
        f"edit-{call.id}-values-points-error": "Points must be a number.",
    }
    # What was typed stays on the form.
    assert form.select_one('input[name="arg.values.points"]')["value"] == "lots"
    # A value only the model's fields refuse (the service's own check) names the field too.
    too_long = browser.post(
        f"/chat/calls/{call.id}/edit", {"arg.values.title": "x" * 1001, "arg.visibility": "org"}
    )
    assert too_long.status_code == 422
    assert (
        "at most 1000 characters"
        in html(too_long).select_one(f"#edit-{call.id}-values-title-error").get_text()
    )
    call = now(call)
    assert call.input["values"] == {"title": "Draft"} and call.original_input is None
    assert event_count("chat.tool_call.edited", call.id) == 0


def test_a_decided_call_cannot_be_edited(world, scripted, login):
    member = world.a.principal("member")
    _, (call,) = propose(scripted, member, update_call(world, status="done"))
    browser = login("member@acme.test")
    read(browser.post("/chat/decide", {"decision": f"reject:{call.id}"}))
    refused = browser.post(f"/chat/calls/{call.id}/edit", {"arg.values.status": "doing"})
    assert refused.status_code == 409
    call = now(call)
    assert call.input["values"] == {"status": "done"} and call.status == "REJECTED"


def test_another_users_call_is_not_found_for_editing(world, scripted, login):
    _, (call,) = propose(scripted, world.a.principal("member"), update_call(world, status="done"))
    stranger = login("admin@acme.test")
    assert stranger.get(f"/chat/calls/{call.id}/edit").status_code == 404
    assert stranger.post(f"/chat/calls/{call.id}/edit", {}).status_code == 404
    outsider = login("member@globex.test")
    assert outsider.get(f"/chat/calls/{call.id}").status_code == 404


def test_a_delete_has_nothing_to_edit(world, scripted, login):
    owner = world.a.principal("owner")
    _, (call,) = propose(
        scripted, owner, Call("records_delete", {"model": "tasks", "record_id": world.a.public.id})
    )
    browser = login("owner@acme.test")
    page = html(browser.get(f"/chat/conversations/{call.conversation_id}"))
    card = page.select_one(f"#call-{call.id}")
    assert card.find("button", string="Edit") is None
    assert browser.get(f"/chat/calls/{call.id}/edit").status_code == 409


# ---- Many writes, one decision ---------------------------------------------------------------


def creates(*titles: str) -> list[Call]:
    return [Call("records_create", {"model": "tasks", "values": {"title": t}}) for t in titles]


def test_a_step_of_several_writes_is_one_group_card(world, scripted, login):
    member = world.a.principal("member")
    conversation_id, calls = propose(scripted, member, *creates("One", "Two", "Three"))
    page = html(login("member@acme.test").get(f"/chat/conversations/{conversation_id}"))
    (group,) = page.select(".call-group")
    assert "Wants to make 3 changes" in group.get_text()
    boxes = group.select('input[type="checkbox"][name="selected"]')
    assert [int(b["value"]) for b in boxes] == [c.id for c in calls]
    assert all(b.has_attr("checked") for b in boxes)
    assert group.find("button", string="Confirm selected") is not None
    assert group.find("button", string="Reject all") is not None
    # No card of the group has its own Confirm: one decision covers them.
    assert group.find("button", string="Confirm") is None


def test_confirm_selected_runs_each_on_its_own_and_rejects_the_rest(world, scripted, login):
    member, owner = world.a.principal("member"), world.a.principal("owner")
    # The owner's private task is not the member's to change: that line fails on its own,
    # the others go through.
    hidden = make_record(owner, world.a.model, "Owner only", "private", status="todo").id
    db.session.commit()
    blocked = Call(
        "records_update", {"model": "tasks", "record_id": hidden, "values": {"status": "done"}}
    )
    conversation_id, calls = propose(scripted, member, *creates("One", "Two", "Skip me"), blocked)
    one, two, skip, refused = calls
    scripted.script.add([Say("Two added; the last one was refused.")])
    browser = login("member@acme.test")
    response = read(
        browser.post(
            "/chat/decide-group",
            {
                "decision": f"confirm:{one.message_id}",
                "selected": [str(one.id), str(two.id), str(refused.id)],
                f"reason_{one.message_id}": "Not that one",
            },
        )
    )
    assert response.status_code == 200
    one, two, skip, refused = calls = [now(c) for c in calls]
    assert (one.status, two.status, skip.status, refused.status) == (
        "SUCCEEDED",
        "SUCCEEDED",
        "REJECTED",
        "FAILED",
    )
    assert skip.reject_reason == "Not that one"
    assert refused.error == f"No record {hidden} in Tasks."
    assert (records_titled("One"), records_titled("Two"), records_titled("Skip me")) == (1, 1, 0)
    assert status_of(hidden) == "todo"
    for call in (one, two, refused):
        assert event_count("chat.tool_call.confirmed", call.id) == 1
    assert event_count("chat.tool_call.rejected", skip.id) == 1
    # One step after the decision, with every result, in order.
    results = [
        b for b in scripted.requests[-1].messages[-1].content if isinstance(b, ToolResultBlock)
    ]
    assert [r.is_error for r in results] == [False, False, True, True]
    last = db.session.scalars(
        select(Message).where(Message.conversation_id == conversation_id).order_by(Message.seq)
    ).all()[-1]
    assert last.text == "Two added; the last one was refused."


def test_reject_all_rejects_every_write_of_the_step(world, scripted, login):
    member = world.a.principal("member")
    _, calls = propose(scripted, member, *creates("One", "Two"))
    scripted.script.add([Say("None, then.")])
    browser = login("member@acme.test")
    read(
        browser.post(
            "/chat/decide-group",
            {
                "decision": f"reject:{calls[0].message_id}",
                "selected": [str(calls[0].id)],
            },
        )
    )
    calls = [now(c) for c in calls]
    assert [c.status for c in calls] == ["REJECTED", "REJECTED"]
    assert records_titled("One") == 0


def test_confirm_selected_with_nothing_selected_is_refused(world, scripted, login):
    _, calls = propose(scripted, world.a.principal("member"), *creates("One", "Two"))
    browser = login("member@acme.test")
    refused = browser.post("/chat/decide-group", {"decision": f"confirm:{calls[0].message_id}"})
    assert refused.status_code == 422
    assert "at least one" in refused.get_data(as_text=True)
    assert all(c.status == "PROPOSED" for c in calls_of(calls[0].conversation_id))


def test_a_second_group_decision_is_refused(world, scripted, login):
    _, calls = propose(scripted, world.a.principal("member"), *creates("One", "Two"))
    scripted.script.add([Say("Done.")])
    browser = login("member@acme.test")
    data = {
        "decision": f"confirm:{calls[0].message_id}",
        "selected": [str(c.id) for c in calls],
    }
    read(browser.post("/chat/decide-group", data))
    again = read(
        browser.post("/chat/decide-group", {**data, "decision": f"reject:{calls[0].message_id}"})
    )
    assert again.status_code == 409
    assert records_titled("One") == 1 and records_titled("Two") == 1


def test_another_users_group_is_not_found(world, scripted, login):
    _, calls = propose(scripted, world.a.principal("member"), *creates("One", "Two"))
    stranger = login("admin@acme.test")
    response = stranger.post(
        "/chat/decide-group",
        {
            "decision": f"confirm:{calls[0].message_id}",
            "selected": [str(calls[0].id)],
        },
    )
    assert response.status_code == 404
    assert records_titled("One") == 0


def test_forty_updates_on_a_filtered_page_are_one_card_and_one_click(app, world, scripted, login):
    owner, member = world.a.principal("owner"), world.a.principal("member")
    tasks = [make_record(owner, world.a.model, f"Done task {i}", status="doing") for i in range(40)]
    db.session.commit()
    task_ids = [t.id for t in tasks]
    updates = [
        Call("records_update", {"model": "tasks", "record_id": t, "values": {"status": "done"}})
        for t in task_ids
    ]
    conversation_id, calls = propose(scripted, member, *updates, text="Mark these 40 done")
    assert len(calls) == 40 and all(now(c).status == "PROPOSED" for c in calls)
    browser = login("member@acme.test")
    page = html(browser.get(f"/chat/conversations/{conversation_id}"))
    assert len(page.select(".call-group")) == 1
    scripted.script.add([Say("All 40 are done.")])
    read(
        browser.post(
            "/chat/decide-group",
            {
                "decision": f"confirm:{calls[0].message_id}",
                "selected": [str(c.id) for c in calls],
            },
        )
    )
    assert [status_of(t) for t in task_ids] == ["done"] * 40
    assert (
        db.session.scalar(
            select(func.count()).where(
                ToolCall.conversation_id == conversation_id, ToolCall.status == "SUCCEEDED"
            )
        )
        == 40
    )


def test_the_step_budget_starts_again_after_each_decision(app, world, scripted, monkeypatch):
    configure(monkeypatch, app, CHAT_MAX_STEPS=2)
    member = world.a.principal("member")
    scripted.script.add(
        [Call("records_list", {"model": "tasks"})],
        creates("First"),
    )
    proposed = send(member, "Add First")
    (_, first) = calls_of(proposed.conversation_id)
    assert proposed.status == "awaiting_confirmation"
    # After the confirm, two more steps are allowed: a read, then another write.
    scripted.script.add([Call("records_list", {"model": "tasks"})], creates("Second"))
    from monark.approvals import service as approval_service

    again = approval_service.confirm_tool_call(member, first.id)
    assert again.status == "awaiting_confirmation"
    second = calls_of(proposed.conversation_id)[-1]
    scripted.script.add([Say("Both added.")])
    done = approval_service.confirm_tool_call(member, second.id)
    assert done.status == "done"
    assert records_titled("First") == 1 and records_titled("Second") == 1
    notes = db.session.scalars(
        select(Message.text).where(
            Message.conversation_id == proposed.conversation_id, Message.role == "note"
        )
    ).all()
    assert notes == []


def test_confirm_selected_is_refused_while_a_line_of_the_group_is_being_edited(
    world, scripted, login
):
    # A line whose Edit form is open has no checkbox: Confirm selected must not read it as
    # unticked and reject it. The form says it is open, and the decision waits for it.
    _, calls = propose(scripted, world.a.principal("member"), *creates("One", "Two"))
    browser = login("member@acme.test")
    form = html(browser.get(f"/chat/calls/{calls[0].id}/edit"))
    marker = form.select_one('input[name="editing"]')
    assert marker["form"] == "chat-decide-group" and marker["value"] == str(calls[0].id)
    refused = browser.post(
        "/chat/decide-group",
        {
            "decision": f"confirm:{calls[0].message_id}",
            "selected": [str(calls[1].id)],
            "editing": [str(calls[0].id)],
        },
    )
    assert refused.status_code == 409
    assert "Save or cancel" in refused.get_data(as_text=True)
    assert [now(c).status for c in calls] == ["PROPOSED", "PROPOSED"]
    assert records_titled("Two") == 0
    # An edit open in another step's group does not hold this one back; Reject all needs
    # no finished edit.
    scripted.script.add([Say("None, then.")])
    read(
        browser.post(
            "/chat/decide-group",
            {"decision": f"reject:{calls[0].message_id}", "editing": [str(calls[0].id)]},
        )
    )
    assert [now(c).status for c in calls] == ["REJECTED", "REJECTED"]


def test_a_lone_cards_edit_form_carries_no_group_marker(world, scripted, login):
    _, (call,) = propose(scripted, world.a.principal("member"), update_call(world, status="done"))
    form = html(login("member@acme.test").get(f"/chat/calls/{call.id}/edit"))
    assert form.select_one('input[name="editing"]') is None


def test_two_open_edit_forms_never_share_a_control_id(world, scripted, login):
    # Two lines of a group edited at once are on one page: each label must name the
    # control of its own form (a shared id sends a click, and a screen reader, to the other).
    _, calls = propose(scripted, world.a.principal("member"), *creates("One", "Two"))
    browser = login("member@acme.test")
    page = html(browser.get(f"/chat/calls/{calls[0].id}/edit"))
    page.append(html(browser.get(f"/chat/calls/{calls[1].id}/edit")))
    ids = [e["id"] for e in page.select("[id]")]
    assert len(ids) == len(set(ids))
    for form in page.select("form.call-editing"):
        for label in form.select("label[for]"):
            assert form.select_one(f'[id="{label["for"]}"]') is not None, label


def test_the_model_reads_that_an_edited_call_it_was_refused_never_ran(world, scripted, login):
    # Edited, then rejected: the model learns what the user changed, never that the call
    # "used" those arguments (it did not run at all).
    record_id = world.a.public.id
    _, (call,) = propose(scripted, world.a.principal("member"), update_call(world, status="done"))
    browser = login("member@acme.test")
    browser.post(f"/chat/calls/{call.id}/edit", {"arg.values.status": "doing"})
    scripted.script.add([Say("Left as it was.")])
    read(browser.post("/chat/decide", {"decision": f"reject:{call.id}"}))
    (result,) = [
        b for b in scripted.requests[-1].messages[-1].content if isinstance(b, ToolResultBlock)
    ]
    assert "edited your arguments" in result.content and "values.status" in result.content
    assert "used these arguments" not in result.content
    assert "rejected this action" in result.content and result.is_error
    assert status_of(record_id) == "todo"


def test_a_control_left_at_its_default_is_no_change(world, scripted, login):
    # The create form shows the route's default visibility; saving it as shown adds no
    # argument the model did not give, and the model is not told it changed.
    _, (call,) = propose(
        scripted,
        world.a.principal("member"),
        Call("records_create", {"model": "tasks", "values": {"title": "Draft"}}),
    )
    browser = login("member@acme.test")
    form = html(browser.get(f"/chat/calls/{call.id}/edit"))
    shown = form.select_one('select[name="arg.visibility"] option[selected]')
    assert shown["value"] == "org"
    browser.post(
        f"/chat/calls/{call.id}/edit",
        {"arg.values.title": "Draft", "arg.values.status": "doing", "arg.visibility": "org"},
    )
    call = now(call)
    assert call.input == {"model": "tasks", "values": {"title": "Draft", "status": "doing"}}
    (edited,) = db.session.scalars(
        select(Event).where(Event.type == "chat.tool_call.edited", Event.subject_id == call.id)
    )
    assert edited.payload["fields"] == ["values.status"]
    # Choosing another visibility is a change, and so is keeping one the model gave.
    browser.post(
        f"/chat/calls/{call.id}/edit",
        {"arg.values.title": "Draft", "arg.values.status": "doing", "arg.visibility": "private"},
    )
    assert now(call).input["visibility"] == "private"


def shown_token(browser, conversation_id: int, call_id: int, form: str) -> dict[str, str]:
    """What the thread's card of ``call_id`` sends with a decision on ``form``: the
    arguments it shows, as a token."""
    page = html(browser.get(f"/chat/conversations/{conversation_id}"))
    (token,) = page.select(f'input[name="shown_{call_id}"][form="{form}"]')
    return {token["name"]: token["value"]}


def test_confirm_from_a_card_drawn_before_an_edit_elsewhere_runs_nothing(world, scripted, login):
    # Tab one shows the card as proposed; tab two edits it; Confirm in tab one must not run
    # the edit it never showed: the card is drawn again, to confirm again.
    record_id = world.a.public.id
    conversation_id, (call,) = propose(
        scripted, world.a.principal("member"), update_call(world, status="done")
    )
    tab_one, tab_two = login("member@acme.test"), login("member@acme.test")
    seen = shown_token(tab_one, conversation_id, call.id, "chat-decide")
    tab_two.post(f"/chat/calls/{call.id}/edit", {"arg.values.status": "doing"})
    stale = read(tab_one.post("/chat/decide", {"decision": f"confirm:{call.id}", **seen}))
    assert stale.status_code == 409
    assert "edited since" in stale.get_data(as_text=True)
    assert f'hx-target="#call-{call.id}"' in stale.get_data(as_text=True)
    assert now(call).status == "PROPOSED" and status_of(record_id) == "todo"
    # The same goes for Allow; the card as it is now confirms what it shows.
    allow = read(tab_one.post("/chat/allow", {"tool_call_id": str(call.id), **seen}))
    assert allow.status_code == 409 and now(call).status == "PROPOSED"
    fresh = shown_token(tab_one, conversation_id, call.id, "chat-decide")
    assert fresh != seen
    assert shown_token(tab_one, conversation_id, call.id, "chat-allow") == fresh
    scripted.script.add([Say("Set to doing.")])
    read(tab_one.post("/chat/decide", {"decision": f"confirm:{call.id}", **fresh}))
    assert status_of(record_id) == "doing"


def test_confirm_selected_from_a_group_drawn_before_an_edit_elsewhere_runs_nothing(
    world, scripted, login
):
    conversation_id, calls = propose(scripted, world.a.principal("member"), *creates("One", "Two"))
    tab_one, tab_two = login("member@acme.test"), login("member@acme.test")
    seen = {}
    for c in calls:
        seen |= shown_token(tab_one, conversation_id, c.id, "chat-decide-group")
    tab_two.post(f"/chat/calls/{calls[1].id}/edit", {"arg.values.title": "Renamed"})
    data = {
        "decision": f"confirm:{calls[0].message_id}",
        "selected": [str(c.id) for c in calls],
    }
    stale = read(tab_one.post("/chat/decide-group", {**data, **seen}))
    assert stale.status_code == 409
    assert [now(c).status for c in calls] == ["PROPOSED", "PROPOSED"]
    assert records_titled("One") == 0 and records_titled("Renamed") == 0
    fresh = {}
    for c in calls:
        fresh |= shown_token(tab_one, conversation_id, c.id, "chat-decide-group")
    scripted.script.add([Say("Both added.")])
    read(tab_one.post("/chat/decide-group", {**data, **fresh}))
    assert records_titled("One") == 1 and records_titled("Renamed") == 1


def test_each_checkbox_and_edit_of_a_group_is_described_by_its_own_write(world, scripted, login):
    # Forty boxes all named "Include this change" tell a screen reader nothing: each one
    # is described by the write it includes: its headline and its before → after.
    conversation_id, calls = propose(scripted, world.a.principal("member"), *creates("One", "Two"))
    page = html(login("member@acme.test").get(f"/chat/conversations/{conversation_id}"))
    boxes = page.select('.call-group input[type="checkbox"][name="selected"]')
    edits = page.select(".call-group .call-pick-row button")
    assert [e.get_text() for e in edits] == ["Edit", "Edit"]
    assert [e["aria-describedby"] for e in edits] == [b["aria-describedby"] for b in boxes]
    said = []
    for box, call in zip(boxes, calls, strict=True):
        parts = [page.select_one(f'[id="{i}"]') for i in box["aria-describedby"].split()]
        assert all(p.find_parent(class_="call")["id"] == f"call-{call.id}" for p in parts)
        said.append(" ".join(p.get_text(" ", strip=True) for p in parts))
    assert said == [
        "Wants to create a record in Tasks Title One",
        "Wants to create a record in Tasks Title Two",
    ]


@pytest.mark.parametrize("depth", [100_000, 500, 300])
def test_json_nested_too_deep_is_refused_beside_its_field(world, scripted, login, depth):
    # A JSON control (an automation's graph) took any nesting: deep enough, decoding it,
    # storing it or checking it blew the stack (a 500). It is refused, naming the field.
    from tests.test_in_app_tools import VALID

    _, (call,) = propose(
        scripted,
        world.a.principal("owner"),
        Call("automation_create", {"name": "Notes", "graph": VALID}),
    )
    browser = login("owner@acme.test")
    nested = "[" * depth + "]" * depth
    edit = {"arg.name": "Notes", "arg.graph": nested}
    refused = browser.post(f"/chat/calls/{call.id}/edit", edit)
    assert refused.status_code == 422
    error = html(refused).select_one(f"#edit-{call.id}-graph-error").get_text()
    assert "nested" in error
    assert now(call).input["graph"] == VALID and now(call).original_input is None


def test_an_edit_landing_between_the_checks_and_the_confirm_runs_nothing(
    app, world, scripted, monkeypatch
):
    # The other tab's edit commits after this Confirm checked the card and before it
    # decided: the decision must not then run the edit it never checked.
    import threading

    from monark.approvals import decision as decisions
    from monark.approvals import service as approval_service
    from monark.approvals.decision import shown_token

    record_id = world.a.public.id
    member = world.a.principal("member")
    _, (call,) = propose(scripted, member, update_call(world, status="done"))
    checked = decisions.redrawn_ids

    def edit_elsewhere() -> None:
        with app.app_context():
            approval_service.edit_tool_call(member, call.id, {"values": {"status": "doing"}})
            db.session.remove()

    def check_then_race(executor, principal, decided):
        changed = checked(executor, principal, decided)
        other = threading.Thread(target=edit_elsewhere)
        other.start()
        other.join()
        return changed

    monkeypatch.setattr(decisions, "redrawn_ids", check_then_race)
    shown = shown_token(now(call).input)
    with pytest.raises(decisions.ProposalChanged):
        approval_service.begin_decision(member, call.id, True, shown=shown)
    call = now(call)
    assert call.status == "PROPOSED" and call.input["values"] == {"status": "doing"}
    assert status_of(record_id) == "todo"


@pytest.mark.parametrize("typed", ["1_000", "١٢", "0x10", "1e309", "NaN", "Infinity", "--1"])
def test_a_number_is_written_as_a_number_input_sends_one(world, scripted, login, typed):
    # float() reads "1_000" and other scripts' digits; a number control never sends them,
    # so they are refused like any other text, not stored as 1000 or 12.
    _, (call,) = propose(scripted, world.a.principal("member"), update_call(world, status="done"))
    browser = login("member@acme.test")
    refused = browser.post(
        f"/chat/calls/{call.id}/edit", {"arg.values.status": "done", "arg.values.points": typed}
    )
    assert refused.status_code == 422
    assert "Points must be" in html(refused).select_one(f"#edit-{call.id}-values-points-error").text
    assert now(call).original_input is None


@pytest.mark.parametrize(
    ("typed", "stored"), [("12", 12), ("-0.5", -0.5), ("1e3", 1000), (".5", 0.5)]
)
def test_numbers_a_number_input_sends_are_read(world, scripted, login, typed, stored):
    _, (call,) = propose(scripted, world.a.principal("member"), update_call(world, status="done"))
    browser = login("member@acme.test")
    saved = browser.post(
        f"/chat/calls/{call.id}/edit", {"arg.values.status": "done", "arg.values.points": typed}
    )
    assert saved.status_code == 200
    assert now(call).input["values"]["points"] == stored
