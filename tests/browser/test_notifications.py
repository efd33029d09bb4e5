"""Notifications in Chromium: an approver's bell counts a write a member hands over, without
a reload (its poll, under the CSP), and opening it leads to the request."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser.test_panel import new_conversation, send, wait_turn
from tests.llm_script import Call
from tests.tuning import configure


def test_the_approvers_bell_counts_a_handed_over_write_live(
    world, browse, fake_anthropic, app, monkeypatch
):
    configure(monkeypatch, app, NOTIFICATIONS_POLL=0.5)  # the bell asks twice a second
    fake_anthropic.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Order chairs"}})]
    )
    b = browse("owner@acme.test")
    b.goto("/models/tasks/records")
    bell = b.page.locator("#notifications-bell a")
    expect(bell).to_have_attribute("aria-label", "Notifications")
    b.page.evaluate("window.stillThisPage = true")  # a reload would lose it

    a = browse("member@acme.test")
    a.goto("/models/tasks/records")
    panel = new_conversation(a)
    send(panel, "Add a task: order chairs")
    wait_turn(panel)  # the live bubble has given way to the stored card
    card = panel.locator(".call-write").last
    expect(card.get_by_role("button", name="Confirm")).to_be_visible()
    card.get_by_label("Ask someone to approve").select_option(label="Acme Owner")
    card.get_by_role("button", name="Ask to approve").click()
    expect(panel.locator(".call-write").last).to_contain_text("Waiting for Acme Owner")

    # The owner's page, untouched, hears of it.
    expect(b.page.locator("#notifications-bell .notifications-badge")).to_have_text("1")
    expect(bell).to_have_attribute("aria-label", "Notifications, 1 unread")
    assert b.page.evaluate("window.stillThisPage") is True

    bell.click()
    expect(b.page.get_by_role("heading", name="Notifications")).to_be_visible()
    item = b.page.get_by_role(
        "button", name="Acme Member asks you to approve: create a record in Tasks"
    )
    item.click()
    # A boosted form follows the redirect by fetch, which keeps no #fragment.
    expect(b.page).to_have_url(re.compile(r"/approvals(#approval-\d+)?$"))
    expect(b.page.locator(".approval")).to_contain_text("Order chairs")
    expect(b.page.locator("#notifications-bell .notifications-badge")).to_have_count(0)
    assert not a.errors and not b.errors
