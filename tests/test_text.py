"""Lone UTF-16 surrogates already stored (JSON columns keep them) never break a page."""

from __future__ import annotations

import json

from bs4 import BeautifulSoup
from markupsafe import Markup

from monark.chat import store
from monark.chat.models import ToolCall
from monark.chat.turn.start import SendInput, send_message
from monark.core.markdown import pretty_json, render_markdown
from monark.core.text import has_surrogate, scalar_text, scrub
from monark.extensions import db
from monark.records.models import Record
from tests.llm_script import Call, Say

LONE = "sur\ud800rogate"
SHOWN = "sur\ufffdrogate"


def test_scrub_replaces_lone_halves_and_rejoins_split_pairs():
    assert scrub("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    assert scrub("\ud83d\ude00") == "\U0001f600"  # a pair held as two code points
    assert scrub("\ud800\ud83d\ude00") == "\ufffd\U0001f600"
    assert not has_surrogate(scrub("x\udc00" * 3))


def test_scrub_keeps_clean_text_as_it_is():
    for text in ("plain", "héllo wörld", "\U0001f600", ""):
        assert scrub(text) is text
    assert scrub(None) is None and scrub(42) == 42


def test_scrub_walks_dicts_lists_and_tuples():
    value = {"k\ud800": [LONE, ("t\udc00", 1)], "n": None}
    assert scrub(value) == {"k\ufffd": [SHOWN, ("t\ufffd", 1)], "n": None}


def test_scrub_keeps_markup_as_markup():
    cleaned = scrub(Markup("<b>" + LONE + "</b>"))
    assert isinstance(cleaned, Markup) and cleaned == Markup(f"<b>{SHOWN}</b>")


def test_scalar_text_writes_a_json_value_plainly():
    assert scalar_text(None) == ""
    assert scalar_text(2.0) == "2"  # JSON's 2 and 2.0 are one number
    assert scalar_text(2.5) == "2.5"
    assert scalar_text(-3) == "-3"
    assert scalar_text("two") == "two"


def test_markdown_and_json_renderers_take_lone_surrogates():
    assert SHOWN in render_markdown(f"**{LONE}**")
    assert SHOWN in pretty_json({"note": LONE, LONE: 1})


def test_tool_calls_holding_a_lone_surrogate_still_show_their_cards(world, login):
    member = world.a.principal("member")
    chat = store.create_conversation(member, "Surrogates")
    mine = {"author_kind": "user", "author_user_id": member.user_id, "role": "user"}
    store.add_message(chat, member, text="Add a note", **mine)
    reply = store.add_message(
        chat, member.via_assistant(chat.id), author_kind="agent", role="assistant", text="Done."
    )
    common = {"org_id": world.a.org.id, "conversation_id": chat.id, "message_id": reply.id}
    write = ToolCall(
        **common,
        position=0,
        provider_call_id="toolu_write",
        name="records_create",
        input={"model": "tasks", "values": {"title": LONE}},
        preview={"headline": f"create {LONE}", "changes": [{"field": "title", "after": LONE}]},
        mutates=True,
        status="PROPOSED",
    )
    read = ToolCall(
        **common,
        position=1,
        provider_call_id="toolu_read",
        name="records_get",
        input={"model": "tasks", LONE: 1},
        result={"title": LONE},
        mutates=False,
        status="SUCCEEDED",
    )
    db.session.add_all([write, read])
    db.session.commit()
    response = login("member@acme.test").get(f"/chat/conversations/{chat.id}")
    assert response.status_code == 200
    soup = BeautifulSoup(response.get_data(as_text=True), "html.parser")
    write_card = soup.select_one(f"#call-{write.id}")
    assert SHOWN in write_card.select_one(".call-head").get_text()
    assert SHOWN in write_card.select_one(".call-changes").get_text()
    assert SHOWN in write_card.select_one(".call-input").get_text()
    read_json = [pre.get_text() for pre in soup.select(f"#call-{read.id} pre.call-json")]
    assert len(read_json) == 2 and all(SHOWN in text for text in read_json)


def test_a_record_value_holding_a_lone_surrogate_still_shows(world, login):
    record = db.session.get(Record, world.a.public.id)
    record.values = {**record.values, "notes": f"line one\n{LONE}", "status": LONE}
    db.session.commit()
    owner = login("owner@acme.test")
    detail = owner.get(f"/models/tasks/records/{record.id}")
    assert detail.status_code == 200
    assert f"line one\n{SHOWN}" in detail.get_data(as_text=True)
    listing = owner.get("/models/tasks/records")
    assert listing.status_code == 200 and SHOWN in listing.get_data(as_text=True)


def test_a_tool_reading_a_stored_lone_surrogate_still_reaches_the_model(world, fake_anthropic):
    """The real SDK sends UTF-8: a lone surrogate in a tool result would end the turn."""
    record = db.session.get(Record, world.a.public.id)
    record.values = {**record.values, "notes": LONE}
    db.session.commit()
    fake_anthropic.script.add(
        [Call("records_get", {"model": "tasks", "record_id": record.id})], [Say("Read it.")]
    )
    result = send_message(world.a.principal("member"), SendInput(text="Read it"))
    assert result.status == "done", result.error
    sent = json.dumps(fake_anthropic.requests[-1]["messages"], ensure_ascii=False)
    assert SHOWN in sent
