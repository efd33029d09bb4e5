"""The panel while the database does not answer: Confirm and Send say so with Retry, and
Retry, once it is back, sends the same thing again (the card's Confirm; the text typed)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect
from werkzeug.serving import make_server

from tests.browser.test_panel import count_titled, new_conversation, send, wait_turn
from tests.llm_script import Call, Say
from tests.outage import DatabaseSwitch, app_on_switchable_database

UNAVAILABLE = "cannot reach its database"


def _script_errors(s) -> list[str]:
    """The page's errors less the browser's note of each 503 it was answered."""
    return [e for e in s.errors if "status of 503" not in e]


@pytest.fixture
def cut(app, fake_anthropic) -> Iterator[tuple[str, DatabaseSwitch]]:
    """The app on a database path the test can cut, served on a loopback port; its model
    is the fake Anthropic server (``ANTHROPIC_BASE_URL``, set by ``fake_anthropic``)."""
    import anthropic  # noqa: F401  (its first import takes seconds: not while a page waits)

    with app_on_switchable_database(ANTHROPIC_API_KEY="sk-test-not-real") as (served, switch):
        server = make_server("127.0.0.1", 0, served, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_port}", switch
        finally:
            server.shutdown()


def test_confirm_says_the_database_is_down_and_retry_confirms_once_it_is_back(
    world, browse, fake_anthropic, cut
):
    url, switch = cut
    fake_anthropic.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "After the outage"}})],
        [Say("Created it.")],
    )
    s = browse("member@acme.test", base=url)
    s.goto("/models/tasks/records")
    panel = new_conversation(s)
    send(panel, "Add a task")
    confirm = panel.get_by_role("button", name="Confirm")
    expect(confirm).to_be_visible()
    switch.down()
    confirm.click()
    notice = panel.locator(".chat-notice", has_text=UNAVAILABLE)
    expect(notice).to_be_visible()
    expect(confirm).to_be_visible()  # the card still waits
    assert count_titled("After the outage") == 0
    switch.up()
    notice.get_by_role("button", name="Retry").click()
    wait_turn(panel)
    expect(panel.locator(".call").last).to_contain_text("Confirmed by")
    expect(panel.locator(".msg-assistant").last).to_contain_text("Created it.")
    assert count_titled("After the outage") == 1
    assert _script_errors(s) == []


def test_send_says_the_database_is_down_and_retry_sends_the_text_again(
    world, browse, fake_anthropic, cut
):
    url, switch = cut
    fake_anthropic.script.add([Say("Here now.")])
    s = browse("member@acme.test", base=url)
    panel = new_conversation(s)
    switch.down()
    send(panel, "Are you there?")
    notice = panel.locator(".chat-notice", has_text=UNAVAILABLE)
    expect(notice).to_be_visible()
    expect(panel.get_by_label("Message", exact=True)).to_have_value("Are you there?")
    switch.up()
    notice.get_by_role("button", name="Retry").click()
    wait_turn(panel)
    expect(panel.locator(".msg-user").last).to_contain_text("Are you there?")
    expect(panel.locator(".msg-assistant").last).to_contain_text("Here now.")
    expect(panel.get_by_label("Message", exact=True)).to_have_value("")
    assert _script_errors(s) == []
