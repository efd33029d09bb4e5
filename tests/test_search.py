"""Search everything: one index of records, wiki pages, automations and conversations, kept
in step on every write, read only as the reader may read (on SQLite and PostgreSQL)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from sqlalchemy import event, func, select

from monark.assistant.tools import build_chat_toolset
from monark.automations import services as automations
from monark.chat import store
from monark.chat.models import MessageRole
from monark.extensions import db
from monark.records import services as records
from monark.search import services as search
from monark.search.models import SearchDocument
from monark.search.routes import SEARCH_ROUTES
from monark.wiki import services as wiki
from tests import factories

GRAPH = {
    "nodes": [
        {"id": "created", "type": "record.created", "config": {"model": "tasks"}},
        {"id": "note", "type": "add_audit_note", "config": {"note": "Seen."}},
    ],
    "edges": [{"from": "created", "to": "note"}],
}
BAD_QUERIES = [
    '"',
    '"unclosed',
    "*",
    "refund*",
    "NEAR(",
    "NEAR(a b",
    "AND OR",
    "AND",
    "-",
    "-refund",
    ":",
    "title:refund",
    "'",
    "a'b\"c",
    "(",
    ")",
    "^",
    "\\",
    "\ud800",
    "refund \udfff policy",
    "\x00",
    "refund\x00policy",
    "x" * 10_000,
    " ",
    "",
    "<script>alert(1)</script>",
    "!!!&|",
    "' | '",
]


def found(principal, query: str) -> set[tuple[str, int]]:
    """(kind, id) of what a search finds; a conversation by its own id."""
    return {
        (h.kind, h.conversation_id if h.kind == "conversation" else h.object_id)
        for h in search.search(principal, query)
    }


def _page(owner, title: str, body: str = ""):
    page = wiki.create_page(owner, title, "", None, body)
    return page


def _conversation(principal, title: str, text: str):
    conversation = store.create_conversation(principal, title)
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


def test_each_kind_is_found_by_its_words(world):
    owner = world.a.principal("owner")
    record = factories.make_record(owner, world.a.model, "Invoice quokka", notes="pay by friday")
    page = _page(owner, "Handbook", "Our refund policy: thirty days, no questions.")
    automation = automations.create_automation(owner, "Wombat greeter", GRAPH)
    chat = _conversation(owner, "Planning", "Which numbat should we adopt?")
    assert ("record", record.id) in found(owner, "quokka")
    assert ("record", record.id) in found(owner, "friday")  # a field's text, not the title
    assert ("wiki", page.id) in found(owner, "refund")  # a word of the body
    assert ("wiki", page.id) in found(owner, "handbook")
    assert ("automation", automation.id) in found(owner, "wombat")
    assert ("conversation", chat.id) in found(owner, "numbat")  # a message's text
    assert ("conversation", chat.id) in found(owner, "planning")  # its title


def test_words_match_by_stem_and_by_prefix_while_typing(world):
    owner = world.a.principal("owner")
    page = _page(owner, "Payments", "How refunds are issued.")
    assert ("wiki", page.id) in found(owner, "refund")
    assert ("wiki", page.id) not in found(owner, "refu")  # a word is a word...
    typed = search.search(owner, "refu", typing=True)  # ...but the header's box is typing
    assert ("wiki", page.id) in {(h.kind, h.object_id) for h in typed}
    assert ("wiki", page.id) in found(owner, "REFUNDS issued")


def test_typing_marks_each_shown_match_among_many(world, monkeypatch):
    owner = world.a.principal("owner")
    pages = []
    for n in range(6):  # matches interleaved with pages that do not match
        pages.append(_page(owner, f"Alpaca {n}", "alpacas graze"))
        _page(owner, f"Llama {n}", "llamas graze")
    typed = search.search(owner, "alpa", 3, typing=True)
    assert len(typed) == 3
    assert {h.object_id for h in typed} <= {p.id for p in pages}
    for hit in typed:
        assert "<mark>Alpaca</mark>" in hit.title_html
        assert "<mark>alpacas</mark>" in hit.snippet_html
    # A word with as many whole-word matches as are ranked is taken whole, and still marked.
    monkeypatch.setattr(search, "CANDIDATES", 4)
    whole = search.search(owner, "alpaca", 2, typing=True)
    assert len(whole) == 2 and all("<mark>Alpaca</mark>" in h.title_html for h in whole)


def test_every_word_first_then_any(world):
    owner = world.a.principal("owner")
    both = _page(owner, "Refund desk", "Refunds of broken kettles.")
    one = _page(owner, "Kettles", "We sell kettles.")
    assert found(owner, "refund kettles") >= {("wiki", both.id)}
    assert ("wiki", one.id) not in found(owner, "refund kettles")
    assert ("wiki", one.id) in found(owner, "kettles zebra")  # nothing has both words


def test_a_record_is_kept_in_step_on_update_visibility_and_delete(world):
    owner, viewer = world.a.principal("owner"), world.a.principal("viewer")
    member = world.a.principal("member")
    record = factories.make_record(member, world.a.model, "Alpaca shearing")
    assert ("record", record.id) in found(viewer, "alpaca")
    records.update_record(member, world.a.model, record.id, {"title": "Llama shearing"})
    assert ("record", record.id) not in found(viewer, "alpaca")
    assert ("record", record.id) in found(viewer, "llama")
    records.update_record(member, world.a.model, record.id, {}, visibility="private")
    assert ("record", record.id) not in found(viewer, "llama")
    assert ("record", record.id) in found(member, "llama")
    records.delete_record(owner, world.a.model, record.id)
    assert ("record", record.id) not in found(owner, "llama")
    assert (
        db.session.scalar(
            select(func.count())
            .select_from(SearchDocument)
            .where(SearchDocument.kind == "record", SearchDocument.object_id == record.id)
        )
        == 0
    )


def test_a_wiki_page_is_kept_in_step_on_edit_archive_and_restore(world):
    owner = world.a.principal("owner")
    page = _page(owner, "Travel", "Trains are fine.")
    wiki.update_page(owner, page.id, body="Ferries are better.")
    assert ("wiki", page.id) not in found(owner, "trains")
    assert ("wiki", page.id) in found(owner, "ferries")
    wiki.archive_page(owner, page.id)
    assert ("wiki", page.id) not in found(owner, "ferries")
    wiki.restore_page(owner, page.id)
    assert ("wiki", page.id) in found(owner, "ferries")


def test_an_automation_is_kept_in_step_on_rename_and_delete(world):
    owner = world.a.principal("owner")
    automation = automations.create_automation(owner, "Badger digest", GRAPH)
    automations.update_automation(owner, automation.id, graph=GRAPH, name="Otter digest")
    assert ("automation", automation.id) not in found(owner, "badger")
    assert ("automation", automation.id) in found(owner, "otter")
    automations.delete_automation(owner, automation.id)
    assert ("automation", automation.id) not in found(owner, "otter")


def test_deleting_a_model_takes_its_records_out(world):
    owner = world.a.principal("owner")
    model = factories.make_tasks_model(owner, "chores")
    factories.make_record(owner, model, "Gecko feeding")
    assert found(owner, "gecko")
    records.delete_model(owner, model)
    assert not found(owner, "gecko")


def test_private_records_of_someone_else_are_never_found(world):
    private = world.a.private  # the member's
    assert ("record", private.id) not in found(world.a.principal("viewer"), "private")
    assert ("record", private.id) in found(world.a.principal("member"), "private")
    assert ("record", private.id) in found(world.a.principal("owner"), "private")  # view_private
    other_member = factories.make_user("member2@acme.test")
    factories.add_member(other_member, world.a.org, "member")
    second = factories.principal(other_member, world.a.org, "member")
    assert ("record", private.id) not in found(second, "acme private task")


def test_conversations_are_found_by_their_owner_alone(world):
    member, owner = world.a.principal("member"), world.a.principal("owner")
    chat = _conversation(member, "Salary talk", "my pangolin raise")
    assert ("conversation", chat.id) in found(member, "pangolin")
    assert ("conversation", chat.id) not in found(owner, "pangolin")  # even an admin's
    chat.archived = True
    db.session.commit()
    assert ("conversation", chat.id) not in found(member, "pangolin")


def _index_statements(run) -> list[str]:
    """The statements on the index's table that ``run()`` made."""
    seen: list[str] = []

    def listen(conn, cursor, statement, parameters, context, executemany):
        if "search_documents" in statement:
            seen.append(statement)

    engine = db.engine
    event.listen(engine, "before_cursor_execute", listen)
    try:
        run()
    finally:
        event.remove(engine, "before_cursor_execute", listen)
    return seen


