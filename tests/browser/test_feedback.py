"""Feedback on a reply, clicked through: a member rates a reply down with a reason in the
panel, and an admin (a moderator) finds it in Settings, reads the conversation it points to,
and that reading is in the audit log."""

from __future__ import annotations

from playwright.sync_api import expect
from sqlalchemy import select

from monark.core.models import Event
from monark.extensions import db
from tests.browser.test_panel import new_conversation, send, wait_turn
from tests.llm_script import Say


def test_a_thumbs_down_reaches_a_moderator_and_the_reading_is_audited(
    world, browse, fake_anthropic
):
    fake_anthropic.script.add([Say("The lease ends in 1999.")])
    member = browse("member@acme.test")
    panel = new_conversation(member)
    send(panel, "When does the lease end?")
    wait_turn(panel)
    bar = panel.locator(".msg-feedback").last
    expect(bar).to_contain_text("shares this conversation with your admins")
    bar.get_by_role("button", name="Bad reply").click()
    expect(bar.get_by_role("button", name="Bad reply")).to_have_attribute("aria-pressed", "true")
    bar = panel.locator(".msg-feedback").last
    bar.get_by_label("What was wrong? (optional)").fill("Wrong year")
    bar.get_by_role("button", name="Send reason").click()
    expect(panel.locator(".msg-feedback").last.get_by_role("status")).to_contain_text(
        "your admins can see what went wrong"
    )

    admin = browse("admin@acme.test")
    admin.goto("/settings")
    admin.page.get_by_role("link", name="Feedback on replies").click()
    row = admin.page.get_by_role("row").filter(has_text="Wrong year")
    expect(row).to_contain_text("Acme Member")
    row.get_by_role("link", name="Read the conversation").click()
    expect(admin.page.locator(".moderated-thread")).to_contain_text("When does the lease end?")
    expect(admin.page.locator(".is-rated")).to_contain_text("The lease ends in 1999.")
    db.session.rollback()
    reads = db.session.scalars(
        select(Event).where(Event.type == "chat.feedback.conversation_read")
    ).all()
    assert len(reads) == 1 and reads[0].actor_id == world.a.users["admin"].id
    admin.goto("/audit?type=chat.feedback.conversation_read")
    expect(admin.page.locator("main")).to_contain_text("chat.feedback.conversation_read")
    assert not member.errors and not admin.errors, (member.errors, admin.errors)
