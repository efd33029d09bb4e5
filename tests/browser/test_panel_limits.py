"""A message past the per-minute limit, in Chromium: the panel says when to try again, and
the typed text is kept in the box."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser.test_panel import new_conversation, send, wait_turn
from tests.llm_script import Say
from tests.tuning import configure


def test_a_429_shows_the_wait_in_the_panel_and_keeps_the_text(
    app, world, browse, fake_anthropic, monkeypatch
):
    configure(monkeypatch, app, LIMIT_MESSAGES_PER_MINUTE=1)
    fake_anthropic.script.add([Say("First answer.")])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "First question")
    expect(panel.get_by_text("First answer.")).to_be_visible()
    wait_turn(panel)
    send(panel, "Second question, too soon")
    notice = panel.locator(".chat-notice")
    expect(notice).to_contain_text(
        re.compile(r"Too many messages: 1 a minute at most; try again in \d+ (second|minute)")
    )
    expect(panel.get_by_label("Message", exact=True)).to_have_value("Second question, too soon")
    # Nothing else broke on the page (the browser notes the 429 itself, nothing more).
    assert [e for e in s.errors if "status of 429" not in e] == []
