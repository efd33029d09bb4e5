"""Faults a turn must survive, injected with the real SDK and the fake Messages API: a
provider that never answers, one overloaded on every try, an error event mid-stream, the
database failing during a write tool, and bytes no encoder accepts."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.exc import OperationalError

from monark.approvals import service as approval_service
from monark.chat.models import Conversation, Message, ToolCall
from monark.chat.runtime import llm_provider, set_llm_provider
from monark.chat.turn import lease
from monark.chat.turn.run import run_turn
from monark.chat.turn.start import SendInput, begin_retry, send_message
from monark.extensions import db
from monark.records.models import Record
from tests.llm_script import Call, Fail, HttpFail, Say
from tests.tuning import reconfigure


@pytest.fixture
def silence(app, fake_anthropic):
    """Set the provider's silence limit (and SDK read timeout) to ``seconds``."""
    saved = app.config["CHAT_LLM_TIMEOUT"]

    import anthropic  # noqa: F401  (its first import takes longer than the limits set here)

    def set_to(seconds: float) -> None:
        reconfigure(app, CHAT_LLM_TIMEOUT=seconds)
        set_llm_provider(None)
        llm_provider()

    yield set_to
    reconfigure(app, CHAT_LLM_TIMEOUT=saved)
    set_llm_provider(None)


def _messages(conversation_id: int) -> list[Message]:
    db.session.rollback()
    return list(
        db.session.scalars(
            select(Message).where(Message.conversation_id == conversation_id).order_by(Message.seq)
        )
    )


@pytest.mark.realtime
def test_stop_interrupts_a_turn_waiting_on_a_provider_that_never_answers(
    world, login, fake_anthropic
):
    fake_anthropic.hang = threading.Event()
    browser = login("member@acme.test")
    response = browser.client.post(
        "/chat/stream", data={"text": "Anyone there?", "csrf_token": browser.csrf}, buffered=False
    )
    chunks = iter(response.response)
    next(chunks)  # the stream is open; the provider holds the request and says nothing
    conversation_id = db.session.scalar(select(Conversation.id))
    deadline = time.monotonic() + 5
    while not fake_anthropic.arrivals and time.monotonic() < deadline:
        time.sleep(0.01)  # until the request is with the provider, which holds it
    started = time.monotonic()
    stop = browser.post(f"/chat/conversations/{conversation_id}/stop")
    assert stop.status_code == 200 and stop.json["status"] == "stopped"
    rest = "".join(c.decode() if isinstance(c, bytes) else c for c in chunks)
    assert time.monotonic() - started < 2.0
    assert '"status": "stopped"' in rest
    fake_anthropic.hang.set()
    reply = _messages(conversation_id)[-1]
    assert (reply.role, reply.status, reply.text) == ("assistant", "incomplete", "")


@pytest.mark.realtime
def test_a_stopped_turn_sends_the_provider_nothing_more(world, login, fake_anthropic, silence):
    """The SDK retries a request that timed out; once the turn is stopped it must not:
    every retry would be a provider call (and its cost) nobody is waiting for."""
    silence(1.0)  # the SDK's read timeout: the hung request gives up after a second
    fake_anthropic.hang = threading.Event()
    browser = login("member@acme.test")
    response = browser.client.post(
        "/chat/stream", data={"text": "Anyone there?", "csrf_token": browser.csrf}, buffered=False
    )
    chunks = iter(response.response)
    next(chunks)
    deadline = time.monotonic() + 5
    while not fake_anthropic.arrivals and time.monotonic() < deadline:
        time.sleep(0.01)  # the request is with the provider, which holds it
    conversation_id = db.session.scalar(select(Conversation.id))
    stop = browser.post(f"/chat/conversations/{conversation_id}/stop")
    assert stop.json["status"] == "stopped"
    "".join(c.decode() if isinstance(c, bytes) else c for c in chunks)
    time.sleep(4.0)  # the read timeout, then the SDK's two retries with their back-off
    assert fake_anthropic.arrivals == 1
    fake_anthropic.hang.set()


@pytest.mark.realtime
def test_a_silent_provider_fails_the_step_after_the_configured_time(world, fake_anthropic, silence):
    silence(1.0)
    fake_anthropic.hang = threading.Event()
    member = world.a.principal("member")
    started = time.monotonic()
    result = send_message(member, SendInput(text="Hello?"))
    took = time.monotonic() - started
    fake_anthropic.hang.set()
    # The abandoned request ends now; the next one gets the next step of the script.
    deadline = time.monotonic() + 5
    while not fake_anthropic.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert result.status == "error" and "sent nothing for 1 seconds" in result.error
    assert 1.0 <= took < 3.0
    fake_anthropic.hang = None
    fake_anthropic.script.add([Say("Here now.")])
    again = run_turn(begin_retry(member, result.conversation_id))
    assert again.status == "done"
    assert _messages(result.conversation_id)[-1].text == "Here now."


