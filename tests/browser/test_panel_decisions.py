"""Deciding on cards: the keyboard keeps its place, and a card decided elsewhere shows so."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.test_panel import count_titled, new_conversation, open_panel, send, wait_turn
from tests.llm_script import Call, Say


def test_confirming_with_the_keyboard_leaves_focus_in_the_panel(world, browse, fake_anthropic):
    fake_anthropic.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Keyboard task"}})],
        [Say("Created it.")],
    )
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    panel = new_conversation(s)
    send(panel, "Add a keyboard task")
    confirm = panel.get_by_role("button", name="Confirm")
    expect(confirm).to_be_visible()
    confirm.focus()
    s.page.keyboard.press("Enter")
    # The reply after the write, not just no turn running: right after Enter none has started.
    expect(panel.locator(".msg-assistant").last).to_contain_text("Created it.")
    wait_turn(panel)
    expect(panel.locator(".call").last).to_contain_text("Confirmed by")
    assert count_titled("Keyboard task") == 1
    # The card's button is gone; focus went back to the message box, not to <body>.
    expect(panel.get_by_label("Message", exact=True)).to_be_focused()
    s.page.keyboard.press("Escape")  # so Escape still closes the panel
    expect(panel).to_be_hidden()


def test_a_card_decided_in_another_tab_shows_it_when_clicked(world, browse, fake_anthropic):
    fake_anthropic.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Two tabs"}})],
        [Say("Created it.")],
    )
    first = browse("member@acme.test")
    first.goto("/models/tasks/records")
    panel = new_conversation(first)
    send(panel, "Add a task in two tabs")
    expect(panel.get_by_role("button", name="Confirm")).to_be_visible()
    second = browse("member@acme.test")  # the same conversation, in another tab
    second.goto("/models/tasks/records")
    other = open_panel(second)  # opens on the latest conversation: this one
    expect(other.locator("#chat-title")).to_have_text("Add a task in two tabs")
    stale = other.get_by_role("button", name="Confirm")
    expect(stale).to_be_visible()
    panel.get_by_role("button", name="Confirm").click()
    wait_turn(panel)
    stale.click()
    expect(other.locator(".chat-notice")).to_contain_text("already confirmed")
    card = other.locator(".call").last
    expect(card).to_contain_text("Confirmed by")
    expect(card.get_by_role("button", name="Confirm")).to_have_count(0)
    assert count_titled("Two tabs") == 1
