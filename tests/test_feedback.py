"""Thumbs up or down on a reply, with an optional reason, kept with its provider and model;
moderators (``chat.moderate``) review the org's feedback and read the conversations it points
to, each reading audited; and the person giving feedback is told it shares the conversation."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select

from monark.assistant.feedback import ReplyFeedback
from monark.chat.models import Message, MessageRole
from monark.core.models import Event
from monark.extensions import db
from tests.llm_script import Say


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def replied(login, fake_anthropic, email="member@acme.test", text="Hello"):
    """A browser of ``email`` and the id of the reply to their message."""
    fake_anthropic.script.add([Say("A reply worth rating.")])
    browser = login(email)
    response = browser.post("/chat/stream", {"text": text}, headers={"HX-Request": "true"})
    response.get_data()
    response.close()
    reply = db.session.scalar(
        select(Message).where(Message.role == MessageRole.ASSISTANT).order_by(Message.id.desc())
    )
    return browser, reply.id


def rows() -> list[ReplyFeedback]:
    return list(db.session.scalars(select(ReplyFeedback).order_by(ReplyFeedback.id)))


def test_a_reply_is_rated_and_rated_again(login, world, fake_anthropic):
    browser, reply = replied(login, fake_anthropic)
    bar = soup_of(browser.get("/chat/first")).select_one(f"#feedback-{reply}")
    assert bar is not None and "shares this conversation with your admins" in bar.get_text()
    up = browser.post(f"/chat/messages/{reply}/feedback", {"rating": "up"})
    assert up.status_code == 200
    assert soup_of(up).select_one(".feedback-up")["aria-pressed"] == "true"
    [given] = rows()
    assert (given.rating, given.reason, given.provider) == ("up", None, "anthropic")
    assert given.model
    down = browser.post(f"/chat/messages/{reply}/feedback", {"rating": "down", "reason": "Wrong"})
    assert soup_of(down).select_one(".feedback-down")["aria-pressed"] == "true"
    [given] = rows()
    assert (given.rating, given.reason) == ("down", "Wrong")
    # The thread shows the reader's own rating.
    shown = soup_of(browser.get("/chat/first")).select_one(f"#feedback-{reply} .feedback-down")
    assert shown["aria-pressed"] == "true"
    given_events = select(Event).where(Event.type == "chat.feedback.given").order_by(Event.id)
    events = db.session.scalars(given_events).all()
    assert [e.payload["rating"] for e in events] == ["up", "down"]
    assert all("Wrong" not in str(e.payload) for e in events)


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"rating": "sideways"}, "rating"),
        ({}, "rating"),
        ({"rating": "down", "reason": "x" * 1001}, "reason"),
    ],
)
def test_bad_feedback_is_refused_naming_the_field(login, world, fake_anthropic, form, field):
    browser, reply = replied(login, fake_anthropic)
    response = browser.post(f"/chat/messages/{reply}/feedback", form)
    assert response.status_code == 422
    error = soup_of(response).select_one(f"#feedback-{reply}-error")
    assert error is not None and error.get_text(strip=True)
    assert {"rating": "Choose up or down.", "reason": "under 1000"}[field] in error.get_text()
    assert rows() == []


def test_only_the_conversations_owner_rates_its_replies(login, world, fake_anthropic):
    _, reply = replied(login, fake_anthropic)
    for email in ("owner@acme.test", "viewer@acme.test", "owner@globex.test"):
        response = login(email).post(f"/chat/messages/{reply}/feedback", {"rating": "down"})
        assert response.status_code == 404, email
    own, _ = replied(login, fake_anthropic, text="Another")
    question = db.session.scalar(select(Message.id).where(Message.role == MessageRole.USER))
    assert own.post(f"/chat/messages/{question}/feedback", {"rating": "up"}).status_code == 404
    assert own.post("/chat/messages/999999/feedback", {"rating": "up"}).status_code == 404
    assert rows() == []


def test_moderators_review_feedback_and_each_reading_is_audited(login, world, fake_anthropic):
    admin_id = world.a.users["admin"].id
    browser, reply = replied(login, fake_anthropic, text="My private question")
    browser.post(f"/chat/messages/{reply}/feedback", {"rating": "down", "reason": "Off topic"})
    admin = login("admin@acme.test")
    page = soup_of(admin.get("/moderation/feedback"))
    table = page.select_one("table[aria-label=Feedback]")
    assert "Off topic" in table.get_text() and "Acme Member" in table.get_text()
    assert "Off topic" not in soup_of(admin.get("/moderation/feedback?rating=up")).get_text()
    link = table.select_one("a")["href"]
    assert (
        db.session.scalars(
            select(Event).where(Event.type == "chat.feedback.conversation_read")
        ).all()
        == []
    )
    conversation = soup_of(admin.get(link))
    assert "My private question" in conversation.get_text()
    assert "A reply worth rating." in conversation.get_text()
    [read] = db.session.scalars(
        select(Event).where(Event.type == "chat.feedback.conversation_read")
    ).all()
    assert read.actor_id == admin_id
    assert read.payload["feedback_id"] == rows()[0].id


def test_feedback_stays_in_its_org_and_with_moderators(login, world, fake_anthropic):
    browser, reply = replied(login, fake_anthropic)
    browser.post(f"/chat/messages/{reply}/feedback", {"rating": "down", "reason": "Nope"})
    given = rows()[0].id
    elsewhere = login("owner@globex.test")
    assert "Nope" not in elsewhere.get("/moderation/feedback").get_data(as_text=True)
    assert elsewhere.get(f"/moderation/feedback/{given}").status_code == 404
    for email in ("member@acme.test", "viewer@acme.test"):
        assert login(email).get("/moderation/feedback").status_code == 403
        assert login(email).get(f"/moderation/feedback/{given}").status_code == 403
    refused = login("admin@acme.test").get("/moderation/feedback?rating=meh")
    assert refused.status_code == 400 and "Choose up or down" in refused.get_data(as_text=True)
    assert (
        db.session.scalars(
            select(Event).where(Event.type == "chat.feedback.conversation_read")
        ).all()
        == []
    )


def test_a_moderator_reads_up_to_the_rated_reply_and_nothing_after(login, world, fake_anthropic):
    browser, reply = replied(login, fake_anthropic, text="First question")
    browser.post(f"/chat/messages/{reply}/feedback", {"rating": "down", "reason": "Vague"})
    conversation_id = db.session.get(Message, reply).conversation_id
    fake_anthropic.script.add([Say("A later answer.")])
    later = browser.post(
        "/chat/stream",
        {"text": "kiwisecret", "conversation_id": str(conversation_id)},
        headers={"HX-Request": "true"},
    )
    later.get_data()
    later.close()
    shown = soup_of(login("admin@acme.test").get(f"/moderation/feedback/{rows()[0].id}"))
    text = shown.get_text()
    assert "First question" in text and "A reply worth rating." in text
    assert "kiwisecret" not in text and "A later answer." not in text


def test_deleting_the_conversation_ends_its_sharing(login, world, fake_anthropic):
    browser, reply = replied(login, fake_anthropic, text="Share this once")
    browser.post(f"/chat/messages/{reply}/feedback", {"rating": "up"})
    conversation_id = db.session.get(Message, reply).conversation_id
    assert browser.post(f"/chat/conversations/{conversation_id}/delete").status_code == 200
    admin = login("admin@acme.test")
    listed = soup_of(admin.get("/moderation/feedback")).select_one("table[aria-label=Feedback]")
    assert "no longer shared" in listed.get_text() and listed.select_one("tbody a") is None
    refused = admin.get(f"/moderation/feedback/{rows()[0].id}")
    assert refused.status_code == 404
    assert "Share this once" not in refused.get_data(as_text=True)
    assert (
        db.session.scalars(
            select(Event).where(Event.type == "chat.feedback.conversation_read")
        ).all()
        == []
    )