def _message_document(message_id: int):
    return db.session.execute(
        select(SearchDocument.id, SearchDocument.owner_id).where(
            SearchDocument.kind == "message", SearchDocument.object_id == message_id
        )
    ).one_or_none()


def test_a_reply_is_indexed_when_its_text_comes_and_rewritten_in_place(world):
    member, owner = world.a.principal("member"), world.a.principal("owner")
    chat = _conversation(member, "Zoo talk", "tell me about animals")
    reply = None

    def open_reply():
        nonlocal reply
        reply = store.add_message(
            chat, member, author_kind="agent", role=MessageRole.ASSISTANT, text=""
        )
        db.session.commit()

    # An empty reply (streaming) has no words: the index is not touched.
    assert _index_statements(open_reply) == []
    assert _message_document(reply.id) is None

    def finish(text: str):
        def run():
            reply.text = text
            db.session.commit()

        return run

    # Its text: one statement, with the conversation's owner read in it.
    assert len(_index_statements(finish("the okapi answer"))) == 1
    first = _message_document(reply.id)
    assert first is not None and first.owner_id == member.user_id
    assert ("conversation", chat.id) in found(member, "okapi")
    assert ("conversation", chat.id) not in found(owner, "okapi")
    # Rewritten in place: the same row, the old words gone from the full-text index.
    assert len(_index_statements(finish("the quokka answer"))) == 1
    assert _message_document(reply.id).id == first.id
    assert ("conversation", chat.id) not in found(member, "okapi")
    assert ("conversation", chat.id) in found(member, "quokka")
    # Its words taken away: no document left.
    finish("")()
    assert _message_document(reply.id) is None
    assert ("conversation", chat.id) not in found(member, "quokka")


