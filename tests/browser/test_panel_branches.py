"""Regenerate and Edit in the panel, in real Chromium: a new version, the old one kept and
switched to with Previous version and Next version."""

from __future__ import annotations

from urllib.parse import parse_qs

from playwright.sync_api import expect

from tests.browser.test_panel import count_titled, new_conversation, send, wait_turn
from tests.llm_script import Call, Say


def test_regenerate_switches_branches(world, browse, fake_anthropic):
    fake_anthropic.script.add([Say("The first answer.")], [Say("The second answer.")])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Give me an answer")
    expect(panel.locator(".msg-assistant .md")).to_have_text(["The first answer."])
    wait_turn(panel)
    expect(panel.locator(".msg-branch")).to_have_count(0)  # one version: no switch
    panel.get_by_role("button", name="Regenerate").click()
    replies = panel.locator(".msg-assistant .md")
    expect(replies).to_have_text(["The second answer."])
    versions = panel.get_by_role("group", name="Versions")
    expect(versions).to_contain_text("2/2")
    wait_turn(panel)
    expect(versions.get_by_role("button", name="Next version")).to_be_disabled()
    s.shot("branches-01-regenerated")
    versions.get_by_role("button", name="Previous version").click()
    expect(versions).to_contain_text("1/2")
    expect(replies).to_have_text(["The first answer."])
    expect(versions.get_by_role("button", name="Previous version")).to_be_disabled()
    s.shot("branches-02-first-version")
    versions.get_by_role("button", name="Next version").click()
    expect(versions).to_contain_text("2/2")
    expect(replies).to_have_text(["The second answer."])
    # The version shown is stored: a reload opens on it.
    versions.get_by_role("button", name="Previous version").click()
    expect(versions).to_contain_text("1/2")
    s.page.reload()
    panel = s.page.get_by_role("complementary", name="Assistant")
    expect(panel.locator(".msg-assistant .md")).to_have_text(["The first answer."])
    expect(panel.get_by_role("group", name="Versions")).to_contain_text("1/2")
    assert not s.errors, s.errors


def test_edit_sends_a_new_version_of_the_last_message(world, browse, fake_anthropic):
    fake_anthropic.script.add([Say("Paris.")], [Say("Rome.")])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Capital of Frnace?")
    expect(panel.locator(".msg-assistant .md")).to_have_text(["Paris."])
    wait_turn(panel)
    panel.get_by_role("button", name="Edit", exact=True).click()
    box = panel.get_by_label("Edit message")
    expect(box).to_be_focused()
    box.fill("Capital of Italy?")
    panel.get_by_role("button", name="Save and send").click()
    expect(panel.locator(".msg-assistant .md")).to_have_text(["Rome."])
    expect(panel.locator(".msg-user .bubble")).to_have_text(["Capital of Italy?"])
    versions = panel.get_by_role("group", name="Versions")
    expect(versions).to_contain_text("2/2")
    wait_turn(panel)
    versions.get_by_role("button", name="Previous version").click()
    expect(panel.locator(".msg-user .bubble")).to_have_text(["Capital of Frnace?"])
    expect(panel.locator(".msg-assistant .md")).to_have_text(["Paris."])
    s.shot("branches-03-edited")
    assert not s.errors, s.errors


def test_regenerate_is_not_offered_while_a_card_waits_and_a_done_write_stays_done(
    world, browse, fake_anthropic
):
    fake_anthropic.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Branch task"}})],
        [Say("Added Branch task.")],
        [Say("It is already there.")],
    )
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "Add a task: Branch task")
    card = panel.locator(".call-write")
    expect(card.get_by_role("button", name="Confirm")).to_be_visible()
    wait_turn(panel)
    expect(panel.get_by_role("button", name="Regenerate")).to_have_count(0)
    card.get_by_role("button", name="Confirm").click()
    expect(panel.locator(".msg-assistant .md").last).to_have_text("Added Branch task.")
    wait_turn(panel)
    panel.get_by_role("button", name="Regenerate").click()
    expect(panel.locator(".msg-assistant .md")).to_have_text(["It is already there."])
    wait_turn(panel)
    assert count_titled("Branch task") == 1  # the write ran once, in the first version
    assert not s.errors, s.errors


def test_save_and_send_carries_the_edited_message_alone(world, browse, fake_anthropic):
    """Every message's box belongs to the thread's one edit form; only the opened one is
    sent, so a long thread's Edit stays one message's size."""
    fake_anthropic.script.add([Say("One.")], [Say("Two.")], [Say("Three.")])
    s = browse("member@acme.test")
    panel = new_conversation(s)
    send(panel, "First question")
    wait_turn(panel)
    send(panel, "Second question")
    expect(panel.locator(".msg-assistant .md")).to_have_text(["One.", "Two."])
    wait_turn(panel)
    last = panel.locator(".msg-user").last.get_attribute("id").removeprefix("msg-")
    panel.get_by_role("button", name="Edit", exact=True).click()
    panel.get_by_label("Edit message").last.fill("Second, edited")
    with s.page.expect_request(lambda r: r.url.endswith("/chat/edit")) as sent:
        panel.get_by_role("button", name="Save and send").click()
    form = parse_qs(sent.value.post_data)
    assert [name for name in form if name.startswith("text_")] == [f"text_{last}"]
    assert form[f"text_{last}"] == ["Second, edited"]
    expect(panel.locator(".msg-assistant .md")).to_have_text(["One.", "Three."])
    expect(panel.locator(".msg-user .bubble")).to_have_text(["First question", "Second, edited"])
    assert not s.errors, s.errors
