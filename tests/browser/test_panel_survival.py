"""A reply belongs to no tab: close the tab, open a second one, lose the network, and the
reply is still there, streaming or complete, and Stop still reaches it."""

from __future__ import annotations

from playwright.sync_api import expect
from sqlalchemy import select

from monark.chat.models import Message
from monark.extensions import db
from tests.browser.test_panel import new_conversation, send, wait_turn
from tests.llm_script import Say

WORDS = 60


def long_reply() -> str:
    return " ".join(f"word{i}" for i in range(WORDS))


def reopen(s):
    """A new tab of the same browser on the records page; the panel as it was left."""
    page = s.page.context.new_page()
    page.set_default_timeout(10_000)
    page.goto(s.base + "/models/tasks/records")
    panel = page.get_by_role("complementary", name="Assistant")
    if panel.is_hidden():
        page.get_by_role("button", name="Chrysa").click()
    expect(panel).to_be_visible()
    return page, panel


def test_closing_the_tab_mid_reply_then_reopening_shows_it_streaming_then_complete(
    world, browse, fake_anthropic
):
    fake_anthropic.chunk_delay = 0.1
    fake_anthropic.script.add([Say(long_reply())])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Tell me a long story")
    expect(panel.locator(".live-text")).to_contain_text("word3")
    s.page.close()
    _page, panel = reopen(s)
    expect(panel.locator("#chat-title")).to_have_text("Tell me a long story")
    # Still being written: it carries on live, with Stop, and Send waits.
    expect(panel.locator(".live-text")).to_contain_text("word25")
    expect(panel.get_by_role("button", name="Stop")).to_be_visible()
    expect(panel.get_by_role("button", name="Send")).to_be_disabled()
    expect(panel.locator(".msg-assistant .md")).to_have_text(long_reply(), timeout=15_000)
    wait_turn(panel)
    expect(panel.get_by_role("button", name="Send")).to_be_enabled()
    assert panel.locator(".msg-assistant").count() == 1
    db.session.rollback()
    assert db.session.scalar(select(Message.status).where(Message.role == "assistant")) == (
        "complete"
    )


def test_a_second_tab_follows_the_reply_and_can_stop_it(world, browse, fake_anthropic):
    fake_anthropic.chunk_delay = 0.15
    fake_anthropic.script.add([Say(long_reply())])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Keep talking")
    expect(panel.locator(".live-text")).to_contain_text("word2")
    _page, other = reopen(s)
    expect(other.locator(".live-text")).to_contain_text("word8")
    other.get_by_role("button", name="Stop").click()
    for side in (panel, other):
        expect(side.locator(".msg-flag")).to_contain_text("incomplete", timeout=8_000)
        wait_turn(side)
    db.session.rollback()
    message = db.session.scalar(select(Message).where(Message.role == "assistant"))
    assert message.status == "incomplete" and f"word{WORDS - 1}" not in message.text


def test_a_stream_cut_by_a_proxy_catches_up_with_the_reply(world, browse, fake_anthropic, proxy):
    fake_anthropic.chunk_delay = 0.08
    fake_anthropic.script.add([Say(long_reply())])
    s = browse("member@acme.test", base=proxy.url)
    panel = new_conversation(s)
    send(panel, "Through a tunnel")
    expect(panel.locator(".live-text")).to_contain_text("word3")
    proxy.cut()
    expect(panel.locator(".msg-assistant .md")).to_have_text(long_reply(), timeout=20_000)
    wait_turn(panel)
    assert panel.locator(".msg-assistant").count() == 1
    # The cut stream was picked up by the follower, not left to finish on its own.
    assert any(url.endswith("/follow") for url in s.requests)


def test_an_idle_tab_that_sends_during_another_tabs_reply_follows_it(world, browse, fake_anthropic):
    fake_anthropic.script.add([Say("First answer.")])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Start here")
    expect(panel.locator(".msg-assistant .md")).to_have_text("First answer.")
    wait_turn(panel)
    _, other = reopen(s)  # a second tab on the same conversation, idle
    expect(other.locator(".msg-assistant .md")).to_have_text("First answer.")
    fake_anthropic.chunk_delay = 0.1
    fake_anthropic.script.add([Say(long_reply())])
    send(panel, "Keep talking")
    expect(panel.locator(".live-text")).to_contain_text("word2")
    send(other, "Me too")  # refused: a reply is being written; the tab follows it instead
    expect(other.locator(".chat-notice")).to_contain_text("still being written")
    expect(other.locator(".live-text")).to_contain_text("word20")
    expect(other.get_by_label("Message", exact=True)).to_have_value("Me too")
    expect(other.locator(".msg-assistant .md").last).to_have_text(long_reply(), timeout=15_000)
    wait_turn(other)
    expect(other.locator(".chat-notice")).to_have_count(0)  # said while it ran, gone after
