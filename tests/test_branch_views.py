"""The panel's Regenerate, Edit and version switch over HTTP: CSRF, ownership, refusals that
say why, stale and forged ids, and the thread they draw."""

from __future__ import annotations

import json

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.assistant.versions import Spot, spots
from monark.chat import branches
from monark.chat.models import Conversation, Message, ToolCall
from monark.chat.turn.branching import REGENERATE_WAITS, SWITCH_WAITS
from monark.core.models import User
from monark.extensions import db
from tests.llm_script import Call, Say
from tests.test_chat_stream import frames, post_stream, read
from tests.tuning import configure


def conversation_id() -> int:
    db.session.rollback()
    return db.session.scalar(select(Conversation.id).order_by(Conversation.id.desc()))


def message_id(text: str) -> int:
    db.session.rollback()
    return db.session.scalar(select(Message.id).where(Message.text == text))


def messages() -> int:
    db.session.rollback()
    return db.session.scalar(select(func.count()).select_from(Message))


def thread(browser, cid: int) -> BeautifulSoup:
    response = browser.get(f"/chat/conversations/{cid}", headers={"HX-Request": "true"})
    assert response.status_code == 200
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def test_where_each_message_stands_among_its_versions(world):
    class R:
        def __init__(self, id, parent_id):
            self.id, self.parent_id = id, parent_id

    rows = [R(1, None), R(2, 1), R(3, 1), R(4, 3), R(5, None)]
    found = spots(rows, branches.active_path(rows, 4), branched=True)
    assert found[1] == Spot(1, 2, None, 5) and found[3] == Spot(2, 2, 2, None)


def regenerate(browser, cid: int):
    return read(
        browser.post(
            "/chat/regenerate", {"conversation_id": str(cid)}, headers={"HX-Request": "true"}
        )
    )


def switch(browser, cid: int, mid: int, **kw):
    return browser.post(f"/chat/conversations/{cid}/versions/{mid}", **kw)


def versions(soup: BeautifulSoup) -> list[str]:
    return [n.get_text(strip=True) for n in soup.select(".msg-branch-count")]


def assistant_texts(soup: BeautifulSoup) -> list[str]:
    return [n.get_text(strip=True) for n in soup.select(".msg-assistant .md")]


def test_regenerate_streams_a_second_version_and_the_thread_offers_both(world, login, scripted):
    scripted.script.add([Say("First take.")], [Say("Second take.")])
    browser = login("member@acme.test")
    post_stream(browser, "Write a haiku")
    cid = conversation_id()
    before = thread(browser, cid)
    (button,) = before.select('#chat-thread-foot button[form="chat-regenerate"]')
    assert button.get_text(strip=True) == "Regenerate"
    response = regenerate(browser, cid)
    assert response.status_code == 200
    event, data = frames(response)[-1]
    assert event == "done" and json.loads(data)["status"] == "done"
    body = response.get_data(as_text=True)
    assert "Second take." in body and "2/2" in body  # the end drew the whole thread
    soup = thread(browser, cid)
    assert assistant_texts(soup) == ["Second take."] and versions(soup) == ["2/2"]
    nav = soup.select_one(".msg-branch")
    previous = nav.find("button", attrs={"aria-label": "Previous version"})
    following = nav.find("button", attrs={"aria-label": "Next version"})
    assert following.has_attr("disabled") and not previous.has_attr("disabled")
    first = message_id("First take.")
    assert previous["hx-post"] == f"/chat/conversations/{cid}/versions/{first}"
    # Back to the first version.
    answer = switch(browser, cid, first)
    assert answer.status_code == 200
    switched = BeautifulSoup(answer.get_data(as_text=True), "html.parser")
    assert assistant_texts(switched) == ["First take."] and versions(switched) == ["1/2"]
    assert switched.select('button[form="chat-regenerate"]')  # its foot drawn with it
    assert assistant_texts(thread(browser, cid)) == ["First take."]


