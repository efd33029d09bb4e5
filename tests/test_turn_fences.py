"""A turn never keeps what it may not: writes fenced by the call's state, Stop that reaches
a turn between steps, bytes a database refuses, a broker that hangs or fails."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from sqlalchemy import func, select, update

from monark.approvals import service as approval_service
from monark.assistant.stream import _Watch
from monark.chat.hooks import TurnHooks
from monark.chat.models import Conversation, Message, ToolCall
from monark.chat.turn import lease
from monark.chat.turn.start import SendInput, send_message
from monark.core.broker import RedisLog
from monark.extensions import db
from monark.records.models import Record
from tests.llm_script import Call, Say


class SettledMeanwhile:
    """A write tool whose call is settled as interrupted while it runs (as a turn that took
    the conversation over would): its write must not be kept."""

    from monark.chat.executor import ToolSpec

    spec = ToolSpec(
        name="settled_meanwhile",
        description="Writes a record while its call is settled elsewhere.",
        input_schema={"type": "object", "properties": {}},
        mutates=True,
    )

    def __init__(self, model_id: int):
        self.model_id = model_id

    def preview(self, principal, arguments):
        return {"headline": "write while settled"}

    def precheck(self, principal, arguments):
        return None

    def run(self, principal, arguments):
        from monark.chat.executor import ToolOutcome
        from monark.records.models import RecordModel
        from monark.records.services import create_record

        create_record(principal, db.session.get(RecordModel, self.model_id), {"title": "Kept?"})
        db.session.execute(
            update(ToolCall).where(ToolCall.status == "EXECUTING").values(status="FAILED")
        )
        return ToolOutcome(ok=True, result={"ok": True})


def test_a_write_whose_call_was_settled_meanwhile_keeps_nothing(world, scripted):
    from monark.api.routes import V1_ROUTES
    from monark.assistant.tools import build_chat_toolset
    from monark.chat.runtime import runtime

    state = runtime()
    original = state.executor
    state.executor = build_chat_toolset(V1_ROUTES, [SettledMeanwhile(world.a.model.id)])
    try:
        member = world.a.principal("member")
        scripted.script.add([Call("settled_meanwhile")], [Say("Told.")])
        proposed = send_message(member, SendInput(text="Do it"))
        call_id = db.session.scalar(select(ToolCall.id))
        approval_service.confirm_tool_call(member, call_id)
    finally:
        state.executor = original
    db.session.rollback()
    call = db.session.get(ToolCall, call_id)
    assert (call.status, call.error) == ("FAILED", lease.INTERRUPTED_CALL)
    assert db.session.scalar(select(func.count()).where(Record.title == "Kept?")) == 0
    assert proposed.status == "awaiting_confirmation"


class StopOnRead(TurnHooks):
    """Stop asked while the step's read runs."""

    def __init__(self) -> None:
        self.stop = False

    def on_tool_call(self, call) -> None:
        if call.status == "EXECUTING":
            self.stop = True

    def should_stop(self) -> bool:
        return self.stop


def test_stop_during_a_read_asks_the_model_nothing_more(world, scripted):
    scripted.script.add([Call("me_get")], [Say("Never asked.")])
    member = world.a.principal("member")
    result = send_message(member, SendInput(text="Who am I?"), hooks=StopOnRead())
    assert result.status == "stopped"
    assert len(scripted.requests) == 1
    db.session.rollback()
    texts = db.session.scalars(select(Message.text).where(Message.role == "assistant")).all()
    assert texts == [""]  # the step that asked for the read; no empty reply after it


def test_nul_from_the_model_is_stored_replaced(world, scripted):
    scripted.script.add(
        [Say("a\x00b"), Call("records_create", {"model": "tasks", "values": {"title": "x\x00y"}})]
    )
    member = world.a.principal("member")
    result = send_message(member, SendInput(text="Go"))
    assert result.status == "awaiting_confirmation"
    db.session.rollback()
    reply = db.session.scalar(select(Message).where(Message.role == "assistant"))
    call = db.session.scalar(select(ToolCall))
    assert reply.text == "a\ufffdb"
    assert call.input["values"]["title"] == "x\ufffdy"