def test_a_message_of_an_archived_conversation_stays_out_until_restored(world):
    member = world.a.principal("member")
    chat = _conversation(member, "Barn talk", "the alpaca barn")
    chat.archived = True
    db.session.commit()
    message = store.add_message(
        chat, member, author_kind="agent", role=MessageRole.ASSISTANT, text="the capybara barn"
    )
    db.session.commit()
    assert _message_document(message.id) is None
    assert not found(member, "capybara")
    chat.archived = False
    db.session.commit()
    assert ("conversation", chat.id) in found(member, "capybara")
    assert ("conversation", chat.id) in found(member, "alpaca")


def test_another_orgs_data_is_never_found(world):
    acme = world.a.principal("owner")
    page = _page(acme, "Acme secrets", "the capybara formula")
    factories.make_record(acme, world.a.model, "Capybara order")
    _conversation(acme, "Capybara chat", "capybara")
    globex = world.b.principal("owner")
    assert found(globex, "capybara") == set()
    assert found(globex, "acme") == set()
    assert ("wiki", page.id) in found(acme, "capybara")


def test_a_role_without_a_kinds_permission_finds_none_of_it(world):
    owner = world.a.principal("owner")
    _page(owner, "Okapi notes", "okapi")
    key = factories.principal(world.a.users["viewer"], world.a.org, "viewer")
    assert found(key, "okapi")
    nothing = type(key)(org_id=key.org_id, role="none", actor_kind="user", actor_id=key.actor_id)
    assert found(nothing, "okapi") == set()


@pytest.mark.parametrize("query", BAD_QUERIES, ids=range(len(BAD_QUERIES)))
def test_bad_input_is_answered_or_refused_never_an_error(world, login, query):
    owner = world.a.principal("owner")
    _page(owner, "Refund policy", "Refunds within thirty days.")
    try:
        search.search(owner, query)
    except search.ValidationFailed as err:
        assert "at most 200 characters" in err.message
    browser = login("owner@acme.test")
    url = "/search?q=" + quote(query, errors="surrogatepass")  # a lone half as its bytes
    page = browser.get(url)
    assert page.status_code in (200, 422), page.status_code
    box = browser.get(url, headers={"HX-Request": "true", "HX-Target": "#search-popup"})
    assert box.status_code in (200, 422)
    outcome = build_chat_toolset(SEARCH_ROUTES).execute(
        owner.via_assistant(1), "search", {"q": query}
    )
    assert outcome.ok or outcome.error, outcome


def test_fts_syntax_is_plain_words(world):
    owner = world.a.principal("owner")
    page = _page(owner, "Refund policy", "near the desk, and or not")
    assert ("wiki", page.id) in found(owner, 'NEAR("refund"')
    assert ("wiki", page.id) in found(owner, "title:refund")
    assert ("wiki", page.id) in found(owner, "-refund")  # not a NOT
    assert ("wiki", page.id) in found(owner, "refund\ud800")


