"""Every tool call is bounded whatever the tool: in time (``CHAT_TOOL_TIMEOUT``), in what it
stores and what its card shows (``CHAT_TOOL_RESULT_MAX``, ``CHAT_CARD_MAX``), and in how
deep the model's arguments may nest (refused before any card)."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, func, select, text, update
from sqlalchemy.exc import DBAPIError, OperationalError

from monark.api.routes import V1_ROUTES
from monark.approvals import service as approval_service
from monark.assistant.tools import build_chat_toolset
from monark.chat.executor import ToolOutcome, ToolSpec
from monark.chat.models import ToolCall
from monark.chat.runtime import runtime
from monark.chat.turn.start import SendInput, send_message
from monark.core import uow
from monark.core.bounds import MAX_DEPTH
from monark.core.models import Org
from monark.core.uow import deadline, time_limit, unit_of_work
from monark.extensions import db
from monark.records.models import Record, RecordModel
from monark.records.services import create_record
from tests.llm_script import Call, Say
from tests.tuning import configure

# Counts for a long while (many seconds) on SQLite and PostgreSQL alike.
LONG_STATEMENT = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000000) "
    "SELECT max(x) FROM c"
)


class _Tool:
    """A tool of the test's own: ``run`` is what it does."""

    def __init__(self, name: str, mutates: bool, run: Any):
        self.spec = ToolSpec(
            name=name,
            description=name,
            input_schema={"type": "object", "properties": {}},
            mutates=mutates,
        )
        self._run = run

    def preview(self, principal, arguments):
        return {"headline": self.spec.name}

    def precheck(self, principal, arguments):
        return None

    def run(self, principal, arguments):
        return self._run(principal)


@contextmanager
def extra_tools(*tools: _Tool) -> Iterator[None]:
    state = runtime()
    original = state.executor
    state.executor = build_chat_toolset(V1_ROUTES, tools)
    try:
        yield
    finally:
        state.executor = original


def calls_of(conversation_id: int) -> list[ToolCall]:
    stmt = select(ToolCall).where(ToolCall.conversation_id == conversation_id)
    return list(db.session.scalars(stmt.order_by(ToolCall.id)))


def last_result(scripted) -> str:
    (res,) = scripted.requests[-1].messages[-1].content
    assert res.is_error
    return res.content


def send(principal, message: str):
    return send_message(principal, SendInput(text=message))


def titled(title: str) -> int:
    return db.session.scalar(select(func.count()).where(Record.title == title))


@pytest.fixture
def short_limit(app, monkeypatch):
    configure(monkeypatch, app, CHAT_TOOL_TIMEOUT=0.3)
    return 0.3


# ---- time ----------------------------------------------------------------------------------


@pytest.mark.realtime
def test_a_read_past_the_time_limit_fails_and_the_conversation_goes_on(
    world, scripted, short_limit
):
    def counts(principal):
        return ToolOutcome(ok=True, result=db.session.execute(text(LONG_STATEMENT)).scalar())

    member = world.a.principal("member")
    scripted.script.add([Call("count_forever")], [Say("That took too long.")])
    with extra_tools(_Tool("count_forever", False, counts)):
        result = send(member, "Count")
    (call,) = calls_of(result.conversation_id)
    assert result.status == "done"
    assert call.status == "FAILED" and "longer than its 0.3 s limit" in call.error
    assert "longer than its 0.3 s limit" in last_result(scripted)
    # The conversation is usable: the next message gets an answer.
    scripted.script.add([Call("records_list", {"model": "tasks"})], [Say("Here.")])
    more = SendInput(text="List", conversation_id=call.conversation_id)
    again = send_message(member, more)
    assert again.status == "done" and calls_of(call.conversation_id)[-1].status == "SUCCEEDED"


