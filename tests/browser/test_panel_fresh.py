"""Cards decided fresh, in Chromium: a record changed since its card was drawn is asked
again with the new before → after; a card past its time says it expired and runs nothing."""

from __future__ import annotations

from datetime import timedelta

from playwright.sync_api import expect
from sqlalchemy import update

from monark.chat.models import ToolCall
from monark.core.models import utcnow
from monark.extensions import db
from monark.records import services as records
from monark.records.models import Record
from tests.browser.test_panel import count_titled, new_conversation, send, wait_turn
from tests.llm_script import Call, Say


def status_of(record_id: int) -> str:
    db.session.rollback()
    return db.session.get(Record, record_id).values.get("status")


def test_a_card_whose_record_changed_is_redrawn_and_asked_again(world, browse, fake_anthropic):
    record_id = world.a.public.id
    fake_anthropic.script.add(
        [
            Call(
                "records_update",
                {"model": "tasks", "record_id": record_id, "values": {"status": "done"}},
            )
        ],
        [Say("Marked it done.")],
    )
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    panel = new_conversation(s)
    send(panel, "Mark the public task done")
    card = panel.locator(".call-write").last
    expect(card.locator(".before")).to_have_text("todo")
    wait_turn(panel)  # the card is drawn for good: the turn's end would redraw it
    # Someone else moves the task on while the card waits.
    records.update_record(world.a.principal("owner"), world.a.model, record_id, {"status": "doing"})
    db.session.commit()
    card.get_by_role("button", name="Confirm").click()
    expect(panel.locator(".chat-notice")).to_contain_text("changed since the card was drawn")
    expect(card.locator(".before")).to_have_text("doing")
    assert status_of(record_id) == "doing"  # nothing ran
    card.get_by_role("button", name="Confirm").click()
    wait_turn(panel)
    expect(panel.locator(".call-write").last).to_contain_text("Confirmed by")
    assert status_of(record_id) == "done"


def test_a_card_past_its_time_says_it_expired_and_runs_nothing(world, browse, fake_anthropic):
    fake_anthropic.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Too late"}})]
    )
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    panel = new_conversation(s)
    send(panel, "Add a task called Too late")
    card = panel.locator(".call-write").last
    expect(card.get_by_role("button", name="Confirm")).to_be_visible()
    wait_turn(panel)  # a redraw at the turn's end would show it expired before the click
    db.session.execute(update(ToolCall).values(created_at=utcnow() - timedelta(days=8)))
    db.session.commit()
    card.get_by_role("button", name="Confirm").click()
    expect(panel.locator(".chat-notice")).to_contain_text("expired")
    expect(card).to_contain_text("Expired")
    expect(card.get_by_role("button", name="Confirm")).to_have_count(0)
    assert count_titled("Too late") == 0
    # The composer is free again: the next message is answered, and the model was told.
    fake_anthropic.script.add([Say("That one expired; I can propose it again.")])
    send(panel, "What happened?")
    wait_turn(panel)
    expect(panel.locator(".msg-assistant").last).to_contain_text("expired")
