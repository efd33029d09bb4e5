"""A long conversation in the panel: the summary the model writes is a collapsed item."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.test_panel import open_panel, send, wait_turn
from tests.llm_script import Say
from tests.test_compaction import LIMIT, make_history, summarizing
from tests.tuning import reconfigure


def test_a_summary_appears_collapsed_below_the_messages_it_covers(
    app, world, browse, fake_anthropic
):
    fake_anthropic.context_limit = LIMIT
    fake_anthropic.answer = summarizing
    reconfigure(app, CHAT_CONTEXT_WINDOW=LIMIT)
    try:
        make_history(world.a.principal("member"), turns=40)
        fake_anthropic.script.add([Say("Caught up.")])
        s = browse("member@acme.test")
        panel = open_panel(s)  # opens on the latest conversation: the long one
        expect(panel.locator("#chat-title")).to_have_text("A long one")
        expect(panel.locator(".msg-user").first).to_contain_text("Question 0:")
        send(panel, "Where were we?")
        wait_turn(panel)
        expect(panel.locator(".msg-assistant .md").last).to_have_text("Caught up.")
    finally:
        reconfigure(app, CHAT_CONTEXT_WINDOW=0)
    item = panel.locator(".msg-summary details")
    expect(item).to_have_count(1)
    expect(item.locator("summary")).to_have_text("Earlier conversation summarized")
    expect(item.locator(".md")).to_be_hidden()  # collapsed
    item.locator("summary").click()
    expect(item.locator(".md strong")).to_have_text("nothing is left open")
    expect(panel.locator(".msg-user").first).to_contain_text("Question 0:")  # still there
    s.shot("summary-item")
    assert not s.errors, s.errors
