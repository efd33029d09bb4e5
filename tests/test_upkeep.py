"""Upkeep as periodic jobs: each does its work when the queue runs it (``jobs.drain``), and
the heartbeat says whether a consumer is running."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from bs4 import BeautifulSoup
from flask import Flask
from sqlalchemy import func, select, text

from monark.automations.models import AutomationRun
from monark.chat.models import (
    Conversation,
    ConversationKind,
    Message,
    MessageRole,
    MessageStatus,
    ToolCall,
    ToolCallStatus,
)
from monark.chat.turn import progress
from monark.core import jobs
from monark.core.broker import LocalLog
from monark.core.models import Event, utcnow
from monark.extensions import db
from tests import factories
from tests.jobs import drain
from tests.test_api_approvals import bearer, create, held_key, left_running
from tests.test_automations import make_automation
from tests.test_jobs import wait_for
from tests.test_schedules import scheduled


def run_job(app: Flask, name: str) -> None:
    """Queue the periodic job ``name`` as the consumer's scheduler would, and run it."""
    jobs.queue(app).tasks[name]()
    assert drain() >= 1
    db.session.rollback()


def conversation(org: factories.OrgWorld, **turn) -> Conversation:
    made = Conversation(
        org_id=org.org.id, kind=ConversationKind.AI, creator_id=org.users["member"].id, **turn
    )
    db.session.add(made)
    db.session.flush()
    return made


def message(chat: Conversation, seq: int, status: MessageStatus) -> Message:
    made = Message(
        org_id=chat.org_id,
        conversation_id=chat.id,
        seq=seq,
        author_kind="agent",
        role=MessageRole.ASSISTANT,
        status=status,
    )
    db.session.add(made)
    db.session.flush()
    return made


def tool_call(msg: Message, status: ToolCallStatus, **more) -> ToolCall:
    made = ToolCall(
        org_id=msg.org_id,
        conversation_id=msg.conversation_id,
        message_id=msg.id,
        provider_call_id=uuid.uuid4().hex[:12],
        name="records_create",
        input={"model": "tasks", "values": {"title": "X"}},
        mutates=True,
        status=status,
        **more,
    )
    db.session.add(made)
    db.session.flush()
    return made


def test_proposals_past_their_time_expire_each_once_with_its_event(app, world):
    chat = conversation(world.a)
    msg = message(chat, 1, MessageStatus.COMPLETE)
    old = tool_call(msg, ToolCallStatus.PROPOSED, created_at=utcnow() - timedelta(days=8))
    fresh = tool_call(msg, ToolCallStatus.PROPOSED)
    db.session.commit()
    run_job(app, "upkeep.expire_proposals")
    assert db.session.get(ToolCall, old.id).status == ToolCallStatus.EXPIRED
    assert db.session.get(ToolCall, fresh.id).status == ToolCallStatus.PROPOSED
    events = db.session.scalars(select(Event).where(Event.type == "chat.tool_call.expired")).all()
    assert [(e.subject_id, e.actor_id) for e in events] == [(old.id, world.a.users["member"].id)]
    run_job(app, "upkeep.expire_proposals")
    assert (
        db.session.scalar(
            select(func.count(Event.id)).where(Event.type == "chat.tool_call.expired")
        )
        == 1
    )


def test_a_turn_whose_lease_ran_out_is_settled_and_its_conversation_freed(app, world):
    dead = conversation(
        world.a,
        turn_id=uuid.uuid4().hex,
        turn_started_at=utcnow() - timedelta(minutes=2),
        turn_lease_until=utcnow() - timedelta(seconds=30),
    )
    live = conversation(
        world.a,
        turn_id="live",
        turn_started_at=utcnow(),
        turn_lease_until=utcnow() + timedelta(seconds=60),
    )
    cut = message(dead, 1, MessageStatus.STREAMING)
    running = tool_call(cut, ToolCallStatus.EXECUTING)
    still = message(live, 1, MessageStatus.STREAMING)
    db.session.commit()
    run_job(app, "upkeep.settle_turns")
    assert db.session.get(Message, cut.id).status == MessageStatus.INCOMPLETE
    assert db.session.get(ToolCall, running.id).status == ToolCallStatus.FAILED
    assert db.session.get(Conversation, dead.id).turn_id is None
    assert db.session.get(Message, still.id).status == MessageStatus.STREAMING
    assert db.session.get(Conversation, live.id).turn_id == "live"


def test_a_held_write_cut_off_is_asked_again_without_anyone_reading_it(app, world):
    token = held_key(world)
    approval = create(app.test_client(), token, "Cut off").get_json()
    left_running(approval["id"], world.a.users["admin"].id, lease_left=-1)
    run_job(app, "upkeep.settle_held_writes")
    cut = db.session.get(ToolCall, approval["id"])
    assert cut.status == ToolCallStatus.FAILED and "waits for approval again" in cut.error
    again = db.session.scalars(select(ToolCall).where(ToolCall.retry_of_id == cut.id)).one()
    assert again.status == ToolCallStatus.PROPOSED
    run_job(app, "upkeep.settle_held_writes")  # asked again once, whatever runs next
    assert db.session.scalar(select(func.count(ToolCall.id))) == 2
    status = app.test_client().get(approval["status_url"], headers=bearer(token)).get_json()
    assert status["asked_again_as"] == again.id