def test_the_switch_is_refused_with_why_once_the_user_turned_the_assistant_off(
    world, login, scripted
):
    scripted.script.add([Say("One.")], [Say("Two.")])
    browser = login("member@acme.test")
    post_stream(browser, "Hi")
    cid = conversation_id()
    regenerate(browser, cid)
    one, member = (
        message_id("One."),
        db.session.scalar(select(User).where(User.email == "member@acme.test")),
    )
    member.ai_agent_enabled = False
    db.session.commit()
    response = switch(browser, cid, one)
    assert response.status_code == 403
    assert "You turned the AI assistant off" in response.get_data(as_text=True)
    member.ai_agent_enabled = True
    db.session.commit()
    assert assistant_texts(thread(browser, cid)) == ["Two."]


def test_switches_count_with_the_decisions_per_minute(app, world, login, scripted, monkeypatch):
    configure(monkeypatch, app, LIMIT_DECISIONS_PER_MINUTE=2)
    scripted.script.add([Say("One.")], [Say("Two.")])
    browser = login("member@acme.test")
    post_stream(browser, "Hi")
    cid = conversation_id()
    regenerate(browser, cid)
    one, two = message_id("One."), message_id("Two.")
    assert switch(browser, cid, one).status_code == 200
    assert switch(browser, cid, two).status_code == 200
    refused = switch(browser, cid, one)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert "Too many decisions" in refused.get_data(as_text=True)
    assert assistant_texts(thread(browser, cid)) == ["Two."]


def test_regenerate_while_a_card_waits_is_refused_with_why(world, login, scripted):
    scripted.script.add(
        [Say("Shall I?"), Call("records_create", {"model": "tasks", "values": {"title": "X"}})]
    )
    browser = login("member@acme.test")
    post_stream(browser, "Add X")
    cid = conversation_id()
    assert not thread(browser, cid).select('button[form="chat-regenerate"]')  # not offered
    count = messages()
    response = regenerate(browser, cid)
    assert response.status_code == 409
    assert REGENERATE_WAITS in response.get_data(as_text=True)
    assert messages() == count and len(scripted.requests) == 1
    assert db.session.scalar(select(ToolCall.status)) == "PROPOSED"


def test_switching_while_a_card_waits_is_refused_with_why(world, login, scripted):
    scripted.script.add(
        [Say("One.")],
        [Say("Two.")],
        [Say("Shall I?"), Call("records_create", {"model": "tasks", "values": {"title": "X"}})],
    )
    browser = login("member@acme.test")
    post_stream(browser, "Hi")
    cid = conversation_id()
    regenerate(browser, cid)
    post_stream(browser, "Add X", conversation_id=str(cid))
    response = switch(browser, cid, message_id("One."))
    assert response.status_code == 409 and SWITCH_WAITS in response.get_data(as_text=True)
    assert "Add X" in thread(browser, cid).get_text()


def test_the_switch_needs_the_csrf_token(world, login, scripted):
    scripted.script.add([Say("One.")], [Say("Two.")])
    browser = login("member@acme.test")
    post_stream(browser, "Hi")
    cid = conversation_id()
    regenerate(browser, cid)
    first = message_id("One.")
    browser._fresh_user()  # a request without the token, as a forged form would send
    response = browser.client.post(f"/chat/conversations/{cid}/versions/{first}")
    assert response.status_code == 400
    assert assistant_texts(thread(browser, cid)) == ["Two."]


@pytest.mark.parametrize("path", ["/chat/regenerate", "/chat/edit"])
def test_regenerate_and_edit_need_the_csrf_token(world, login, scripted, path):
    scripted.script.add([Say("One.")])
    browser = login("member@acme.test")
    post_stream(browser, "Hi")
    mid = message_id("Hi")
    data = {"conversation_id": str(conversation_id()), "message_id": str(mid), f"text_{mid}": "X"}
    browser._fresh_user()
    assert browser.client.post(path, data=data).status_code == 400
    assert messages() == 2


def test_another_persons_conversation_is_not_found(world, login, scripted):
    scripted.script.add([Say("One.")], [Say("Two.")])
    owner = login("member@acme.test")
    post_stream(owner, "Mine")
    cid = conversation_id()
    regenerate(owner, cid)
    first = message_id("One.")
    for email in ("admin@acme.test", "member@globex.test"):
        other = login(email)
        assert switch(other, cid, first).status_code == 404
        assert regenerate(other, cid).status_code == 404
        mid = message_id("Mine")
        edited = other.post("/chat/edit", {"message_id": str(mid), f"text_{mid}": "Theirs"})
        assert read(edited).status_code == 404
    assert assistant_texts(thread(owner, cid)) == ["Two."]
    assert messages() == 3


