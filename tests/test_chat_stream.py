"""POST /chat/stream and friends, through the Flask test client (no browser)."""

from __future__ import annotations

import json
import time

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.chat.models import Conversation, Message, ToolCall
from monark.extensions import db
from tests.llm_script import Call, Say
from tests.tuning import reconfigure


def frames(response) -> list[tuple[str | None, str]]:
    """(event, data) pairs of an SSE body; comment frames come back as ("comment", text)."""
    out = []
    for block in response.get_data(as_text=True).split("\n\n"):
        if not block.strip():
            continue
        event, data = None, []
        for line in block.split("\n"):
            if line.startswith(":"):
                event = "comment"
                data.append(line[1:].strip())
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        out.append((event, "\n".join(data)))
    return out


def post_stream(browser, text="Hi", **fields):
    """Post to /chat/stream and read the whole answer (the turn has ended when it returns)."""
    response = browser.post(
        "/chat/stream", {"text": text, **fields}, headers={"HX-Request": "true"}
    )
    return read(response)


def read(response):
    """Read a (possibly streamed) answer whole and close it, ending its request context."""
    response.get_data()
    response.close()
    return response


def test_a_turn_streams_as_sse_and_ends_with_done(world, login, scripted):
    scripted.script.add([Say("Hello there friend")])
    browser = login("member@acme.test")
    response = post_stream(browser, "Hello", page_route="/models/tasks/records", page_model="tasks")
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    assert response.headers["Cache-Control"].startswith("no-cache")
    assert response.headers["X-Accel-Buffering"] == "no"
    got = frames(response)
    assert got[0] == ("comment", "stream open")
    tokens = [d for e, d in got if e is None and '-text" hx-swap="beforeend"' in d]
    # Text that arrives faster than it is passed on travels in fewer, larger frames.
    assert tokens and "Hello" in tokens[0]
    assert "".join(BeautifulSoup(t, "html.parser").get_text() for t in tokens) == (
        "Hello there friend"
    )
    event, data = got[-1]
    assert event == "done"
    done = json.loads(data)
    conversation = db.session.scalar(select(Conversation))
    assert done == {"conversation_id": conversation.id, "status": "done"}
    assert conversation.title == "Hello"
    user = db.session.scalar(select(Message).where(Message.role == "user"))
    assert 'looking at the "tasks" model' in user.content[0]["text"]


def test_multi_line_fragments_use_one_data_line_each(world, login, scripted):
    scripted.script.add([Say("line one\nline two", chunks=1)])
    response = post_stream(login("member@acme.test"), "Two lines please")
    body = response.get_data(as_text=True)
    for block in body.split("\n\n"):
        for line in block.split("\n"):
            assert line == "" or line.startswith(("data: ", "event: ", "id: ", ":")), line


def test_the_stream_shows_a_proposed_write_as_a_card(world, login, scripted):
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "X"}})])
    response = post_stream(login("member@acme.test"), "Add X")
    body = response.get_data(as_text=True)
    assert "Wants to create a record in Tasks" in body
    assert 'value="confirm:' in body and 'value="reject:' in body
    event, data = frames(response)[-1]
    assert event == "done" and json.loads(data)["status"] == "awaiting_confirmation"


def test_confirm_streams_the_continuation(world, login, scripted):
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Via decide"}})],
        [Say("Created it")],
    )
    browser = login("member@acme.test")
    post_stream(browser, "Add")
    call_id = db.session.scalar(select(ToolCall.id))
    response = read(browser.post("/chat/decide", {"decision": f"confirm:{call_id}"}))
    body = response.get_data(as_text=True)
    assert response.mimetype == "text/event-stream"
    assert "Created it" in body and "Confirmed by" in body
    db.session.rollback()  # the test shares its session with the requests: drop stale rows
    again = read(browser.post("/chat/decide", {"decision": f"confirm:{call_id}"}))
    assert again.status_code == 409 and "already" in again.get_data(as_text=True)
    # A stale tab's card is replaced by the card as it is now: decided, no decision left
    # (only its Undo).
    card = BeautifulSoup(again.get_data(as_text=True), "html.parser").select_one(
        f'hx-partial[hx-target="#call-{call_id}"]'
    )
    assert card is not None and "Confirmed by" in card.get_text()
    assert [b.get_text() for b in card.select("button")] == ["Undo"]


