"""A question card (``ask_user``) in real Chromium: it appears, a click on a choice answers
it, and the model's next reply streams."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from monark.chat.models import ToolCall, ToolCallStatus
from monark.extensions import db
from tests.browser.test_panel import WATCH_LIVE_TEXT, new_conversation, send, wait_turn
from tests.llm_script import Call, Say

pytestmark = pytest.mark.browser


def test_a_click_on_a_choice_answers_and_the_reply_streams(world, browse, fake_anthropic):
    fake_anthropic.script.add(
        [
            Say("One question first."),
            Call(
                "ask_user",
                {"question": "Which <i>Acme</i>?", "choices": ["Acme Ltd", "Acme Inc"]},
            ),
        ],
        [Say("Acme Inc it is: here is what I found about it.")],
    )
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Tell me about Acme")
    card = panel.locator(".call-question")
    expect(card).to_contain_text("Which <i>Acme</i>?")  # the model's markup, as text
    expect(card.locator("i")).to_have_count(0)
    wait_turn(panel)
    expect(card.get_by_role("button", name="Confirm")).to_have_count(0)
    expect(card.get_by_label("Something else…")).to_be_visible()
    s.shot("question-card")
    s.page.evaluate(WATCH_LIVE_TEXT)
    fake_anthropic.chunk_delay = 0.03  # spaced out, to watch it stream
    card.get_by_role("button", name="Acme Inc").click()
    expect(panel.locator(".msg-assistant .md").last).to_have_text(
        "Acme Inc it is: here is what I found about it."
    )
    wait_turn(panel)
    assert s.page.evaluate("window.__states.filter(Boolean).length") >= 2
    expect(card).to_contain_text("Answered")
    expect(card).to_contain_text("Acme Inc")
    expect(card.get_by_role("button", name="Acme Ltd")).to_have_count(0)
    db.session.rollback()
    call = db.session.scalar(select(ToolCall).where(ToolCall.name == "ask_user"))
    assert call.status == ToolCallStatus.SUCCEEDED and call.result == {"answer": "Acme Inc"}