def test_stale_and_forged_ids_are_not_found_never_an_error(world, login, scripted):
    scripted.script.add([Say("One.")], [Say("Two.")], [Say("Elsewhere.")])
    browser = login("member@acme.test")
    post_stream(browser, "Hi")
    cid = conversation_id()
    regenerate(browser, cid)
    post_stream(browser, "Another conversation")
    elsewhere = message_id("Elsewhere.")
    assert switch(browser, cid, elsewhere).status_code == 404
    assert switch(browser, cid, 10**12).status_code == 404
    assert switch(browser, 10**12, message_id("One.")).status_code == 404
    assert browser.post(f"/chat/conversations/{cid}/versions/abc").status_code == 404
    assert regenerate(browser, 2**31 - 2).status_code == 404
    bad = read(browser.post("/chat/regenerate", {"conversation_id": "x"}))
    assert bad.status_code == 400 and "conversation_id" in bad.get_data(as_text=True)
    forged = read(browser.post("/chat/edit", {"message_id": "10000000", "text_10000000": "Hi"}))
    assert forged.status_code == 404
    bad = read(browser.post("/chat/edit", {"message_id": "1e3", "text_1e3": "Hi"}))
    assert bad.status_code == 400 and "message_id" in bad.get_data(as_text=True)
    # A version shown already: nothing changes, the thread is drawn as it is.
    shown = switch(browser, cid, message_id("Two."))
    assert shown.status_code == 200 and "Two." in shown.get_data(as_text=True)


def test_edit_sends_a_new_version_of_the_last_message(world, login, scripted):
    scripted.script.add([Say("Paris.")], [Say("Rome.")])
    browser = login("member@acme.test")
    post_stream(browser, "Capital of France?")
    cid = conversation_id()
    old = message_id("Capital of France?")
    soup = thread(browser, cid)
    (box,) = soup.select(f'textarea[name="text_{old}"]')
    assert box["form"] == "chat-edit" and box.get_text() == "Capital of France?"
    (send,) = soup.select('button[form="chat-edit"][name="message_id"]')
    assert send["value"] == str(old) and send.get_text(strip=True) == "Save and send"
    assert soup.find("button", string="Edit") is not None
    response = read(
        browser.post(
            "/chat/edit",
            {"message_id": str(old), f"text_{old}": "Capital of Italy?"},
            headers={"HX-Request": "true"},
        )
    )
    assert response.status_code == 200 and "Rome." in response.get_data(as_text=True)
    soup = thread(browser, cid)
    assert [n.get_text() for n in soup.select(".msg-user .bubble")] == ["Capital of Italy?"]
    assert versions(soup) == ["2/2"]
    assert assistant_texts(soup) == ["Rome."]
    # The first wording, with its answer, is one click away.
    switched = switch(browser, cid, old).get_data(as_text=True)
    assert "Capital of France?" in switched and "Paris." in switched and "1/2" in switched


@pytest.mark.parametrize("text", ["", "   ", "x" * 16_001])
def test_a_bad_edit_names_the_field_and_stores_nothing(world, login, scripted, text):
    scripted.script.add([Say("One.")])
    browser = login("member@acme.test")
    post_stream(browser, "Hi")
    mid = message_id("Hi")
    response = read(browser.post("/chat/edit", {"message_id": str(mid), f"text_{mid}": text}))
    assert response.status_code == 422 and "Edit message:" in response.get_data(as_text=True)
    assert messages() == 2


def test_editing_an_earlier_message_is_refused_with_why(world, login, scripted):
    scripted.script.add([Say("One.")], [Say("Two.")])
    browser = login("member@acme.test")
    post_stream(browser, "First")
    post_stream(browser, "Second", conversation_id=str(conversation_id()))
    mid = message_id("First")
    response = read(browser.post("/chat/edit", {"message_id": str(mid), f"text_{mid}": "X"}))
    assert response.status_code == 409
    assert "Only your last message can be edited" in response.get_data(as_text=True)
    assert messages() == 4


