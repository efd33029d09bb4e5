"""The assistant panel in real Chromium, with the real AnthropicProvider and a fake API."""

from __future__ import annotations

from playwright.sync_api import expect
from sqlalchemy import func, select

from monark.chat.models import Message
from monark.extensions import db
from monark.records.models import Record
from tests.factories import make_record
from tests.llm_script import Call, Say

WATCH_LIVE_TEXT = """() => {
  window.__states = [];
  new MutationObserver(() => {
    const live = document.querySelector('#chat-thread .live-text');
    if (live) window.__states.push(live.textContent);
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def open_panel(s):
    s.page.get_by_role("button", name="Chrysa").click()
    panel = s.page.get_by_role("complementary", name="Assistant")
    expect(panel).to_be_visible()
    return panel


def new_conversation(s):
    panel = open_panel(s)
    panel.get_by_role("button", name="New conversation").click()
    expect(panel.locator("#chat-title")).to_have_text("New conversation")
    expect(panel.locator(".chat-empty")).to_be_visible()
    return panel


def send(panel, text: str) -> None:
    box = panel.get_by_label("Message", exact=True)
    box.fill(text)
    box.press("Enter")


def wait_turn(panel) -> None:
    expect(panel.locator(".msg-live")).to_have_count(0)
    expect(panel.get_by_role("button", name="Stop")).to_be_hidden()


def count_titled(title: str) -> int:
    db.session.rollback()
    return db.session.scalar(select(func.count()).where(Record.title == title))


def test_tokens_appear_progressively_then_the_persisted_message(world, browse, fake_anthropic):
    words = "One two three four five six seven eight nine ten eleven twelve."
    fake_anthropic.chunk_delay = 0.08
    fake_anthropic.script.add([Say(words)])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    s.page.evaluate(WATCH_LIVE_TEXT)
    send(panel, "Count to twelve")
    wait_turn(panel)
    states = [t for t in dict.fromkeys(s.page.evaluate("window.__states")) if t]
    assert len(states) >= 5, states
    assert all(words.startswith(t) for t in states)
    assert len(states[0]) < len(states[-1])
    final = panel.locator(".msg-assistant").last
    expect(final.locator(".bubble.md")).to_have_text(words)
    assert final.get_attribute("id").startswith("msg-")
    s.shot("01-streamed-reply")
    # Reloading shows the same persisted thread (the open conversation is remembered).
    s.page.reload()
    panel = s.page.get_by_role("complementary", name="Assistant")
    expect(panel.locator(".msg-assistant .bubble")).to_have_text(words)
    assert not s.errors, s.errors


def test_a_read_tool_shows_a_status_card_then_the_answer(world, browse, fake_anthropic):
    fake_anthropic.script.add(
        [Call("records_list", {"model": "tasks"})],
        [Say("You have **one** task: Acme public task.")],
    )
    s = browse("viewer@acme.test")
    panel = new_conversation(s)
    send(panel, "What tasks are there?")
    wait_turn(panel)
    card = panel.locator(".call-read").first
    expect(card).to_contain_text("List records in Tasks")
    expect(card).to_contain_text("done")
    card.locator("summary").click()
    expect(card.locator(".call-json").last).to_contain_text("Acme public task")
    expect(panel.locator(".msg-assistant .md strong")).to_have_text("one")
    s.shot("02-read-card")


def test_confirm_creates_the_record_and_the_continuation_streams(world, browse, fake_anthropic):
    fake_anthropic.script.add(
        [
            Say("I'll add it."),
            Call(
                "records_create",
                {"model": "tasks", "values": {"title": "Ship the panel", "status": "doing"}},
            ),
        ],
        [Say("Done: Ship the panel is in Tasks.")],
    )
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Add a task: ship the panel")
    card = panel.locator(".call-write")
    expect(card).to_contain_text("Wants to create a record in Tasks")
    expect(card.locator(".call-changes")).to_contain_text("Ship the panel")
    wait_turn(panel)
    assert count_titled("Ship the panel") == 0
    s.shot("03-confirm-card")
    s.page.evaluate(WATCH_LIVE_TEXT)
    # Tokens that come at once travel in one frame: space them out to watch them stream.
    fake_anthropic.chunk_delay = 0.03
    card.get_by_role("button", name="Confirm").click()
    expect(panel.locator(".msg-assistant .md").last).to_have_text(
        "Done: Ship the panel is in Tasks."
    )
    wait_turn(panel)
    assert s.page.evaluate("window.__states.filter(Boolean).length") >= 2
    assert count_titled("Ship the panel") == 1
    decided = panel.locator(".call-write .call-decided")
    expect(decided).to_contain_text("Confirmed by Acme Member")
    expect(decided).to_contain_text("done")
    expect(panel.get_by_role("button", name="Confirm")).to_have_count(0)
    s.shot("04-confirmed")


def test_reject_changes_nothing_and_the_model_hears_why(world, browse, fake_anthropic):
    target = world.a.public
    fake_anthropic.script.add(
        [Call("records_delete", {"model": "tasks", "record_id": target.id})],
        [Say("Understood, I did not delete it.")],
    )
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Delete the public task")
    card = panel.locator(".call-write")
    expect(card).to_contain_text("Wants to delete “Acme public task” from Tasks")
    wait_turn(panel)
    card.get_by_label("Reason (optional)").fill("We still need it")
    card.get_by_role("button", name="Reject").click()
    expect(panel.locator(".msg-assistant .md").last).to_have_text(
        "Understood, I did not delete it."
    )
    wait_turn(panel)
    expect(panel.locator(".call-decided")).to_contain_text("Rejected by Acme Member")
    db.session.rollback()
    assert db.session.get(Record, target.id) is not None
    result = fake_anthropic.requests[-1]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is True
    assert "rejected" in result["content"] and "We still need it" in result["content"]
    s.shot("05-rejected")


def test_go_to_navigates_the_main_area_and_the_panel_keeps_the_thread(
    world, browse, fake_anthropic
):
    fake_anthropic.script.add(
        [Call("navigate", {"path": "/models/tasks/records", "label": "Tasks"})],
        [Say("Here is the button.")],
    )
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Take me to the tasks")
    go = panel.get_by_role("link", name="Go to Tasks")
    expect(go).to_be_visible()
    wait_turn(panel)
    go.click()
    s.page.wait_for_url(f"{s.base}/models/tasks/records")
    expect(s.page.locator("#main h1")).to_have_text("Tasks")
    expect(panel).to_be_visible()
    expect(panel.locator(".msg-user .bubble")).to_have_text("Take me to the tasks")
    expect(panel.locator(".msg-assistant .md")).to_have_text("Here is the button.")
    assert s.page.locator("#main").get_attribute("data-route") == "/models/tasks/records"
    s.shot("06-navigated")


def test_a_viewers_confirmed_create_fails_and_creates_nothing(world, browse, fake_anthropic):
    fake_anthropic.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Viewer wish"}})],
        [Say("Sorry, your role cannot create records.")],
    )
    s = browse("viewer@acme.test")
    panel = new_conversation(s)
    send(panel, "Add a task")
    wait_turn(panel)
    panel.get_by_role("button", name="Confirm").click()
    failure = panel.locator(".call-write .call-error")
    expect(failure).to_contain_text("records.create")
    wait_turn(panel)
    expect(panel.locator(".call-write .call-status")).to_have_text("failed")
    assert count_titled("Viewer wish") == 0
    s.shot("07-viewer-denied")


PAYLOADS = [
    '<img src=x onerror="window.__pwned=1">',
    "<script>window.__pwned=2</script>",
    "[click me](javascript:window.__pwned=3)",
    "![leak](http://127.0.0.2:9/leak)",
    "![ref leak][r]\n\n[r]: http://127.0.0.2:9/ref-leak",
]


def test_hostile_model_text_and_record_titles_render_inert(world, browse, fake_anthropic):
    owner = world.a.principal("owner")
    make_record(
        owner,
        world.a.model,
        '<img src=x onerror="window.__pwned=4"><script>window.__pwned=5</script>',
    )
    fake_anthropic.script.add(
        [Call("records_list", {"model": "tasks"})], [Say("\n\n".join(PAYLOADS), chunks=7)]
    )
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    panel = new_conversation(s)
    send(panel, "Show me everything")
    wait_turn(panel)
    card = panel.locator(".call-read").first
    card.locator("summary").click()
    expect(card.locator(".call-json").last).to_contain_text("onerror")
    s.page.wait_for_timeout(300)
    assert s.page.evaluate("window.__pwned") is None
    assert s.page.locator("#assistant script").count() == 0
    assert s.page.locator("#assistant [onerror]").count() == 0
    assert s.page.locator('#assistant a[href^="javascript"]').count() == 0
    assert s.page.locator("#assistant img[src]").count() == 0
    assert s.page.locator("#main [onerror], #main script").count() == 0
    assert s.foreign_requests() == []
    csp = s.page.evaluate("fetch('/models').then(r => r.headers.get('content-security-policy'))")
    assert "img-src 'self'" in csp and "script-src 'self'" in csp
    s.shot("08-hostile-inert")


def test_stop_keeps_the_partial_reply_and_the_conversation_usable(world, browse, fake_anthropic):
    fake_anthropic.chunk_delay = 0.25
    long = " ".join(f"word{i}" for i in range(60))
    fake_anthropic.script.add([Say(long)])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Talk for a long time")
    expect(panel.locator(".live-text")).to_contain_text("word3")
    panel.get_by_role("button", name="Stop").click()
    expect(panel.locator(".msg-flag")).to_contain_text("incomplete", timeout=8_000)
    wait_turn(panel)
    db.session.rollback()
    message = db.session.scalar(select(Message).where(Message.role == "assistant"))
    assert message.status == "incomplete"
    assert 0 < len(message.text) < len(long) and long.startswith(message.text)
    s.shot("09-stopped")
    fake_anthropic.chunk_delay = 0
    fake_anthropic.script.add([Say("Short answer.")])
    send(panel, "Shorter please")
    expect(panel.locator(".msg-assistant .md").last).to_have_text("Short answer.")


def test_the_conversation_list_new_rename_delete_reopen(world, browse, fake_anthropic):
    fake_anthropic.script.add([Say("First answer.")], [Say("Second answer.")])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "First topic about invoices")
    wait_turn(panel)
    expect(panel.locator("#chat-title")).to_have_text("First topic about invoices")
    panel.get_by_role("button", name="New conversation").click()
    expect(panel.locator("#chat-title")).to_have_text("New conversation")
    send(panel, "Second topic about leases")
    wait_turn(panel)
    panel.get_by_role("button", name="Conversations").click()
    titles = panel.locator(".chat-title")
    expect(titles).to_have_text(["Second topic about leases", "First topic about invoices"])
    s.shot("10-list")
    item = panel.locator(".chat-conversation").nth(1)
    item.locator("summary").click()
    item.get_by_label("Title").fill("Invoices, renamed")
    item.get_by_role("button", name="Rename").click()
    expect(titles).to_have_text(["Second topic about leases", "Invoices, renamed"])
    s.page.once("dialog", lambda dialog: dialog.accept())
    first = panel.locator(".chat-conversation").first
    first.locator("summary").click()
    first.get_by_role("button", name="Delete").click()
    expect(titles).to_have_text(["Invoices, renamed"])
    panel.locator(".chat-open").first.click()
    expect(panel.locator(".msg-user .bubble")).to_have_text("First topic about invoices")
    expect(panel.locator(".msg-assistant .md")).to_have_text("First answer.")
    s.shot("11-reopened")


def test_after_a_confirmed_change_the_page_behind_shows_it(world, browse, fake_anthropic):
    record = world.a.public
    fake_anthropic.script.add(
        [
            Call(
                "records_update",
                {"model": "tasks", "record_id": record.id, "values": {"status": "done"}},
            )
        ],
        [Say("Marked as done.")],
    )
    s = browse("member@acme.test")
    s.goto(f"/models/tasks/records/{record.id}")
    expect(s.page.locator("dl.record")).to_contain_text("todo")
    panel = new_conversation(s)
    send(panel, "Mark this task done")
    card = panel.locator(".call-write")
    expect(card).to_contain_text("Status")
    expect(card.locator(".before")).to_have_text("todo")
    wait_turn(panel)
    card.get_by_role("button", name="Confirm").click()
    expect(s.page.locator("dl.record")).to_contain_text("done")
    expect(panel).to_be_visible()
    s.shot("17-page-refreshed")


def test_the_open_conversation_comes_back_after_a_reload(world, browse, fake_anthropic):
    fake_anthropic.script.add([Say("Remember me.")])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "A conversation to come back to")
    wait_turn(panel)
    s.page.reload()
    panel = s.page.get_by_role("complementary", name="Assistant")
    expect(panel.locator("#chat-title")).to_have_text("A conversation to come back to")
    expect(panel.locator(".msg-assistant .md")).to_have_text("Remember me.")
