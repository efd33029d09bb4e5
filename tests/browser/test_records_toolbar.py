"""The records toolbar in Chromium: filters and a sort applied as the user picks them, kept
in the address, and what the assistant is told "these" means on that page."""

from __future__ import annotations

import re
from datetime import date, timedelta
from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import expect

from tests.browser.test_panel import new_conversation, send, wait_turn
from tests.factories import make_record
from tests.llm_script import Say


def test_filters_and_sort_from_the_toolbar(world, browse, fake_anthropic):
    owner = world.a.principal("owner")
    today = date.today()
    for title, status, points, due in (
        ("Late A", "todo", 3, today - timedelta(days=2)),
        ("Late B", "doing", 8, today - timedelta(days=5)),
        ("Late but done", "done", 1, today - timedelta(days=1)),
        ("Later", "todo", 5, today + timedelta(days=9)),
    ):
        make_record(owner, world.a.model, title, status=status, points=points, due=due.isoformat())
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    page = s.page
    table = page.locator("#records-table")

    row = page.locator(".filter-row").first
    row.get_by_label("Filter field").select_option("status")
    row.get_by_label("Operator").select_option("in")
    row.get_by_label("Value").fill("todo,doing")
    expect(table).to_contain_text("4 records match")
    page.get_by_role("button", name="+ Add filter").click()
    second = page.locator(".filter-row").nth(1)
    second.get_by_label("Filter field").select_option("due")
    second.get_by_label("Operator").select_option("lt")
    second.get_by_label("Value").fill("today")
    expect(table).to_contain_text("2 records match")
    expect(table.locator("tbody tr").first).to_contain_text("Late B")  # newest first
    page.get_by_label("Sort").select_option("points")
    expect(table.locator("tbody tr").first).to_contain_text("Late A")
    expect(page).to_have_url(re.compile(r"sort=points"))
    query = parse_qs(urlsplit(page.url).query)
    assert query == {"filter": ["status:in:todo,doing", "due:lt:today"], "sort": ["points"]}

    # Reloading the address shows the same list and toolbar.
    page.reload()
    expect(table).to_contain_text("2 records match")
    expect(page.locator(".filter-row").nth(1).get_by_label("Value")).to_have_value("today")

    # "These" reaches the model as the list tool's arguments for what is on screen.
    fake_anthropic.script.add([Say("Two overdue tasks.")])
    panel = new_conversation(s)
    send(panel, "What are these?")
    wait_turn(panel)
    sent = fake_anthropic.requests[-1]["messages"][-1]["content"][0]["text"]
    assert (
        '"filter": ["status:in:todo,doing", "due:lt:today"]' in sent and "(2 records match)" in sent
    )

    # Removing a filter applies at once.
    page.locator(".filter-row").nth(1).get_by_role("button", name="Remove this filter").click()
    expect(table).to_contain_text("4 records match")
    assert parse_qs(urlsplit(page.url).query)["filter"] == ["status:in:todo,doing"]