@pytest.mark.realtime
def test_a_write_past_the_time_limit_fails_and_keeps_nothing(world, scripted, short_limit):
    model_id = world.a.model.id

    def writes_then_counts(principal):
        create_record(principal, db.session.get(RecordModel, model_id), {"title": "Half"})
        db.session.execute(text(LONG_STATEMENT)).scalar()
        return ToolOutcome(ok=True, result={"done": True})

    member = world.a.principal("member")
    scripted.script.add([Call("slow_write")], [Say("It timed out.")])
    with extra_tools(_Tool("slow_write", True, writes_then_counts)):
        proposed = send_message(member, SendInput(text="Write"))
        (call,) = calls_of(proposed.conversation_id)
        result = approval_service.confirm_tool_call(member, call.id)
    db.session.refresh(call)
    assert result.status == "done"
    assert call.status == "FAILED" and "nothing it did was kept" in call.error
    assert titled("Half") == 0


def wait_until(ends: float) -> None:
    """Let time pass (Python time: no statement runs) until ``ends`` (``time.monotonic()``)."""
    while (left := ends - time.monotonic()) > 0:
        time.sleep(left)


def test_short_statements_stop_at_the_limit_and_the_write_keeps_nothing(
    world, scripted, short_limit
):
    """Each statement is short (a progress handler never fires, a statement timeout never
    runs out); together they run past the limit. The first one after it is refused."""
    model_id = world.a.model.id
    ran_late: list[float] = []  # statements that started after the deadline, and ran

    def writes_then_keeps_asking(principal):
        create_record(principal, db.session.get(RecordModel, model_id), {"title": "Early"})
        ends = deadline()
        while (started := time.monotonic()) < ends + short_limit:  # well past it
            db.session.execute(text("SELECT 1")).scalar()
            if started >= ends:
                ran_late.append(started)
        return ToolOutcome(ok=True, result={"done": True})

    member = world.a.principal("member")
    scripted.script.add([Call("chatty_write")], [Say("It timed out.")])
    with extra_tools(_Tool("chatty_write", True, writes_then_keeps_asking)):
        proposed = send(member, "Write")
        (call,) = calls_of(proposed.conversation_id)
        approval_service.confirm_tool_call(member, call.id)
    db.session.refresh(call)
    assert call.status == "FAILED" and "longer than its 0.3 s limit" in call.error
    assert ran_late == []  # the first statement after the deadline was refused
    assert titled("Early") == 0


@pytest.mark.parametrize("mutates", [False, True])
def test_a_call_that_ends_past_the_limit_fails_however_it_ended(
    world, scripted, short_limit, mutates
):
    """Its time went in Python or in a wait outside the database, then it succeeded: it
    still ran past its limit, so it failed and (a write) kept nothing."""
    model_id = world.a.model.id

    def slow_outside_the_database(principal):
        if mutates:
            create_record(principal, db.session.get(RecordModel, model_id), {"title": "Late"})
        wait_until(deadline())
        return ToolOutcome(ok=True, result={"done": True})

    member = world.a.principal("member")
    scripted.script.add([Call("slow_tool")], [Say("Too slow.")])
    with extra_tools(_Tool("slow_tool", mutates, slow_outside_the_database)):
        result = send(member, "Go")
        (call,) = calls_of(result.conversation_id)
        if mutates:
            approval_service.confirm_tool_call(member, call.id)
    db.session.refresh(call)
    assert call.status == "FAILED" and "longer than its 0.3 s limit" in call.error
    assert titled("Late") == 0


def test_a_unit_past_its_deadline_runs_no_statement_and_keeps_nothing(app, world):
    rename = update(Org).where(Org.id == world.a.org.id).values(name="Renamed")
    with pytest.raises(uow.TimeLimitPassed), time_limit(0.05) as limit, unit_of_work():
        wait_until(limit.ends)
        db.session.execute(rename)
    with pytest.raises(uow.TimeLimitPassed), time_limit(0.05) as limit, unit_of_work():
        db.session.execute(rename)
        wait_until(limit.ends)  # then the commit comes too late
    db.session.expire_all()
    assert db.session.get(Org, world.a.org.id).name == "Acme"