def test_a_stop_for_another_turn_stops_nothing(world, login, fake_anthropic):
    fake_anthropic.chunk_delay = 0.05
    fake_anthropic.script.add([Say(" ".join(f"w{i}" for i in range(60)))])
    browser = login("member@acme.test")
    response = browser.client.post(
        "/chat/stream", data={"text": "Go", "csrf_token": browser.csrf}, buffered=False
    )
    chunks = iter(response.response)
    seen = ""
    for chunk in chunks:
        seen += chunk.decode() if isinstance(chunk, bytes) else chunk
        if "w2" in seen:
            break
    conversation_id = db.session.scalar(select(Conversation.id))
    wrong = browser.post(f"/chat/conversations/{conversation_id}/stop", {"turn": "0" * 32})
    assert wrong.status_code == 409
    for chunk in chunks:
        seen += chunk.decode() if isinstance(chunk, bytes) else chunk
    assert '"status": "done"' in seen and "w59" in seen


def test_a_streaming_reply_is_drawn_from_the_log_only(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("ok")])
    result = send_message(member, SendInput(text="Hi"))
    reply = db.session.scalar(select(Message).where(Message.role == "assistant"))
    reply.status, reply.text = "streaming", "saved ahead of the log"
    db.session.commit()
    watch = _Watch(member, result.conversation_id)
    frames = watch.message(reply.id)
    # Its saved text is not drawn: the entries read so far decide what the page shows,
    # so a reconnect that rebuilds from them never draws a word twice.
    assert "saved ahead" not in frames and watch.shown[reply.id] == 0
    assert "ahead" in watch.text(reply.id, 0, "saved ahead")


@pytest.fixture
def silent_server():
    """A TCP server that accepts connections and never says anything."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    listener.close()
    for conn in held:
        conn.close()


def test_a_broker_that_never_answers_fails_a_report_in_seconds(silent_server):
    log = RedisLog(silent_server)
    started = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 (redis' timeout error, whatever its class)
        log.append("turn", {"k": "t"})
    assert time.monotonic() - started < 5


class FailingLog:
    """A broker that is down: every read and report fails."""

    def __init__(self) -> None:
        self.reads = 0

    def append(self, key, entry):
        raise ConnectionError("broker down")

    def read(self, key, after, timeout):
        self.reads += 1
        raise ConnectionError("broker down")

    def valid_id(self, entry_id):
        return False


def test_with_the_broker_down_the_turn_ends_and_its_watcher_says_so(
    app, world, login, fake_anthropic
):
    fake_anthropic.chunk_delay = 0.05
    fake_anthropic.script.add([Say(" ".join(f"w{i}" for i in range(30)))])
    failing = FailingLog()
    saved = app.extensions.get("monark.progress_log")
    app.extensions["monark.progress_log"] = failing
    try:
        browser = login("member@acme.test")
        response = browser.post("/chat/stream", {"text": "Go"}, headers={"HX-Request": "true"})
        body = response.get_data(as_text=True)
        response.close()
    finally:
        app.extensions["monark.progress_log"] = saved
    assert "event: done" in body and "w29" in body  # drawn from the database at the end
    assert failing.reads < 10  # a broker that is down is not asked again at once


def test_a_turn_that_breaks_off_redraws_the_thread_and_says_so(world, login, scripted, monkeypatch):
    from monark.chat import loop  # _store_step is looked up in loop at call time

    def broken(*args, **kwargs):
        raise RuntimeError("storing the step failed")

    scripted.script.add([Say("Half a reply")])
    monkeypatch.setattr(loop, "_store_step", broken)
    browser = login("member@acme.test")
    response = browser.post("/chat/stream", {"text": "Go"}, headers={"HX-Request": "true"})
    body = response.get_data(as_text=True)
    response.close()
    # The whole thread, as settled: the cut reply is marked, with Retry and the notice.
    assert 'hx-target="#chat-thread" hx-swap="outerHTML"' in body
    assert "The reply broke off" in body and 'form="chat-retry"' in body
    assert "Something went wrong on our side" in body
    db.session.rollback()
    reply = db.session.scalar(select(Message).where(Message.role == "assistant"))
    assert (reply.status, reply.error) == ("incomplete", lease.INTERRUPTED_REPLY)