def test_bad_input_answers_a_notice_not_a_stream(world, login, scripted):
    browser = login("member@acme.test")
    empty = post_stream(browser, "   ")
    assert empty.status_code == 422 and empty.mimetype == "text/html"
    assert "Write a message first" in empty.get_data(as_text=True)
    long = post_stream(browser, "x" * 16_001)
    assert long.status_code == 422 and "16000" in long.get_data(as_text=True)
    other = post_stream(browser, "Hi", conversation_id="999999")
    assert other.status_code == 404
    assert db.session.scalar(select(func.count()).select_from(Message)) == 0
    assert scripted.requests == []


def test_the_stream_needs_the_csrf_token(world, login, scripted):
    browser = login("member@acme.test")
    response = browser.client.post("/chat/stream", data={"text": "Hi"})
    assert response.status_code == 400
    assert db.session.scalar(select(func.count()).select_from(Message)) == 0


def test_a_closed_gate_answers_with_its_reason(world, login, scripted):
    world.a.org.ai_agent_enabled = False
    db.session.commit()
    response = post_stream(login("member@acme.test"))
    assert response.status_code == 403
    assert "turned the AI assistant off" in response.get_data(as_text=True)


def test_without_an_api_key_the_thread_says_so_with_retry(world, login, app):
    from monark.chat.runtime import set_llm_provider

    set_llm_provider(None)
    reconfigure(app, ANTHROPIC_API_KEY="")
    try:
        response = post_stream(login("member@acme.test"), "Anyone there?")
    finally:
        set_llm_provider(None)
    body = response.get_data(as_text=True)
    assert "ANTHROPIC_API_KEY" in body and 'form="chat-retry"' in body
    event, data = frames(response)[-1]
    assert event == "done" and json.loads(data)["status"] == "error"
    assert any(e == "error" for e, _ in frames(response))