def test_each_statement_may_run_only_for_the_time_left(app, world):
    """PostgreSQL's ``statement_timeout`` counts from each statement's start: it is cut to
    what is left of the limit as the statements go."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("statement_timeout is PostgreSQL's")
    setting = text("SELECT setting::int FROM pg_settings WHERE name = 'statement_timeout'")
    with time_limit(30) as limit, unit_of_work():
        db.session.execute(setting)
        wait_until(limit.ends - 29.5)
        asked = time.monotonic()
        allowed_ms = db.session.execute(setting).scalar()
    slack_ms = uow.STATEMENT_TIMEOUT_SLACK * 1000
    assert allowed_ms <= (limit.ends - asked) * 1000 + slack_ms + 1


def test_a_unit_waiting_for_a_lock_stops_at_the_deadline(app, world):
    """A lock another transaction holds: the write lock on SQLite (the busy timeout is cut
    to the time left), a row lock on PostgreSQL (``statement_timeout``)."""
    holder = db.engine.connect()
    sqlite = holder.dialect.name == "sqlite"
    raw = holder.connection.driver_connection
    isolation = getattr(raw, "isolation_level", None)
    if sqlite:
        raw.isolation_level = None
        holder.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        holder.begin()
        holder.execute(select(Org.id).where(Org.id == world.a.org.id).with_for_update())
    try:
        stop = update(Org).where(Org.id == world.a.org.id).values(name="X")
        raised = pytest.raises(OperationalError)
        with time_limit(0.3) as deadline, raised as stopped, unit_of_work():
            db.session.execute(stop)
        assert deadline.passed()
        expected = "database is locked" if sqlite else "statement timeout"
        assert expected in str(stopped.value)
    finally:
        holder.rollback()
        if sqlite:  # back to the pool as it came: in autocommit, it would lock nothing
            raw.isolation_level = isolation
        holder.close()
    db.session.expire_all()
    assert db.session.get(Org, world.a.org.id).name == "Acme"


@contextmanager
def connections_held() -> Iterator[dict[str, int]]:
    """Pool checkouts by this thread while in the block, and the most it held at once."""
    seen = {"checkouts": 0, "most": 0, "now": 0}
    me = threading.get_ident()

    def checkout(dbapi_connection, record, proxy) -> None:
        if threading.get_ident() == me:
            seen["checkouts"] += 1
            seen["now"] += 1
            seen["most"] = max(seen["most"], seen["now"])

    def checkin(dbapi_connection, record) -> None:
        if threading.get_ident() == me:
            seen["now"] -= 1

    event.listen(db.engine, "checkout", checkout)
    event.listen(db.engine, "checkin", checkin)
    try:
        yield seen
    finally:
        event.remove(db.engine, "checkout", checkout)
        event.remove(db.engine, "checkin", checkin)


def test_a_read_tool_call_holds_one_connection(world, scripted):
    """The tool call's unit and the dispatcher's, nested in it, share one connection."""
    member = world.a.principal("member")
    scripted.script.add([Call("records_list", {"model": "tasks"})], [Say("Here.")])
    db.session.remove()  # the test's own session holds none either
    with connections_held() as seen:
        result = send(member, "List")
    (call,) = calls_of(result.conversation_id)
    assert call.status == "SUCCEEDED"
    assert seen["checkouts"] > 0 and seen["most"] == 1


def test_a_write_in_a_read_only_unit_fails_and_one_in_a_unit_of_its_own_is_kept(app, world):
    """A read's transaction is thrown away: a write there is refused (not lost unseen),
    and a unit that writes, opened within the read, keeps its word."""
    rename = update(Org).where(Org.id == world.a.org.id)
    with pytest.raises(DBAPIError), unit_of_work(read_only=True):
        db.session.execute(rename.values(name="Lost"))
    with unit_of_work(read_only=True):
        assert db.session.get(Org, world.a.org.id).name == "Acme"
        with unit_of_work():
            db.session.execute(rename.values(name="Kept"))
            db.session.commit()
    db.session.expire_all()
    assert db.session.get(Org, world.a.org.id).name == "Kept"


# ---- size ----------------------------------------------------------------------------------


def test_a_huge_result_is_stored_and_shown_cut_with_markers(app, world, scripted, login):
    def huge(principal):
        return ToolOutcome(ok=True, result={"blob": "x" * 5_000_000, "items": list(range(10))})

    viewer = world.a.principal("viewer")
    scripted.script.add([Call("dump")], [Say("Big.")])
    with extra_tools(_Tool("dump", False, huge)):
        result = send(viewer, "Dump")
        (call,) = calls_of(result.conversation_id)
        page = login(world.a.users["viewer"].email).get(
            f"/chat/conversations/{result.conversation_id}"
        )
    stored = json.dumps(call.result)
    assert call.status == "SUCCEEDED"
    assert len(stored) < app.config["CHAT_TOOL_RESULT_MAX"] + 1_000
    assert call.result["blob"].startswith("xxx") and "more characters]" in call.result["blob"]
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and len(html) < app.config["CHAT_CARD_MAX"] + 50_000
    assert "more characters]" in html


def test_a_refusal_and_a_prechecks_answer_are_stored_cut(app, world, scripted):
    """What a tool's own checks say is stored within ``CHAT_TOOL_RESULT_MAX`` too."""
    limit = app.config["CHAT_TOOL_RESULT_MAX"]
    refusing = _Tool("refusing", True, lambda principal: ToolOutcome(ok=True))
    refusing.spec = dataclasses.replace(refusing.spec, validate=lambda args: "No. " * limit)
    picky = _Tool("picky", True, lambda principal: ToolOutcome(ok=True))
    huge = [{"field": "x", "message": "bad " * limit}]
    picky.precheck = lambda principal, arguments: ToolOutcome(
        ok=False, error="Wrong. " * limit, details=huge
    )
    member = world.a.principal("member")
    scripted.script.add([Call("refusing"), Call("picky")], [Say("Both refused.")])
    with extra_tools(refusing, picky):
        result = send(member, "Go")
    for call in calls_of(result.conversation_id):
        assert call.status == "FAILED" and "more characters]" in call.error
        assert len(json.dumps([call.error, call.result])) < 2 * limit + 1_000