def test_idle_progress_logs_are_dropped(app, monkeypatch):
    log = LocalLog(retention=60)
    monkeypatch.setitem(app.extensions, "monark.progress_log", log)
    assert progress.progress_log(app) is log
    log.append("old", {"t": 1})
    log.append("new", {"t": 2})
    log._channels["old"].touched -= 120  # idle past its retention
    run_job(app, "upkeep.prune_progress_logs")
    assert sorted(log._channels) == ["new"]


@pytest.mark.skipif("DATABASE_URL" in __import__("os").environ, reason="SQLite only")
def test_the_query_planner_gets_statistics_on_sqlite(app, world):
    with db.engine.connect() as connection:
        connection.execute(text("DROP TABLE IF EXISTS sqlite_stat1"))
        connection.commit()
    run_job(app, "upkeep.optimize")
    with db.engine.connect() as connection:
        tables = connection.execute(text("SELECT DISTINCT tbl FROM sqlite_stat1")).scalars().all()
    assert "records" in tables and "record_values" in tables
    run_job(app, "upkeep.optimize")  # again: PRAGMA optimize, which keeps them


def test_runs_past_the_retention_are_pruned_but_a_schedules_newest_slot(app, world, monkeypatch):
    monkeypatch.setitem(app.config, "AUTOMATION_RUN_RETENTION", 30 * 86400.0)
    automation = make_automation(world.a, scheduled("0 9 1 1 *"), name="Yearly")
    long_ago = utcnow() - timedelta(days=200)

    def run(slot: datetime | None, started: datetime) -> int:
        made = AutomationRun(
            org_id=world.a.org.id,
            automation_id=automation.id,
            automation_version=1,
            status="succeeded",
            trigger_type="schedule",
            slot_at=slot,
            started_at=started,
        )
        db.session.add(made)
        db.session.commit()
        return made.id

    older = run(datetime(2025, 1, 1, 9, tzinfo=UTC), long_ago - timedelta(days=365))
    newest_slot = run(datetime(2026, 1, 1, 9, tzinfo=UTC), long_ago)
    test_run = run(None, long_ago)
    recent = run(None, utcnow() - timedelta(days=1))
    run_job(app, "automations.prune_runs")
    kept = db.session.scalars(select(AutomationRun.id).order_by(AutomationRun.id)).all()
    assert kept == [newest_slot, recent]
    assert older not in kept and test_run not in kept


# ---- is a consumer running? ------------------------------------------------------------


def _heartbeat_gone(app: Flask) -> None:
    jobs.queue(app).huey.delete(jobs.HEARTBEAT_KEY)


def _notice(browser) -> BeautifulSoup | None:
    page = BeautifulSoup(browser.get("/automations").get_data(as_text=True), "html.parser")
    return page.select_one("#queue-health")


def test_admins_are_told_when_no_consumer_was_seen_lately(app, world, login, caplog, monkeypatch):
    _heartbeat_gone(app)
    monkeypatch.setattr(jobs, "_warned", {})  # said once in 10 minutes: not yet in this test
    with caplog.at_level("INFO", logger="monark.core.jobs"):
        notice = _notice(login("admin@acme.test"))
    assert "No job worker has been seen yet" in notice.get_text()
    assert "flask jobs worker" in notice.get_text()
    assert any("no job consumer seen" in r.getMessage() for r in caplog.records)
    assert _notice(login("member@acme.test")) is None  # not an admin's page: no notice
    run_job(app, "jobs.heartbeat")  # a consumer ran it
    assert _notice(login("admin@acme.test")) is None
    stale = datetime.now(UTC) - jobs.STALE_AFTER - timedelta(seconds=5)
    jobs.queue(app).huey.put(jobs.HEARTBEAT_KEY, stale.isoformat())
    assert "since" in _notice(login("admin@acme.test")).get_text()


def test_a_starting_consumer_is_seen_at_once(app, world):
    _heartbeat_gone(app)
    jobs.start_in_process(app, workers=1)
    try:
        wait_for(lambda: not jobs.health(app).stale)
    finally:
        jobs.stop_in_process(app)


def test_queueing_work_nobody_consumes_says_so_in_the_log(app, world, caplog, monkeypatch):
    from monark.records import services as records

    make_automation(
        world.a,
        {
            "nodes": [
                {"id": "t", "type": "record.created", "config": {"model": "tasks"}},
                {"id": "n", "type": "add_audit_note", "config": {"note": "{{record.id}}"}},
            ],
            "edges": [{"from": "t", "to": "n"}],
        },
        name="Noted",
    )
    stale = datetime.now(UTC) - jobs.STALE_AFTER - timedelta(minutes=1)
    jobs.queue(app).huey.put(jobs.HEARTBEAT_KEY, stale.isoformat())  # it stopped since
    monkeypatch.setattr(jobs, "_looked", {})
    monkeypatch.setattr(jobs, "_warned", {})
    with caplog.at_level("WARNING", logger="monark.core.jobs"):
        records.create_record(world.a.principal("member"), world.a.model, {"title": "Queued"})
    [said] = [r for r in caplog.records if "no job consumer seen since" in r.getMessage()]
    assert said.levelname == "WARNING"
