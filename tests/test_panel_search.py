"""The panel's conversation list searches the person's own conversations, titles and
messages, by the one search index: ranked, snippets escaped and marked, refused with why."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from bs4 import BeautifulSoup

from monark.assistant import conversation_list
from monark.chat import store
from monark.chat.models import MessageRole
from monark.extensions import db
from tests.test_search import BAD_QUERIES

BOX = {"HX-Request": "true", "HX-Target": "#chat-list-body"}


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def talk(principal, title: str, *texts: str):
    conversation = store.create_conversation(principal, title)
    for text in texts:
        store.add_message(
            conversation,
            principal,
            author_kind="user",
            author_user_id=principal.user_id,
            role=MessageRole.USER,
            text=text,
        )
    db.session.commit()
    return conversation


def found_ids(response) -> list[int]:
    return [
        int(li["id"].removeprefix("found-")) for li in soup_of(response).select(".chat-found li")
    ]


def test_the_list_has_a_search_box_over_its_body(login, world):
    talk(world.a.principal("member"), "Quarterly planning", "hello")
    screen = soup_of(login("member@acme.test").get("/chat/conversations"))
    box = screen.select_one("form.chat-search")
    assert box["hx-target"] == "#chat-list-body"
    assert "delay:" in box["hx-trigger"]
    assert screen.select_one("#chat-search")["name"] == "q"
    assert screen.select_one("#chat-list-body .chat-conversations")


def test_it_finds_by_title_and_by_a_word_in_a_message(login, world):
    member = world.a.principal("member")
    by_title = talk(member, "Numbat adoption", "which one?")
    by_message = talk(member, "Planning", "Should we adopt the quokka first?")
    talk(member, "Unrelated", "nothing here")
    browser = login("member@acme.test")
    assert found_ids(browser.get("/chat/conversations?q=numbat", headers=BOX)) == [by_title.id]
    answer = browser.get("/chat/conversations?q=quokka", headers=BOX)
    assert found_ids(answer) == [by_message.id]
    item = soup_of(answer).select_one(f"#found-{by_message.id}")
    assert item.select_one(".chat-title").get_text() == "Planning"
    assert item.select_one(".chat-snippet mark").get_text().lower() == "quokka"
    opener = item.select_one("button")
    assert opener["hx-get"] == f"/chat/conversations/{by_message.id}"
    assert opener["hx-target"] == "#chat-screen"


def test_typing_finds_by_the_start_of_a_word(login, world):
    chat = talk(world.a.principal("member"), "Budget", "the wombats arrived")
    answer = login("member@acme.test").get("/chat/conversations?q=womb", headers=BOX)
    assert found_ids(answer) == [chat.id]


def test_a_conversation_shows_once_and_the_title_match_ranks_first(login, world):
    member = world.a.principal("member")
    body_only = talk(member, "Notes", "okapi okapi", "the okapi again")
    titled = talk(member, "Okapi facts", "unrelated")
    answer = login("member@acme.test").get("/chat/conversations?q=okapi", headers=BOX)
    assert found_ids(answer) == [titled.id, body_only.id]


def test_never_another_users_or_another_orgs_conversation(login, world):
    mine = talk(world.a.principal("member"), "Zebu notes", "zebu")
    talk(world.a.principal("owner"), "Zebu plans", "zebu zebu")
    talk(world.b.principal("member"), "Zebu elsewhere", "zebu")
    talk(world.b.principal("owner"), "Other", "zebu")
    answer = login("member@acme.test").get("/chat/conversations?q=zebu", headers=BOX)
    assert found_ids(answer) == [mine.id]
    assert "elsewhere" not in answer.get_data(as_text=True)
    assert "plans" not in answer.get_data(as_text=True)


def test_archived_conversations_are_not_listed(login, world):
    member = world.a.principal("member")
    kept = talk(member, "Gnu one", "gnu")
    gone = talk(member, "Gnu two", "gnu")
    conversation_list.archive_conversation(member, gone.id)
    answer = login("member@acme.test").get("/chat/conversations?q=gnu", headers=BOX)
    assert found_ids(answer) == [kept.id]


def test_nothing_found_says_so(login, world):
    talk(world.a.principal("member"), "Planning", "hello")
    answer = login("member@acme.test").get("/chat/conversations?q=zzzqqq", headers=BOX)
    assert answer.status_code == 200
    assert "No conversation matches “zzzqqq”" in answer.get_data(as_text=True)


def test_clearing_the_box_shows_the_list_again(login, world):
    member = world.a.principal("member")
    chats = [talk(member, f"Talk {n}", "hi") for n in range(3)]
    answer = login("member@acme.test").get("/chat/conversations?q=", headers=BOX)
    page = soup_of(answer)
    assert page.select_one("form.chat-search") is None  # the body alone, under the box
    ids = [li["id"] for li in page.select(".chat-conversations > li.chat-conversation")]
    assert ids == [f"conversation-{c.id}" for c in reversed(chats)]


def test_a_search_without_htmx_draws_the_whole_list_screen(login, world):
    chat = talk(world.a.principal("member"), "Capybara", "hi")
    page = soup_of(login("member@acme.test").get("/chat/conversations?q=capybara"))
    assert page.select_one("#chat-search")["value"] == "capybara"
    assert page.select_one(f"#chat-list-body #found-{chat.id}")


def test_snippets_are_escaped_and_marked(login, world):
    talk(
        world.a.principal("member"),
        "<i>Markup</i>",
        "<script>alert('tapir')</script> <b>tapir</b> \ue000tapir\ue001",
    )
    html = login("member@acme.test").get("/chat/conversations?q=tapir", headers=BOX)
    text = html.get_data(as_text=True)
    assert "<script>" not in text and "<b>" not in text and "<i>" not in text
    assert "&lt;i&gt;Markup&lt;/i&gt;" in text  # (PostgreSQL's headline drops the tags)
    assert "<mark>" in text
    assert "\ue000" not in text and "\ue001" not in text


def test_more_matches_than_ranked_say_so(login, world, monkeypatch):
    monkeypatch.setattr(conversation_list, "SEARCH_LIMIT", 3)
    member = world.a.principal("member")
    for n in range(4):
        talk(member, f"Ibex {n}", "ibex")
    answer = login("member@acme.test").get("/chat/conversations?q=ibex", headers=BOX)
    assert len(found_ids(answer)) <= 3
    assert "add a word to narrow the search" in answer.get_data(as_text=True)


@pytest.mark.parametrize("query", BAD_QUERIES, ids=range(len(BAD_QUERIES)))
def test_bad_input_is_answered_or_refused_never_an_error(login, world, query):
    talk(world.a.principal("member"), "Refund policy", "refunds within thirty days")
    browser = login("member@acme.test")
    url = "/chat/conversations?q=" + quote(query, errors="surrogatepass")
    for headers in (BOX, {}):
        answer = browser.get(url, headers=headers)
        assert answer.status_code in (200, 422), (query, answer.status_code)
        if answer.status_code == 422:
            assert "at most 200 characters" in answer.get_data(as_text=True)


def test_ten_thousand_characters_are_refused_with_why(login, world):
    browser = login("member@acme.test")
    answer = browser.get("/chat/conversations", query_string={"q": "x" * 10_000}, headers=BOX)
    assert answer.status_code == 422
    alert = soup_of(answer).select_one("[role=alert]")
    assert "at most 200 characters" in alert.get_text()