def test_ten_thousand_characters_are_refused_with_why(world, login):
    page = login("owner@acme.test").get("/search", query_string={"q": "x" * 10_000})
    assert page.status_code == 422
    assert "at most 200 characters" in page.get_data(as_text=True)


def test_snippets_escape_content_and_mark_the_match(world, login):
    owner = world.a.principal("owner")
    _page(owner, "<i>Markup</i>", "<script>alert('zebu')</script> <b>zebu</b> \ue000zebu\ue001")
    browser = login("owner@acme.test")
    box = {"HX-Request": "true", "HX-Target": "#search-popup"}
    for html in (
        browser.get("/search?q=zebu").get_data(as_text=True),
        browser.get("/search?q=zebu", headers=box).get_data(as_text=True),
    ):
        assert "<script>alert" not in html and "<b>zebu" not in html and "<i>Markup" not in html
        assert "<mark>zebu</mark>" in html
        # a mark in the content is only text (taken out when indexed), never one of ours
        assert html.count("<mark>") == html.count("</mark>")


def test_the_header_box_answers_a_grouped_list(world, login):
    owner = world.a.principal("owner")
    page = _page(owner, "Onboarding", "the ibex checklist")
    factories.make_record(owner, world.a.model, "Ibex delivery")
    browser = login("owner@acme.test")
    box = browser.get(
        "/search?q=ibex", headers={"HX-Request": "true", "HX-Target": "#search-popup"}
    ).get_data(as_text=True)
    assert "<html" not in box
    assert box.index("Wiki pages") < box.index("Records")
    assert f'href="/wiki/{page.id}"' in box
    assert 'role="option"' in box
    full = browser.get("/search?q=ibex").get_data(as_text=True)
    assert "<html" in full and 'id="search-results"' in full
    assert 'id="search-q"' in browser.get("/models").get_data(as_text=True)  # the header's box


def test_the_tool_finds_the_wiki_page_first(world):
    owner = world.a.principal("owner")
    page = _page(owner, "Refunds", "Customers get their money back within 30 days.")
    factories.make_record(owner, world.a.model, "Call about a refund", notes="asked twice")
    chat = _conversation(owner, "Question", "what does our wiki say about refunds?")
    toolset = build_chat_toolset(SEARCH_ROUTES)
    outcome = toolset.execute(
        owner.via_assistant(chat.id), "search", {"q": "what does our wiki say about refunds?"}
    )
    assert outcome.ok, outcome
    results = outcome.result["results"]
    assert results[0]["kind"] == "wiki" and results[0]["id"] == page.id
    assert results[0]["url"] == f"/wiki/{page.id}"
    # the question it is answering is not a result of its own
    assert all(r["kind"] != "conversation" or r["id"] != chat.id for r in results)


def test_the_tool_never_finds_someone_elses_private_record(world):
    viewer = world.a.principal("viewer").via_assistant(1)
    outcome = build_chat_toolset(SEARCH_ROUTES).execute(viewer, "search", {"q": "private task"})
    assert outcome.ok
    assert world.a.private.id not in {
        r["id"] for r in outcome.result["results"] if r["kind"] == "record"
    }
    member = world.a.principal("member").via_assistant(1)
    outcome = build_chat_toolset(SEARCH_ROUTES).execute(member, "search", {"q": "private task"})
    assert world.a.private.id in {
        r["id"] for r in outcome.result["results"] if r["kind"] == "record"
    }


def test_the_tool_is_a_read_for_the_assistant_only(app):
    (route,) = SEARCH_ROUTES
    assert route.name == "search" and route.method == "GET" and not route.mutates
    assert route.audience == "assistant"


def test_reindex_rebuilds_the_index(app, world):
    owner = world.a.principal("owner")
    page = _page(owner, "Rebuilt", "the tapir page")
    automations.create_automation(owner, "Tapir mover", GRAPH)
    db.session.execute(SearchDocument.__table__.delete())
    db.session.commit()
    assert found(owner, "tapir") == set()
    result = app.test_cli_runner().invoke(args=["search", "reindex"])
    assert result.exit_code == 0, result.output
    assert "document" in result.output
    db.session.expire_all()
    assert {("wiki", page.id)} <= found(owner, "tapir")
    assert {k for k, _ in found(owner, "tapir")} == {"wiki", "automation"}
    assert ("record", world.a.private.id) not in found(world.a.principal("viewer"), "private")
