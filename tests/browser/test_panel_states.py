"""The panel's other states: shortcut, resize, narrow screens, gates, errors, limits."""

from __future__ import annotations

from playwright.sync_api import expect
from sqlalchemy import select

from monark.core.models import User
from monark.extensions import db
from tests.browser.test_panel import new_conversation, open_panel, send, wait_turn
from tests.factories import add_member
from tests.llm_script import Call, HttpFail, Say


def test_keyboard_shortcut_opens_and_closes_the_panel(world, browse):
    s = browse("member@acme.test")
    panel = s.page.get_by_role("complementary", name="Assistant")
    expect(panel).to_be_hidden()
    s.page.keyboard.press("Control+.")
    expect(panel).to_be_visible()
    expect(s.page.get_by_role("button", name="Chrysa")).to_have_attribute("aria-expanded", "true")
    s.page.keyboard.press("Control+.")
    expect(panel).to_be_hidden()
    # The open state survives a full page load.
    s.page.keyboard.press("Control+.")
    s.page.reload()
    expect(s.page.get_by_role("complementary", name="Assistant")).to_be_visible()


def test_dragging_resizes_the_panel_and_the_width_is_remembered(world, browse):
    s = browse("member@acme.test")
    panel = open_panel(s)
    before = panel.bounding_box()["width"]
    handle = panel.get_by_role("separator", name="Resize the assistant panel")
    box = handle.bounding_box()
    s.page.mouse.move(box["x"] + 2, box["y"] + 100)
    s.page.mouse.down()
    s.page.mouse.move(box["x"] - 150, box["y"] + 100, steps=5)
    s.page.mouse.up()
    after = panel.bounding_box()["width"]
    assert after > before + 100
    expected = round(after)
    for _ in range(50):
        db.session.rollback()
        saved = db.session.scalar(
            select(User.assistant_panel_width).where(User.email == "member@acme.test")
        )
        if saved:
            break
        s.page.wait_for_timeout(100)
    assert abs(saved - expected) <= 2
    s.page.reload()
    panel = s.page.get_by_role("complementary", name="Assistant")
    assert abs(panel.bounding_box()["width"] - saved) <= 2
    s.shot("12-resized")


def test_on_a_narrow_screen_the_panel_fills_the_screen(world, browse):
    s = browse("member@acme.test", viewport={"width": 390, "height": 800})
    panel = open_panel(s)
    box = panel.bounding_box()
    assert box["x"] == 0 and box["width"] == 390
    s.shot("13-narrow")
    panel.get_by_role("button", name="Close the assistant").click()
    expect(panel).to_be_hidden()


def test_a_closed_gate_hides_the_assistant_with_its_reason(world, browse):
    world.a.org.ai_agent_enabled = False
    db.session.commit()
    s = browse("member@acme.test")
    toggle = s.page.get_by_role("button", name="Chrysa")
    expect(toggle).to_have_attribute(
        "title", "An admin turned the AI assistant off for this organization."
    )
    toggle.click()
    panel = s.page.get_by_role("complementary", name="Assistant")
    expect(panel).to_contain_text("An admin turned the AI assistant off")
    expect(panel.get_by_label("Message", exact=True)).to_have_count(0)
    s.shot("14-gate-off")


def test_branding_renames_the_assistant_everywhere(world, browse, fake_anthropic):
    world.a.org.branding_enabled = True
    world.a.org.assistant_name = "Ada Bot"
    db.session.commit()
    fake_anthropic.script.add([Say("Hi.")])
    s = browse("member@acme.test")
    s.page.get_by_role("button", name="Ada Bot").click()
    panel = s.page.get_by_role("complementary", name="Assistant")
    expect(panel.locator(".assistant-name")).to_have_text("Ada Bot")
    panel.get_by_role("button", name="New conversation").click()
    send(panel, "Who are you?")
    wait_turn(panel)
    assert "You are Ada Bot" in fake_anthropic.requests[0]["system"][0]["text"]


def test_with_no_conversation_the_panel_opens_ready_to_type(world, browse, fake_anthropic):
    fake_anthropic.script.add([Say("Hello there.")])
    s = browse("member@acme.test")
    panel = open_panel(s)
    expect(panel.locator("#chat-title")).to_have_text("New conversation")
    box = panel.get_by_label("Message", exact=True)
    expect(box).to_be_focused()
    # The empty list, one click away, invites a first conversation.
    panel.get_by_role("button", name="Conversations").click()
    expect(panel).to_contain_text("No conversations yet")
    panel.get_by_role("button", name="New conversation").click()
    expect(box).to_be_focused()
    s.page.keyboard.type("Typed straight away")
    s.page.keyboard.press("Enter")
    expect(panel.locator(".msg-assistant .md")).to_have_text("Hello there.")
    wait_turn(panel)


