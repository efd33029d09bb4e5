"""The panel opens ready to type: on the conversation the browser had open, else the person's
most recent one, else a new one; and its list pages on past fifty conversations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bs4 import BeautifulSoup
from flask import request

from monark.assistant.gates import check_gates
from monark.chat.models import Conversation, ConversationKind
from monark.extensions import db
from tests import factories

START = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def conversations(org: factories.OrgWorld, role: str, count: int, **extra) -> list[Conversation]:
    made = [
        Conversation(
            org_id=org.org.id,
            kind=ConversationKind.AI,
            creator_id=org.users[role].id,
            title=f"Talk {n}",
            last_activity_at=START + timedelta(minutes=n),
            **extra,
        )
        for n in range(count)
    ]
    db.session.add_all(made)
    db.session.commit()
    return made


def title_of(response) -> str | None:
    found = soup_of(response).select_one("#chat-title")
    return found.get_text(strip=True) if found else None


def test_with_no_conversation_the_panel_opens_on_a_new_one_ready_to_type(login, world):
    screen = soup_of(login("member@acme.test").get("/chat/first"))
    assert screen.select_one("#chat-title").get_text(strip=True) == "New conversation"
    composer = screen.select_one("#chat-text")
    assert composer is not None and not composer.has_attr("disabled")
    assert screen.select_one("#chat-conversation-id")["value"] == ""


def test_a_new_conversation_offers_changes_only_to_whoever_may_make_them(login, world):
    def hint(email: str) -> str:
        return soup_of(login(email).get("/chat/first")).select_one(".chat-empty p").get_text()

    assert "ask for a change" in hint("member@acme.test")
    viewer = hint("viewer@acme.test")
    assert "not change it" in viewer and "ask for a change" not in viewer


def test_it_opens_on_the_most_recent_conversation(login, world):
    talks = conversations(world.a, "member", 3)
    response = login("member@acme.test").get("/chat/first")
    assert response.status_code == 200
    assert title_of(response) == "Talk 2"
    assert soup_of(response).select_one("#chat-conversation-id")["value"] == str(talks[2].id)


def test_the_conversation_the_browser_remembers_comes_first(login, world):
    talks = conversations(world.a, "member", 3)
    browser = login("member@acme.test")
    assert title_of(browser.get(f"/chat/first?remembered={talks[0].id}")) == "Talk 0"


def test_a_remembered_id_that_is_not_theirs_opens_their_own_latest(login, world):
    mine = conversations(world.a, "member", 2)
    others = conversations(world.a, "owner", 1) + conversations(world.b, "member", 1)
    archived = conversations(world.a, "member", 1, archived=True)
    browser = login("member@acme.test")
    for hint in [others[0].id, others[1].id, archived[0].id, "abc", "9" * 40, "-1", "1e3"]:
        response = browser.get(f"/chat/first?remembered={hint}")
        assert response.status_code == 200, hint
        assert title_of(response) == "Talk 1", hint
        assert soup_of(response).select_one("#chat-conversation-id")["value"] == str(mine[1].id)


def test_the_panel_asks_for_the_first_screen(login, world):
    page = soup_of(login("member@acme.test").get("/models"))
    assert page.select_one("#chat-screen")["data-first-url"] == "/chat/first"


def test_the_list_pages_on_past_fifty(login, world):
    conversations(world.a, "member", 120)
    conversations(world.a, "owner", 5)
    browser = login("member@acme.test")
    first = soup_of(browser.get("/chat/conversations"))
    seen = [t.get_text() for t in first.select(".chat-title")]
    assert seen == [f"Talk {n}" for n in range(119, 69, -1)]
    more = first.select_one(".chat-more button")
    while more is not None:
        page = soup_of(browser.get(more["hx-get"]))
        seen += [t.get_text() for t in page.select(".chat-title")]
        more = page.select_one(".chat-more button")
    # Each of the member's conversations once, in order; the owner's never.
    assert seen == [f"Talk {n}" for n in range(119, -1, -1)]


def test_a_page_of_exactly_fifty_has_no_more(login, world):
    conversations(world.a, "member", 50)
    first = soup_of(login("member@acme.test").get("/chat/conversations"))
    assert len(first.select(".chat-title")) == 50
    assert first.select_one(".chat-more") is None


def test_conversations_with_the_same_activity_time_are_all_listed(login, world):
    talks = conversations(world.a, "member", 60)
    for talk in talks:
        talk.last_activity_at = START
    db.session.commit()
    browser = login("member@acme.test")
    first = soup_of(browser.get("/chat/conversations"))
    second = soup_of(browser.get(first.select_one(".chat-more button")["hx-get"]))
    listed = first.select(".chat-conversation") + second.select(".chat-conversation")
    ids = [li["id"] for li in listed]
    assert sorted(ids) == sorted(f"conversation-{t.id}" for t in talks)
    assert len(set(ids)) == 60


def test_a_bad_list_position_is_refused_naming_it(login, world):
    browser = login("member@acme.test")
    for bad in ["nonsense", "2026-13-01T00:00:00~5", "2026-11-01T00:00:00~x", "~", "\x00"]:
        response = browser.get("/chat/conversations", query_string={"after": bad})
        assert response.status_code == 400, bad
        assert "after" in response.get_data(as_text=True), bad


def test_a_page_checks_the_gates_once_and_leaves_a_wsgi_environ(app, world):
    member = world.a.principal("member")
    with app.test_request_context("/models", method="GET"):
        first = check_gates(member)
        world.a.org.chat_enabled = False  # the page's own answer stays the one it began with
        assert check_gates(member) is first
        # gunicorn's access log reads every key of the environ as a string.
        assert all(isinstance(key, str) for key in request.environ)
    db.session.rollback()
    with app.test_request_context("/chat/stream", method="POST"):
        world.a.org.chat_enabled = False
        assert not check_gates(member).open  # a write's request asks afresh
    db.session.rollback()
