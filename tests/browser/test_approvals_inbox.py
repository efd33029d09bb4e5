"""The Approvals inbox in Chromium: a member hands a card to the owner, who confirms it in
another browser; and a write of an MCP agent's key, approved in the inbox, then read
through the status tool with the real ``mcp`` client."""

from __future__ import annotations

import re

from mcp import ClientSession
from playwright.sync_api import expect

from tests.browser.test_panel import count_titled, new_conversation, send, wait_turn
from tests.factories import make_key
from tests.llm_script import Call, Say
from tests.test_mcp_server import mcp_run, text_of  # noqa: F401  (the fixture, and a helper)


def test_a_card_handed_over_is_confirmed_by_the_owner_and_the_thread_continues(
    world, browse, fake_anthropic
):
    fake_anthropic.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Order chairs"}})],
        [Say("Acme Owner approved it: Order chairs is on the list.")],
    )
    a = browse("member@acme.test")
    a.goto("/models/tasks/records")
    panel = new_conversation(a)
    send(panel, "Add a task: order chairs")
    card = panel.locator(".call-write").last
    expect(card.get_by_role("button", name="Confirm")).to_be_visible()
    card.get_by_label("Ask someone to approve").select_option(label="Acme Owner")
    card.get_by_role("button", name="Ask to approve").click()
    card = panel.locator(".call-write").last
    expect(card).to_contain_text("Waiting for Acme Owner")
    expect(card.get_by_role("button", name="Confirm")).to_have_count(0)
    expect(card.get_by_role("button", name="Reject")).to_be_visible()

    b = browse("owner@acme.test")
    expect(b.page.locator(".nav-approvals .approvals-badge")).to_have_text("1")
    b.page.get_by_role("link", name=re.compile("^Approvals")).click()
    expect(b.page.get_by_role("heading", name="Approvals")).to_be_visible()
    request = b.page.locator(".approval")
    expect(request).to_contain_text("Asked by Acme Member via the assistant")
    expect(request).to_contain_text("Order chairs")
    request.get_by_role("button", name="Confirm").click()
    expect(b.page.locator(".flash, .flashes, [role=status]").first).to_contain_text(
        "Confirmed and done"
    )
    expect(b.page.locator(".approval")).to_have_count(0)
    expect(b.page.locator(".nav-approvals .approvals-badge")).to_have_count(0)
    assert count_titled("Order chairs") == 1

    # The member comes back: the thread tells the model, and its answer streams in.
    a.page.reload()
    panel = a.page.get_by_role("complementary", name="Assistant")
    expect(panel.locator(".msg-assistant").last).to_contain_text("Acme Owner approved it")
    wait_turn(panel)
    expect(panel.locator(".call-write").first).to_contain_text("Confirmed by Acme Owner")
    assert not a.errors and not b.errors


def test_the_requesters_open_panel_shows_the_approvers_decision_without_a_reload(
    world, browse, fake_anthropic
):
    fake_anthropic.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Order desks"}})],
        [Say("Approved: Order desks is on the list.")],
    )
    a = browse("member@acme.test")
    a.goto("/models/tasks/records")
    panel = new_conversation(a)
    send(panel, "Add a task: order desks")
    card = panel.locator(".call-write").last
    card.get_by_label("Ask someone to approve").select_option(label="Acme Owner")
    card.get_by_role("button", name="Ask to approve").click()
    expect(panel.locator(".call-write").last).to_contain_text("Waiting for Acme Owner")
    # The foot no longer asks the member for a Confirm that is the owner's now.
    expect(panel.locator("#chat-thread-foot")).not_to_contain_text("your Confirm or Reject")
    expect(panel.locator("#chat-await")).to_have_count(1)

    b = browse("owner@acme.test")
    b.goto("/approvals")
    b.page.locator(".approval").get_by_role("button", name="Confirm").click()
    expect(b.page.locator(".approval")).to_have_count(0)
    # No reload: the member's panel follows the decision and the model's answer.
    expect(panel.locator(".msg-assistant").last).to_contain_text("Approved: Order desks")
    expect(panel.locator(".call-write").first).to_contain_text("Confirmed by Acme Owner")
    assert count_titled("Order desks") == 1
    assert not a.errors and not b.errors


def test_an_mcp_agents_write_is_approved_in_the_inbox_and_read_by_the_status_tool(
    world,
    browse,
    mcp_run,  # noqa: F811
):
    token = make_key(world.a.principal("owner"), "member", "Claude Desktop", True)

    async def write(client: ClientSession):
        return await client.call_tool(
            "records_create", {"model": "tasks", "values": {"title": "Book the venue"}}
        )

    waiting = mcp_run(token, write)
    assert text_of(waiting).startswith("Waiting for approval in Monark"), text_of(waiting)
    approval_id = waiting.structured_content["id"]
    assert count_titled("Book the venue") == 0

    b = browse("admin@acme.test")
    expect(b.page.locator(".nav-approvals .approvals-badge")).to_have_text("1")
    b.goto("/approvals")
    request = b.page.locator(f"#approval-{approval_id}")
    expect(request).to_contain_text("From API key Claude Desktop")
    expect(request).to_have_css("list-style-type", "none")  # a card, not a bulleted item
    expect(request).to_contain_text("Book the venue")
    request.get_by_role("button", name="Confirm").click()
    expect(b.page.locator(f"#approval-{approval_id}")).to_have_count(0)
    assert count_titled("Book the venue") == 1

    async def check(client: ClientSession):
        return await client.call_tool("approvals_get", {"approval_id": approval_id})

    done = mcp_run(token, check)
    assert not done.is_error, text_of(done)
    assert done.structured_content["status"] == "succeeded"
    assert done.structured_content["result"]["title"] == "Book the venue"
    assert not b.errors
