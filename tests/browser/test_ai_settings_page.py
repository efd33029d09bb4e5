"""The AI model settings page in Chromium: a vendor fills its base URL, a saved key is never
shown again, Test connection speaks plainly, and the panel then answers through it."""

from __future__ import annotations

import socket

import pytest
from playwright.sync_api import expect

from monark.chat.runtime import set_llm_provider
from tests.browser.test_panel import new_conversation, send, wait_turn
from tests.fake_openai import FakeOpenAI
from tests.llm_script import Say
from tests.tuning import reconfigure

KEY = "sk-browser-visible-KEY-0987654321"


@pytest.fixture
def openai_fake(app):
    fake = FakeOpenAI().start()
    reconfigure(app, CHAT_LLM_ALLOW_PRIVATE=True)  # the fake is on loopback
    reconfigure(app, CHAT_LLM_MAX_RETRIES=0)
    yield fake
    reconfigure(app, CHAT_LLM_ALLOW_PRIVATE=False)
    reconfigure(app, CHAT_LLM_MAX_RETRIES=2)
    set_llm_provider(None)
    fake.stop()


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_an_admin_points_the_org_at_another_provider(world, browse, openai_fake):
    s = browse("admin@acme.test")
    s.goto("/settings/ai")
    page = s.page
    provider = page.get_by_label("Provider")
    base_url = page.get_by_label("Base URL")
    provider.select_option("groq")
    expect(base_url).to_have_value("https://api.groq.com/openai/v1")
    provider.select_option("openai")
    expect(base_url).to_have_value("https://api.openai.com/v1")
    base_url.fill(openai_fake.url + "/v1")
    page.get_by_label("Model", exact=True).fill("gpt-5")
    page.get_by_label("API key").fill(KEY)

    openai_fake.script.add([Say("OK")])
    page.get_by_role("button", name="Test connection").click()
    expect(page.locator("#ai-test")).to_contain_text("Connected")
    base_url.fill(dead_url())
    page.get_by_role("button", name="Test connection").click()
    expect(page.locator("#ai-test")).to_contain_text("Could not connect to the provider")
    expect(page.locator("#ai-test")).not_to_contain_text(KEY)

    base_url.fill(openai_fake.url + "/v1")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".flash, .flashes, [role=status]").first).to_contain_text("saved")
    page.reload()
    assert KEY not in page.content()
    expect(page.get_by_label("API key")).to_have_attribute(
        "placeholder", "A key is set: leave empty to keep it"
    )

    openai_fake.script.add([Say("Hello through OpenAI.")])
    panel = new_conversation(s)
    send(panel, "Which model are you?")
    expect(panel.locator(".msg-assistant .md").last).to_have_text("Hello through OpenAI.")
    expect(panel.locator(".msg-meta").last).to_contain_text("openai · gpt-5")
    wait_turn(panel)
    assert openai_fake.headers[-1]["authorization"] == f"Bearer {KEY}"


def test_a_refused_save_puts_focus_on_the_first_field_to_fix(world, browse):
    s = browse("admin@acme.test")
    s.goto("/settings/ai")
    page = s.page
    page.get_by_label("Provider").select_option("openai")
    page.get_by_label("Base URL").fill("http://example.com:99999/")
    page.get_by_label("API key").fill("abc")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#api_key")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#api_key")).to_be_focused()