def _assistant_message(wanted=lambda m: m.status != "streaming", seconds: float = 10):
    """The assistant's message once ``wanted`` holds for it (turns run on their own)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        db.session.rollback()
        message = db.session.scalar(select(Message).where(Message.role == "assistant"))
        if message is not None and wanted(message):
            return message
        time.sleep(0.05)
    raise AssertionError("the assistant's message never got there")


@pytest.mark.realtime
def test_closing_the_connection_leaves_the_turn_running_to_its_end(world, login, fake_anthropic):
    fake_anthropic.chunk_delay = 0.02
    fake_anthropic.script.add([Say(" ".join(f"w{i}" for i in range(100)))])
    browser = login("member@acme.test")
    response = browser.client.post(
        "/chat/stream", data={"text": "Go on", "csrf_token": browser.csrf}, buffered=False
    )
    seen = ""
    for chunk in response.response:
        seen += chunk.decode() if isinstance(chunk, bytes) else chunk
        if "w5" in seen:
            break
    response.close()  # what a closed tab looks like to the server
    message = _assistant_message(seconds=20)
    assert message.status == "complete" and message.text.endswith("w99")


def test_stop_endpoint_stops_a_running_turn(world, login, fake_anthropic):
    fake_anthropic.chunk_delay = 0.05
    fake_anthropic.script.add([Say(" ".join(f"w{i}" for i in range(200)))])
    browser = login("member@acme.test")
    response = browser.client.post(
        "/chat/stream", data={"text": "Go on", "csrf_token": browser.csrf}, buffered=False
    )
    seen = ""
    chunks = iter(response.response)
    for chunk in chunks:
        seen += chunk.decode() if isinstance(chunk, bytes) else chunk
        if "w3" in seen:
            break
    conversation_id = db.session.scalar(select(Conversation.id))
    stop = browser.post(f"/chat/conversations/{conversation_id}/stop")
    assert stop.status_code == 200 and stop.json["status"] == "stopped"
    for chunk in chunks:
        seen += chunk.decode() if isinstance(chunk, bytes) else chunk
    assert "event: done" in seen and '"status": "stopped"' in seen
    assert "incomplete" in seen
    db.session.rollback()
    message = db.session.scalar(select(Message).where(Message.role == "assistant"))
    assert message.status == "incomplete" and "w199" not in message.text
    again = browser.post(f"/chat/conversations/{conversation_id}/stop")
    assert again.status_code == 409 and again.json["status"] == "idle"


def test_panel_width_is_remembered_per_user(world, login):
    browser = login("member@acme.test")
    assert browser.post("/chat/panel/width", {"width": "512"}).status_code == 204
    assert 'data-width="512"' in browser.get("/models").get_data(as_text=True)
    assert browser.post("/chat/panel/width", {"width": "5000"}).status_code == 204
    assert 'data-width="960"' in browser.get("/models").get_data(as_text=True)
    other = login("viewer@acme.test").get("/models").get_data(as_text=True)
    assert 'data-width=""' in other


def test_conversations_are_private_to_their_owner(world, login, scripted):
    scripted.script.add([Say("Mine")])
    post_stream(login("member@acme.test"), "My secret topic")
    conversation_id = db.session.scalar(select(Conversation.id))
    for email in ("owner@acme.test", "member@globex.test"):
        browser = login(email)
        assert browser.get(f"/chat/conversations/{conversation_id}").status_code == 404
        assert "My secret topic" not in browser.get("/chat/conversations").get_data(as_text=True)
        rename = browser.post(f"/chat/conversations/{conversation_id}/rename", {"title": "Hacked"})
        assert rename.status_code == 404
    db.session.rollback()
    assert db.session.get(Conversation, conversation_id).title == "My secret topic"


def test_a_signed_out_htmx_request_reloads_to_the_login_page(app, world):
    response = app.test_client().post(
        "/chat/stream",
        data={"text": "Hi"},
        headers={"HX-Request": "true", "HX-Current-URL": "http://localhost/models/tasks/records"},
    )
    assert response.status_code in (204, 400)  # CSRF may answer first: no session, no token
    page = app.test_client().get(
        "/chat/conversations",
        headers={"HX-Request": "true", "HX-Current-URL": "http://localhost/models/tasks/records"},
    )
    assert page.status_code == 204
    assert page.headers["HX-Redirect"] == "/login?next=/models/tasks/records"


@pytest.mark.realtime
def test_no_database_connection_is_held_while_the_model_streams(world, login, fake_anthropic):
    fake_anthropic.chunk_delay = 0.05
    fake_anthropic.script.add([Say(" ".join(f"w{i}" for i in range(40)))])
    browser = login("member@acme.test")
    db.session.close()
    response = browser.client.post(
        "/chat/stream", data={"text": "Go on", "csrf_token": browser.csrf}, buffered=False
    )
    seen, held = "", []
    for chunk in response.response:
        seen += chunk.decode() if isinstance(chunk, bytes) else chunk
        if "w10" in seen and len(held) < 20:
            held.append(db.engine.pool.checkedout())
    response.close()
    # The turn saves its reply about once a second, for a moment (longer on a loaded
    # machine): a sample may catch it; a connection held for the stream would be in all.
    assert held and held.count(0) >= len(held) // 2, held
    assert "event: done" in seen


def test_a_waiting_card_comes_with_a_hint_about_sending_instead(world, login, scripted):
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "Wait"}})])
    browser = login("member@acme.test")
    body = post_stream(browser, "Add").get_data(as_text=True)
    assert "Sending a new message instead rejects it" in body
    scripted.script.add([Say("Fine.")])
    conversation_id = db.session.scalar(select(Conversation.id))
    after = post_stream(browser, "Never mind", conversation_id=str(conversation_id))
    assert (
        "Sending a new message instead rejects it"
        not in after.get_data(as_text=True).split("chat-thread")[-1]
    )
    # The card says it was skipped, not that the user typed a reason.
    assert "a new message was sent instead of a decision" in after.get_data(as_text=True)
    assert "The user sent a new message" not in after.get_data(as_text=True)


def test_without_an_api_key_the_thread_says_so_before_anyone_sends(world, login, app):
    from monark.chat.runtime import set_llm_provider

    set_llm_provider(None)
    reconfigure(app, ANTHROPIC_API_KEY="")
    try:
        page = login("member@acme.test").get("/chat/new").get_data(as_text=True)
    finally:
        set_llm_provider(None)
    assert "not connected to a model yet" in page
    assert "press Retry" not in page  # there is nothing to retry yet
    soup = BeautifulSoup(page, "html.parser")
    assert soup.select_one("#chat-text").has_attr("disabled")
    assert soup.select_one("button.chat-send").has_attr("disabled")


def test_the_record_in_focus_reaches_the_model_with_its_title(world, login, scripted):
    scripted.script.add([Say("Noted.")], [Say("Noted.")])
    public_id, private_id = world.a.public.id, world.a.private.id
    private_title = world.a.private.title
    browser = login("viewer@acme.test")

    def ask(text: str, record_id: int) -> str:
        read(
            post_stream(
                browser,
                text,
                page_route=f"/models/tasks/records/{record_id}",
                page_model="tasks",
                page_record_id=str(record_id),
            )
        )
        return scripted.requests[-1].messages[-1].content[0].text

    sentence = ask("What about this one?", public_id)
    assert f'record {public_id} of the "tasks" model (titled "Acme public task")' in sentence
    # A record the user may not see (the member's private one) is not named, nor its id.
    second = ask("And this?", private_id)
    assert private_title not in second and f"record {private_id}" not in second


def test_retry_after_a_complete_reply_is_refused(world, login, scripted):
    scripted.script.add([Say("All done.")])
    browser = login("member@acme.test")
    post_stream(browser, "Hello")
    conversation_id = db.session.scalar(select(Conversation.id))
    again = read(browser.post("/chat/retry", {"conversation_id": str(conversation_id)}))
    assert again.status_code == 409 and "Nothing to retry" in again.get_data(as_text=True)
    db.session.rollback()
    replies = db.session.scalar(
        select(func.count()).select_from(Message).where(Message.role == "assistant")
    )
    assert replies == 1


def test_a_send_refused_while_another_tabs_turn_runs_brings_a_follower(
    world, login, fake_anthropic
):
    fake_anthropic.chunk_delay = 0.05
    fake_anthropic.script.add([Say(" ".join(f"w{i}" for i in range(40)))])
    browser = login("member@acme.test")
    response = browser.client.post(
        "/chat/stream", data={"text": "First", "csrf_token": browser.csrf}, buffered=False
    )
    chunks = iter(response.response)
    seen = ""
    for chunk in chunks:
        seen += chunk.decode() if isinstance(chunk, bytes) else chunk
        if "w2" in seen:
            break
    conversation_id = db.session.scalar(select(Conversation.id))
    other_tab = login("member@acme.test")
    busy = read(
        other_tab.post("/chat/stream", {"text": "Me too", "conversation_id": conversation_id})
    )
    body = busy.get_data(as_text=True)
    assert busy.status_code == 409 and "still being written" in body
    follower = BeautifulSoup(body, "html.parser").select_one("#chat-follow")
    assert follower is not None and follower["hx-trigger"] == "chat:resume"
    assert follower["hx-sse:connect"].endswith(f"/chat/conversations/{conversation_id}/follow")
    for chunk in chunks:
        seen += chunk.decode() if isinstance(chunk, bytes) else chunk
    response.close()