def test_the_panel_opens_on_the_latest_conversation_ready_to_type(world, browse, fake_anthropic):
    fake_anthropic.script.add([Say("First.")], [Say("Second.")])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "An older question")
    wait_turn(panel)
    panel.get_by_role("button", name="New conversation").click()
    # The new screen first: typed sooner, the message goes to the old conversation.
    expect(panel.locator("#chat-title")).to_have_text("New conversation")
    send(panel, "The latest question")
    wait_turn(panel)
    # Another browser (nothing remembered there) opens on the latest, composer focused.
    other = browse("member@acme.test")
    panel = open_panel(other)
    expect(panel.locator("#chat-title")).to_have_text("The latest question")
    expect(panel.get_by_label("Message", exact=True)).to_be_focused()
    assert not other.errors, other.errors


def test_a_provider_error_is_shown_and_retry_recovers(world, browse, fake_anthropic):
    fake_anthropic.script.add([HttpFail(400, "prompt is too long")], [Say("Recovered nicely.")])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Hello?")
    expect(panel.locator(".msg-error")).to_contain_text("prompt is too long")
    wait_turn(panel)
    s.shot("15-provider-error")
    panel.get_by_role("button", name="Retry").click()
    expect(panel.locator(".msg-assistant .md").last).to_have_text("Recovered nicely.")
    wait_turn(panel)
    expect(panel.get_by_role("button", name="Retry")).to_have_count(0)


def test_the_step_limit_leaves_a_visible_note(world, browse, fake_anthropic):
    fake_anthropic.script.add(*[[Call("me_get")] for _ in range(8)])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Keep checking who I am")
    expect(panel.locator(".note-text")).to_contain_text("stopped after 8 steps")
    wait_turn(panel)
    expect(panel.locator(".call-read")).to_have_count(8)
    s.shot("16-step-limit")


def test_back_and_forward_keep_the_panel_open_with_its_conversation(world, browse, fake_anthropic):
    fake_anthropic.script.add([Say("Still here.")], [Say("And working.")])
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    panel = new_conversation(s)
    send(panel, "Keep me through history")
    wait_turn(panel)
    nav = s.page.get_by_role("navigation", name="Main")
    nav.get_by_role("link", name="Wiki").click()
    s.page.wait_for_url(f"{s.base}/wiki**")
    nav.get_by_role("link", name="All models").click()
    s.page.wait_for_url(f"{s.base}/models")
    main = s.page.locator("#main")
    toggle = s.page.get_by_role("button", name="Chrysa")
    steps = [(s.page.go_back, "/wiki"), (s.page.go_back, "/models/tasks/records")]
    steps += [(s.page.go_forward, "/wiki"), (s.page.go_back, "/models/tasks/records")]
    for step, route in steps:
        step()
        expect(main).to_have_attribute("data-route", route)
        expect(toggle).to_have_attribute("aria-expanded", "true")
        expect(panel).to_be_visible()
        expect(panel.locator("#chat-title")).to_have_text("Keep me through history")
        expect(panel.get_by_label("Message", exact=True)).to_be_visible()
    expect(main.locator("h1")).to_have_text("Tasks")
    # The panel still works after the restores.
    send(panel, "Are you still working?")
    expect(panel.locator(".msg-assistant .md").last).to_have_text("And working.")
    wait_turn(panel)
    assert not s.errors, s.errors


def test_the_open_conversation_is_remembered_per_org(world, browse, fake_anthropic):
    add_member(world.a.users["member"], world.b.org, "member")
    fake_anthropic.script.add([Say("An Acme answer.")])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "An Acme question")
    wait_turn(panel)
    s.page.get_by_label("Organization").select_option(label="Globex")
    expect(s.page.locator(".flash")).to_have_text("Switched to Globex.")
    panel = s.page.get_by_role("complementary", name="Assistant")
    # Globex has none of hers: a new conversation, and an empty list behind it.
    expect(panel.locator("#chat-title")).to_have_text("New conversation")
    expect(panel.get_by_text("That conversation is no longer there.")).to_have_count(0)
    panel.get_by_role("button", name="Conversations").click()
    expect(panel).to_contain_text("No conversations yet")
    s.page.get_by_label("Organization").select_option(label="Acme")
    expect(s.page.locator(".flash")).to_have_text("Switched to Acme.")
    expect(panel.locator("#chat-title")).to_have_text("An Acme question")
    expect(panel.locator(".msg-assistant .md")).to_have_text("An Acme answer.")