@pytest.mark.realtime
def test_overloaded_on_every_try_is_a_clear_error_and_retry_works_later(world, fake_anthropic):
    fake_anthropic.script.add(*[[HttpFail(529, "Overloaded", "overloaded_error")]] * 3)
    member = world.a.principal("member")
    result = send_message(member, SendInput(text="Busy?"))
    assert len(fake_anthropic.requests) == 3  # the first try and the SDK's two retries
    assert result.status == "error" and result.error == "Overloaded (overloaded_error)"
    error = _messages(result.conversation_id)[-1]
    assert (error.status, error.error) == ("error", "Overloaded (overloaded_error)")
    fake_anthropic.script.add([Say("Better now.")])
    assert run_turn(begin_retry(member, result.conversation_id)).status == "done"
    assert _messages(result.conversation_id)[-1].text == "Better now."


def test_an_error_event_mid_stream_keeps_the_text_and_retry_goes_on(world, fake_anthropic):
    fake_anthropic.script.add([Say("Half of the"), Fail("Overloaded")], [Say("Whole answer.")])
    member = world.a.principal("member")
    result = send_message(member, SendInput(text="Go"))
    assert result.status == "error"
    cut = _messages(result.conversation_id)[-1]
    assert (cut.status, cut.text) == ("incomplete", "Half of the")
    assert "Overloaded" in cut.error
    assert run_turn(begin_retry(member, result.conversation_id)).status == "done"
    assert [m.status for m in _messages(result.conversation_id)] == [
        "complete",
        "incomplete",
        "complete",
    ]
    # The model heard what it had said before the break.
    assert "Half of the" in str(fake_anthropic.requests[-1]["messages"])


class _FailingWrites:
    """Make the database refuse statements that match a rule: a statement's start, or a
    tuple of a start and words it must contain."""

    def __init__(self, *rules: str | tuple[str, ...]):
        self.rules = [(r,) if isinstance(r, str) else r for r in rules]
        self.hits = 0

    def _matches(self, statement: str) -> bool:
        text = statement.lstrip()
        return any(
            text.upper().startswith(start.upper()) and all(w in text for w in words)
            for start, *words in self.rules
        )

    def __call__(self, conn, cursor, statement, parameters, context, executemany):
        if self._matches(statement):
            self.hits += 1
            raise OperationalError(statement, parameters, Exception("database unavailable"))

    def __enter__(self):
        event.listen(db.engine, "before_cursor_execute", self)
        return self

    def __exit__(self, *exc):
        event.remove(db.engine, "before_cursor_execute", self)


def _propose_task(member, scripted, title: str) -> int:
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": title}})],
        [Say("Reported.")],
    )
    result = send_message(member, SendInput(text=f"Add {title}"))
    assert result.status == "awaiting_confirmation"
    return db.session.scalar(select(ToolCall.id).where(ToolCall.status == "PROPOSED"))


def test_the_database_failing_during_a_write_fails_the_call_and_keeps_nothing(world, scripted):
    member = world.a.principal("member")
    call_id = _propose_task(member, scripted, "Never written")
    with _FailingWrites("INSERT INTO records") as failing:
        result = approval_service.confirm_tool_call(member, call_id)
    assert failing.hits >= 1
    assert result.status == "done"  # the model heard of the failure and answered
    db.session.rollback()
    call = db.session.get(ToolCall, call_id)
    assert call.status == "FAILED" and call.error
    assert db.session.scalar(select(func.count()).where(Record.title == "Never written")) == 0
    scripted.script.add([Say("Still here.")])
    again = send_message(member, SendInput(text="And now?", conversation_id=call.conversation_id))
    assert again.status == "done"


def test_a_call_whose_result_could_not_be_stored_ends_failed_and_keeps_nothing(world, scripted):
    member = world.a.principal("member")
    call_id = _propose_task(member, scripted, "Half way")
    with (
        # The write, then storing the call's result: both refused.
        _FailingWrites("INSERT INTO records", ("UPDATE chat_tool_calls", "duration_ms")) as failing,
        pytest.raises(OperationalError),
    ):
        approval_service.confirm_tool_call(member, call_id)
    assert failing.hits >= 2
    db.session.rollback()
    call = db.session.get(ToolCall, call_id)
    # The turn broke off, and settled what it left: no call stays EXECUTING.
    assert (call.status, call.error) == ("FAILED", lease.INTERRUPTED_CALL)
    conversation = db.session.get(Conversation, call.conversation_id)
    assert conversation.turn_id is None  # the turn gave its claim back all the same
    assert db.session.scalar(select(func.count()).where(Record.title == "Half way")) == 0
    scripted.script.add([Say("Back.")])
    again = send_message(member, SendInput(text="Well?", conversation_id=conversation.id))
    assert again.status == "done"