def test_an_edited_message_stays_text_not_markup(world, login, scripted):
    scripted.script.add([Say("One.")], [Say("Two.")])
    browser = login("member@acme.test")
    post_stream(browser, "Hi")
    mid = message_id("Hi")
    evil = "<img src=x onerror=alert(1)>"
    read(browser.post("/chat/edit", {"message_id": str(mid), f"text_{mid}": evil}))
    soup = thread(browser, conversation_id())
    assert soup.find("img") is None
    assert soup.select(".msg-user .bubble")[0].get_text() == evil


def test_feedback_stays_with_the_reply_it_was_given_for(world, login, scripted):
    scripted.script.add([Say("First take.")], [Say("Second take.")])
    browser = login("member@acme.test")
    post_stream(browser, "Write a haiku")
    cid = conversation_id()
    first = message_id("First take.")
    assert browser.post(f"/chat/messages/{first}/feedback", {"rating": "down"}).status_code == 200
    regenerate(browser, cid)
    second = message_id("Second take.")
    soup = thread(browser, cid)
    assert soup.select_one(f"#feedback-{second} .feedback-down")["aria-pressed"] == "false"
    switched = BeautifulSoup(switch(browser, cid, first).get_data(as_text=True), "html.parser")
    assert switched.select_one(f"#feedback-{first} .feedback-down")["aria-pressed"] == "true"


def test_the_conversation_search_finds_every_version(world, login, scripted):
    scripted.script.add([Say("Aubergine soup.")], [Say("Courgette bread.")])
    browser = login("member@acme.test")
    post_stream(browser, "A recipe please")
    cid = conversation_id()
    regenerate(browser, cid)
    for word in ("Aubergine", "Courgette"):
        found = browser.get(f"/chat/conversations?q={word}", headers={"HX-Request": "true"})
        assert found.status_code == 200
        assert f"/chat/conversations/{cid}" in found.get_data(as_text=True), word


def test_a_group_decided_on_a_second_version_keeps_its_versions_drawn(world, login, scripted):
    def create(title):
        return Call("records_create", {"model": "tasks", "values": {"title": title}})

    scripted.script.add(
        [Say("Nothing to do.")], [create("One"), create("Two")], [Say("Both added.")]
    )
    browser = login("member@acme.test")
    post_stream(browser, "Add One and Two")
    cid = conversation_id()
    regenerate(browser, cid)
    db.session.rollback()
    calls = db.session.scalars(select(ToolCall).order_by(ToolCall.id)).all()
    group = calls[0].message_id
    response = read(
        browser.post(
            "/chat/decide-group",
            {"decision": f"confirm:{group}", "selected": [str(c.id) for c in calls]},
        )
    )
    assert response.status_code == 200
    first = response.get_data(as_text=True).split("event:")[0]  # the group's frame, first
    assert f'id="msg-{group}"' in first and "2/2" in first


def test_a_regenerate_cut_off_before_its_reply_offers_the_earlier_one_back(world, login, scripted):
    from monark.chat import branches

    scripted.script.add([Say("First take.")])
    browser = login("member@acme.test")
    post_stream(browser, "Write a haiku")
    cid = conversation_id()
    # Where a Regenerate stopped (or its process died) before the new reply's first save
    # leaves the conversation: the head back on the question, the old reply set aside.
    asked, first = message_id("Write a haiku"), message_id("First take.")
    conversation = db.session.get(Conversation, cid)
    branches.ensure_tree(conversation)
    conversation.head_id = asked
    db.session.commit()
    soup = thread(browser, cid)
    assert assistant_texts(soup) == []  # the path ends at the question, with Retry
    assert soup.select('#chat-thread-foot button[form="chat-retry"]')
    (back,) = [
        b for b in soup.select("#chat-thread-foot button") if "earlier reply" in b.get_text()
    ]
    assert back["hx-post"] == f"/chat/conversations/{cid}/versions/{first}"
    answer = switch(browser, cid, first)
    assert answer.status_code == 200
    assert assistant_texts(thread(browser, cid)) == ["First take."]
    assert not [b for b in thread(browser, cid).select("button") if "earlier" in b.get_text()]