def test_a_tool_name_too_long_to_store_fails_as_a_result_the_model_reads(world, scripted):
    """The model's name and call id are kept to what their columns hold (PostgreSQL
    refuses more): the step is stored, and the model reads which name does not exist."""
    name, call_id = "records_" + "x" * 300, "toolu_" + "y" * 300
    scripted.script.add([Call(name, {}, id=call_id)], [Say("No such tool.")])
    result = send(world.a.principal("member"), "Go")
    assert result.status == "done"
    (call,) = calls_of(result.conversation_id)
    assert call.status == "FAILED" and call.preview is None
    assert len(call.name) <= 120 and len(call.provider_call_id) <= 120
    assert call.name.startswith("records_xxx") and "more characters]" in call.name
    said = last_result(scripted)
    assert "There is no tool named 'records_xxx" in said and "more characters]" in said
    # The model gets its call and the result paired under the one id kept.
    (use,) = [b for b in scripted.requests[-1].messages[-2].content if b.type == "tool_use"]
    (res,) = scripted.requests[-1].messages[-1].content
    assert use.id == res.tool_use_id == call.provider_call_id


# ---- depth ---------------------------------------------------------------------------------


def _nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"title": "Deep"}
    for _ in range(levels - 1):
        value = {"x": value}
    return value


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 600])
def test_arguments_nested_too_deep_fail_before_any_card(world, scripted, levels):
    member = world.a.principal("member")
    arguments = {"model": "tasks", "values": _nested(levels - 1)}
    scripted.script.add([Call("records_create", arguments)], [Say("Too deep.")])
    result = send(member, "Add")
    (call,) = calls_of(result.conversation_id)
    assert result.status == "done"
    assert call.status == "FAILED" and call.decided_at is None and call.preview is None
    assert f"nested at most {MAX_DEPTH} levels deep" in call.error
    assert call.input == {}  # not kept: storing it would recurse as deep
    assert f"nested at most {MAX_DEPTH} levels deep" in last_result(scripted)
    assert titled("Deep") == 0


def test_arguments_at_the_depth_limit_still_reach_their_card(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Call("deep_write", _nested(MAX_DEPTH))])
    with extra_tools(_Tool("deep_write", True, lambda principal: ToolOutcome(ok=True))):
        result = send(member, "Write")
    (call,) = calls_of(result.conversation_id)
    assert result.status == "awaiting_confirmation" and call.status == "PROPOSED"
    assert call.input == _nested(MAX_DEPTH)