SURROGATE = "sur\ud800rogate"


def test_a_lone_surrogate_from_the_model_is_replaced_and_the_conversation_works(
    world, login, fake_anthropic
):
    fake_anthropic.script.add(
        [
            Say(f"Adding {SURROGATE} now"),
            Call("records_create", {"model": "tasks", "values": {"title": SURROGATE}}),
        ]
    )
    browser = login("member@acme.test")
    response = browser.post("/chat/stream", {"text": "Add it"}, headers={"HX-Request": "true"})
    body = response.get_data(as_text=True)
    response.close()
    assert "event: done" in body and "awaiting_confirmation" in body
    assert "sur\ufffdrogate" in body and "Wants to create a record" in body
    db.session.rollback()
    call = db.session.scalar(select(ToolCall))
    assert call.input["values"]["title"] == "sur\ufffdrogate"
    page = browser.get(f"/chat/conversations/{call.conversation_id}")
    assert page.status_code == 200 and "sur\ufffdrogate" in page.get_data(as_text=True)


def test_a_conversation_holding_a_stored_lone_surrogate_still_opens(world, login, scripted):
    member = world.a.principal("member")
    scripted.script.add([Call("me_get")], [Say("ok")])
    result = send_message(member, SendInput(text="Who am I?"))
    call = db.session.scalar(select(ToolCall))
    # As a row written by older code, or by hand, may hold it: the JSON column keeps the
    # escape, and the page must draw it anyway.
    call.input = {"note": SURROGATE}
    call.result = {"name": SURROGATE}
    db.session.commit()
    browser = login("member@acme.test")
    page = browser.get(f"/chat/conversations/{result.conversation_id}")
    assert page.status_code == 200
    assert "sur\ufffdrogate" in page.get_data(as_text=True)


def test_a_follow_with_a_foreign_or_broken_last_event_id_draws_the_thread(world, login, scripted):
    scripted.script.add([Say("Stored reply.")])
    member = world.a.principal("member")
    result = send_message(member, SendInput(text="Hi"))
    browser = login("member@acme.test")
    for last in ("", "nonsense", "0" * 32 + ":1", "x:99999999999999999999", "\u00b2:\u00b2"):
        response = browser.get(
            f"/chat/conversations/{result.conversation_id}/follow",
            headers={"Last-Event-ID": last.encode("utf-8").decode("latin-1")},
        )
        body = response.get_data(as_text=True)
        assert response.status_code == 200 and response.mimetype == "text/event-stream"
        assert "Stored reply." in body and "event: done" in body


@pytest.mark.realtime
def test_a_reply_is_saved_as_it_streams_and_its_lease_renewed(world, login, fake_anthropic):
    fake_anthropic.chunk_delay = 0.05
    fake_anthropic.script.add([Say(" ".join(f"w{i}" for i in range(80)))])
    browser = login("member@acme.test")
    response = browser.client.post(
        "/chat/stream", data={"text": "Long one", "csrf_token": browser.csrf}, buffered=False
    )
    chunks = iter(response.response)
    next(chunks)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        db.session.rollback()
        conversation = db.session.scalar(select(Conversation))
        if conversation is not None and conversation.turn_lease_until is not None:
            break
        time.sleep(0.02)
    first_lease = conversation.turn_lease_until

    def renewed_with_text() -> Message | None:
        db.session.rollback()
        lease = db.session.get(Conversation, conversation.id).turn_lease_until
        reply = db.session.scalar(select(Message).where(Message.role == "assistant"))
        stored = reply is not None and len(reply.text.split()) >= 3
        return reply if lease > first_lease and stored else None

    # The keeper's next beat, and a first batch of the reply stored: waited for, not slept.
    while (reply := renewed_with_text()) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    # Still streaming, and what came so far is already stored (in batches, not per token).
    assert reply.status == "streaming" and reply.text.startswith("w0 w1 w2")
    assert db.session.get(Conversation, conversation.id).turn_lease_until > first_lease
    for _ in chunks:
        pass
    response.close()
    db.session.rollback()
    assert db.session.get(Message, reply.id).text.endswith("w79")