def test_send_is_disabled_while_a_reply_streams_and_keeps_the_text(world, browse, fake_anthropic):
    fake_anthropic.chunk_delay = 0.15
    fake_anthropic.script.add([Say(" ".join(f"word{i}" for i in range(30)))])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Talk for a while")
    expect(panel.locator(".live-text")).to_contain_text("word2")
    box = panel.get_by_label("Message", exact=True)
    box.fill("Not yet, please")
    send_button = panel.get_by_role("button", name="Send")
    expect(send_button).to_be_disabled()
    send_button.dispatch_event("click")  # what a click or a keyboard press on it would do
    panel.locator("#chat-composer").evaluate("form => form.requestSubmit()")
    expect(box).to_have_value("Not yet, please")
    wait_turn(panel)
    expect(send_button).to_be_enabled()
    expect(box).to_have_value("Not yet, please")
    expect(panel.locator(".msg-user")).to_have_count(1)
    assert len(fake_anthropic.requests) == 1
    # Once the reply is done, Send sends the kept text.
    fake_anthropic.chunk_delay = 0
    fake_anthropic.script.add([Say("Now then.")])
    send_button.click()
    expect(panel.locator(".msg-assistant .md").last).to_have_text("Now then.")
    expect(panel.locator(".msg-user .bubble").last).to_have_text("Not yet, please")


def test_new_conversation_moves_focus_to_the_message_box(world, browse):
    s = browse("member@acme.test")
    panel = open_panel(s)
    panel.get_by_role("button", name="New conversation").click()
    expect(panel.locator("#chat-title")).to_have_text("New conversation")
    expect(panel.get_by_label("Message", exact=True)).to_be_focused()


def test_the_list_shows_more_past_fifty(world, browse):
    from tests.test_panel_ready import conversations

    conversations(world.a, "member", 55)
    s = browse("member@acme.test")
    panel = open_panel(s)
    expect(panel.locator("#chat-title")).to_have_text("Talk 54")
    panel.get_by_role("button", name="Conversations").click()
    titles = panel.locator(".chat-title")
    expect(titles).to_have_count(50)
    panel.get_by_role("button", name="More conversations").click()
    expect(titles).to_have_count(55)
    expect(titles.last).to_have_text("Talk 0")
    expect(panel.get_by_role("button", name="More conversations")).to_have_count(0)
    titles.last.click()
    expect(panel.locator("#chat-title")).to_have_text("Talk 0")
    assert not s.errors, s.errors


def test_a_suggestion_from_the_page_sends_and_follows_navigation(world, browse, fake_anthropic):
    fake_anthropic.script.add([Say("Here is the summary.")])
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    panel = open_panel(s)
    suggestions = panel.locator(".chat-suggestion")
    expect(suggestions.first).to_have_text("Summarize the tasks")
    # Moving to a record with the new conversation open: the suggestions follow the page.
    s.page.locator("#main").get_by_role("link", name=world.a.public.title).first.click()
    about = "Summarize this record and what changed"
    expect(suggestions.first).to_have_text(about)
    suggestions.first.click()
    expect(panel.locator(".msg-user .bubble")).to_have_text(about)
    expect(panel.locator(".msg-assistant .md")).to_have_text("Here is the summary.")
    wait_turn(panel)
    expect(suggestions.first).to_be_hidden()
    context = fake_anthropic.requests[0]["messages"][0]["content"]
    assert world.a.public.title in str(context)
    assert not s.errors, s.errors


def test_typing_in_the_list_search_filters_it_and_a_result_opens(world, browse):
    from tests.test_panel_search import talk

    member = world.a.principal("member")
    talk(member, "Lease renewals", "When does the warehouse lease end?")
    talk(member, "Hiring plan", "We need a quokka keeper by spring.")
    talk(world.a.principal("owner"), "Owner's quokka notes", "quokka")
    s = browse("member@acme.test")
    panel = open_panel(s)
    panel.get_by_role("button", name="Conversations").click()
    titles = panel.locator("#chat-list-body .chat-title")
    expect(titles).to_have_text(["Hiring plan", "Lease renewals"])
    box = panel.get_by_role("searchbox", name="Search conversations")
    box.press_sequentially("quok")  # a word being typed: its start finds it
    expect(titles).to_have_text(["Hiring plan"])
    expect(panel.locator(".chat-snippet mark")).to_have_text(["quokka"])
    s.shot("13-list-search")
    box.fill("")
    expect(titles).to_have_text(["Hiring plan", "Lease renewals"])
    box.press_sequentially("warehouse")
    expect(titles).to_have_text(["Lease renewals"])
    panel.locator("#chat-list-body .chat-open").first.click()
    expect(panel.locator("#chat-title")).to_have_text("Lease renewals")
    expect(panel.locator(".msg-user .bubble")).to_have_text("When does the warehouse lease end?")
    assert not s.errors, s.errors
