"""Edit a card and decide a group of cards, in Chromium: the edit form is typed by the
record's fields and refuses a bad value beside it; Confirm runs what the card shows; a
step's writes are one card where one unticked write is rejected and one failing write
fails on its own line."""

from __future__ import annotations

from playwright.sync_api import expect
from sqlalchemy import select

from monark.extensions import db
from monark.records.models import Record
from tests.browser.test_panel import count_titled, new_conversation, send, wait_turn
from tests.factories import make_record
from tests.llm_script import Call, Say


def test_edit_a_card_then_confirm_runs_the_edited_values(world, browse, fake_anthropic):
    fake_anthropic.script.add(
        [
            Call(
                "records_create", {"model": "tasks", "values": {"title": "Draft", "status": "todo"}}
            )
        ],
        [Say("Added as you edited it.")],
    )
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    panel = new_conversation(s)
    send(panel, "Add a draft task")
    card = panel.locator(".call-write").last
    card.get_by_role("button", name="Edit").click()
    form = panel.locator("form.call-editing")
    expect(form.get_by_label("Status")).to_have_value("todo")
    assert form.get_by_label("Due").get_attribute("type") == "date"
    assert form.get_by_label("Points").get_attribute("type") == "number"
    # A required field left empty is refused beside it, and nothing is saved.
    form.get_by_label("Title").fill("")
    form.get_by_role("button", name="Save changes").click()
    expect(form.locator(".field-error")).to_have_text("Title is required.")
    form.get_by_label("Title").fill("Final")
    form.get_by_label("Status").select_option("doing")
    form.get_by_label("Points").fill("8")
    form.get_by_role("button", name="Save changes").click()
    card = panel.locator(".call-write").last
    expect(card).to_contain_text("Edited by Acme Member")
    expect(card.locator(".after")).to_have_text(["Final", "doing", "8"])
    assert count_titled("Final") == 0  # nothing ran yet
    card.get_by_role("button", name="Confirm").click()
    wait_turn(panel)
    expect(panel.locator(".msg-assistant").last).to_contain_text("Added as you edited it.")
    db.session.rollback()
    (record,) = db.session.scalars(select(Record).where(Record.title == "Final")).all()
    assert record.values["status"] == "doing" and record.values["points"] == 8
    assert count_titled("Draft") == 0


def test_a_group_card_confirms_the_selected_and_shows_a_failure_on_its_line(
    world, browse, fake_anthropic
):
    hidden = make_record(
        world.a.principal("owner"), world.a.model, "Owner only", "private", status="todo"
    ).id
    db.session.commit()
    creates = [
        Call("records_create", {"model": "tasks", "values": {"title": t}})
        for t in ("Alpha", "Beta", "Gamma")
    ]
    blocked = Call(
        "records_update", {"model": "tasks", "record_id": hidden, "values": {"status": "done"}}
    )
    fake_anthropic.script.add([*creates, blocked], [Say("Alpha and Gamma are in.")])
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    panel = new_conversation(s)
    send(panel, "Add three tasks and close the owner's")
    group = panel.locator(".call-group")
    expect(group).to_contain_text("Wants to make 4 changes")
    boxes = group.get_by_role("checkbox")
    expect(boxes).to_have_count(4)
    expect(group.get_by_role("button", name="Confirm", exact=True)).to_have_count(0)
    boxes.nth(1).uncheck()  # not Beta
    group.get_by_role("button", name="Confirm selected").click()
    wait_turn(panel)
    expect(panel.locator(".msg-assistant").last).to_contain_text("Alpha and Gamma are in.")
    cards = panel.locator(".call-write")
    expect(cards.nth(0)).to_contain_text("Confirmed by")
    expect(cards.nth(1)).to_contain_text("Rejected")
    expect(cards.nth(3).locator(".call-error")).to_contain_text(f"No record {hidden}")
    expect(panel.get_by_role("checkbox")).to_have_count(0)
    assert (count_titled("Alpha"), count_titled("Beta"), count_titled("Gamma")) == (1, 0, 1)


def test_a_group_cards_choices_survive_the_card_being_drawn_again(world, browse, fake_anthropic):
    """The stream may draw a waiting card again (its turn still ending, another tab's
    decision): what the person unticked, and the reason they typed, stay as they left them."""
    fake_anthropic.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": t}}) for t in ("Ay", "Bee")],
        [Say("Only Ay.")],
    )
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    panel = new_conversation(s)
    send(panel, "Add two tasks")
    group = panel.locator(".call-group")
    boxes = group.get_by_role("checkbox")
    expect(boxes).to_have_count(2)
    wait_turn(panel)
    boxes.nth(1).uncheck()
    group.get_by_placeholder("Reason if you reject (optional)").fill("Not that one")
    bee = boxes.nth(1).get_attribute("value")
    card = panel.locator(f"#call-{bee}")
    card.evaluate("el => el.dataset.before = '1'")
    # The same swap a stream's card frame makes: the card as the server draws it now.
    s.page.evaluate(
        "id => htmx.ajax('GET', `/chat/calls/${id}`, {target: `#call-${id}`, swap: 'outerHTML'})",
        bee,
    )
    expect(panel.locator(f"#call-{bee}:not([data-before])")).to_have_count(1)
    expect(boxes.nth(1)).not_to_be_checked()
    expect(boxes.nth(0)).to_be_checked()
    expect(group.get_by_placeholder("Reason if you reject (optional)")).to_have_value(
        "Not that one"
    )
    group.get_by_role("button", name="Confirm selected").click()
    wait_turn(panel)
    expect(panel.locator(".msg-assistant").last).to_contain_text("Only Ay.")
    assert (count_titled("Ay"), count_titled("Bee")) == (1, 0)


def test_the_person_chosen_to_approve_survives_the_card_being_drawn_again(
    world, browse, fake_anthropic
):
    fake_anthropic.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Chairs"}})],
        [Say("Asked.")],
    )
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    panel = new_conversation(s)
    send(panel, "Add a task: chairs")
    wait_turn(panel)
    card = panel.locator(".call-write").last
    card.get_by_label("Ask someone to approve").select_option(label="Acme Owner")
    chosen = card.get_by_label("Ask someone to approve").input_value()
    call_id = card.get_attribute("id").removeprefix("call-")
    card.evaluate("el => el.dataset.before = '1'")
    s.page.evaluate(
        "id => htmx.ajax('GET', `/chat/calls/${id}`, {target: `#call-${id}`, swap: 'outerHTML'})",
        call_id,
    )
    expect(panel.locator(f"#call-{call_id}:not([data-before])")).to_have_count(1)
    expect(panel.get_by_label("Ask someone to approve")).to_have_value(chosen)
    panel.get_by_role("button", name="Ask to approve").click()
    expect(panel.locator(".call-write").last).to_contain_text("Waiting for Acme Owner")
