"""Automations on the job queue: the real Huey consumer, on SQLite and on Redis.

Each test waits for the row it expects (never a fixed sleep); Redis tests are skipped when
no server answers at MONARK_TEST_REDIS_URL (or 127.0.0.1:6379).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from time import monotonic, perf_counter
from typing import Any

import pytest
import redis
from flask import Flask
from sqlalchemy import select, update

from monark.automations import engine, services
from monark.automations.models import Automation
from monark.core import jobs
from monark.core.models import Event, Membership
from monark.extensions import db
from monark.records import services as records
from monark.records.models import Record
from tests import factories
from tests.jobs import drain
from tests.test_automations import FOLLOW_UP, graph, make_automation, model, runs_of
from tests.webhook_server import WebhookServer

CREATED = ("t", "record.created", {"model": "tasks"})
REDIS_URL = os.environ.get("MONARK_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def wait_for(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    """``check()`` once it is truthy, read afresh each time (another thread writes it)."""
    deadline = monotonic() + timeout
    while True:
        db.session.rollback()
        if value := check():
            return value
        assert monotonic() < deadline, "timed out waiting"
        threading.Event().wait(0.02)


@pytest.fixture
def acme(world: factories.World) -> factories.OrgWorld:
    """Acme, with a ``followups`` model next to its ``tasks``."""
    owner = world.a.principal("owner")
    followups = records.create_model(owner, "followups", "Follow-ups")
    records.add_field(owner, followups, key="title", label="Title", type="text", required=True)
    records.add_field(owner, followups, key="source", label="Source", type="number")
    drain()  # the world's own events: nothing to do for them
    return world.a


def _redis_or_skip() -> None:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5).ping()
    except redis.RedisError:
        pytest.skip(f"no Redis at {REDIS_URL}")


def _swap_queue(app: Flask, url: str) -> Iterator[jobs.Queue]:
    """The app queues on ``url`` (a queue of the test's own) until the generator ends."""
    original = jobs.queue(app)
    made = jobs.build_queue(
        app, replace(original.settings, url=url), name=f"monark-test-{uuid.uuid4().hex[:8]}"
    )
    app.extensions[jobs.EXTENSION] = made
    try:
        yield made
    finally:
        app.extensions[jobs.EXTENSION] = original


@pytest.fixture(params=["sqlite", "redis"])
def backend(request, app: Flask) -> Iterator[jobs.Queue]:
    """The app's queue on a SQLite file (the session's), or on Redis."""
    if request.param == "sqlite":
        yield jobs.queue(app)
        return
    _redis_or_skip()
    swapped = _swap_queue(app, REDIS_URL)
    made = next(swapped)
    yield made
    made.huey.flush()
    swapped.close()


@pytest.fixture
def consumer(app: Flask, backend: jobs.Queue) -> Iterator[jobs.InProcessConsumer]:
    """Huey's own consumer on two threads of this process, stopped after the test."""
    started = jobs.start_in_process(app, workers=2)
    yield started
    jobs.stop_in_process(app)


def _no_enqueue(app: Flask, monkeypatch) -> None:
    """The process dies between the commit and the enqueue: no job is ever queued."""

    def killed(*args: Any) -> None:
        raise RuntimeError("killed before the enqueue")

    monkeypatch.setitem(jobs.queue(app).tasks, "automations.run_events", killed)


def _event_of(record_id: int) -> Event:
    db.session.rollback()
    return db.session.scalars(
        select(Event).where(Event.type == "record.created", Event.subject_id == record_id)
    ).one()


def _followups(acme: factories.OrgWorld) -> int:
    return len(
        db.session.scalars(
            select(Record.id).where(Record.model_id == model(acme, "followups").id)
        ).all()
    )


def test_a_save_returns_before_a_slow_webhook_runs(acme, app, consumer, monkeypatch):
    monkeypatch.setitem(app.config, "AUTOMATION_WEBHOOK_ALLOW_PRIVATE", True)
    slow = WebhookServer(delay=2.0).start()
    try:
        hooked = graph(CREATED, ("hook", "send_webhook", {"url": slow.url}), edges=[("t", "hook")])
        automation = make_automation(acme, hooked)
        started = perf_counter()
        task = records.create_record(acme.principal("member"), acme.model, {"title": "Quick"})
        latency = perf_counter() - started
        assert latency < 0.5, f"the save took {latency:.2f} s"
        run = wait_for(lambda: [r for r in runs_of(automation.id) if r.finished_at])
        assert [(r.status, r.record_id) for r in run] == [("succeeded", task.id)]
        assert [r["json"]["record"]["id"] for r in slow.received] == [task.id]
    finally:
        slow.stop()


def test_an_event_whose_job_was_never_queued_is_run_by_the_sweep(acme, app, consumer, monkeypatch):
    automation = make_automation(acme, FOLLOW_UP)
    _no_enqueue(app, monkeypatch)
    task = records.create_record(
        acme.principal("member"), acme.model, {"title": "Lost", "status": "todo"}
    )
    assert _event_of(task.id).pending and runs_of(automation.id) == []
    monkeypatch.setattr(engine, "SWEEP_GRACE_SECONDS", 0.0)
    jobs.queue(app).tasks["automations.sweep"]()  # what the scheduler queues every minute
    [run] = wait_for(lambda: [r for r in runs_of(automation.id) if r.finished_at])
    assert (run.status, run.trigger_event_id) == ("succeeded", _event_of(task.id).id)
    wait_for(lambda: not _event_of(task.id).pending)
    with app.app_context():
        assert engine.sweep.func() == 0  # nothing left, nothing run again
    assert len(runs_of(automation.id)) == 1 and _followups(acme) == 1


def test_the_write_commits_while_the_queue_is_down_and_its_work_runs_after(acme, app, monkeypatch):
    automation = make_automation(acme, FOLLOW_UP)
    down = _swap_queue(app, "redis://127.0.0.1:1/0")  # nothing listens there
    next(down)
    try:
        task = records.create_record(
            acme.principal("member"), acme.model, {"title": "Offline", "status": "todo"}
        )
    finally:
        down.close()
    db.session.expire_all()
    assert db.session.get(Record, task.id).values["title"] == "Offline"
    assert _event_of(task.id).pending and runs_of(automation.id) == []
    monkeypatch.setattr(engine, "SWEEP_GRACE_SECONDS", 0.0)
    jobs.queue(app).tasks["automations.sweep"]()  # the storage is back
    assert drain() >= 1
    [run] = runs_of(automation.id)
    assert run.status == "succeeded" and _followups(acme) == 1
    assert not _event_of(task.id).pending


def test_one_event_delivered_twice_runs_each_automation_once(acme, app, consumer, monkeypatch):
    first = make_automation(acme, FOLLOW_UP, name="First")
    second = make_automation(acme, FOLLOW_UP, name="Second")
    _no_enqueue(app, monkeypatch)
    task = records.create_record(
        acme.principal("member"), acme.model, {"title": "Twice", "status": "todo"}
    )
    trigger = engine._trigger_of(_event_of(task.id))
    monkeypatch.undo()
    # Two workers race for the claim, while the consumer has two deliveries of it too.
    jobs.queue(app).tasks["automations.run_events"]([trigger])
    jobs.queue(app).tasks["automations.run_events"]([trigger])
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def deliver() -> None:
        try:
            start.wait()
            with app.app_context():
                engine.run_events.func([trigger])
        except BaseException as err:  # the test reads it below
            failures.append(err)

    racers = [threading.Thread(target=deliver) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert failures == []
    wait_for(lambda: not _event_of(task.id).pending)
    wait_for(lambda: jobs.queue(app).huey.pending_count() == 0)
    jobs.stop_in_process(app)  # every delivery has ended
    db.session.rollback()
    for automation in (first, second):
        [run] = runs_of(automation.id)
        assert run.status == "succeeded"
    assert _followups(acme) == 2


def test_a_chain_keeps_its_depth_and_budget_when_the_sweep_takes_it_up(acme, app, monkeypatch):
    monkeypatch.setitem(app.config, "AUTOMATION_MAX_DEPTH", 2)
    again = graph(
        CREATED,
        ("again", "create_record", {"model": "tasks", "values": {"title": "Again"}}),
        edges=[("t", "again")],
    )
    automation = make_automation(acme, again, name="Echo")
    records.create_record(acme.principal("member"), acme.model, {"title": "Seed"})
    # The job ran the first run and died before the event its action wrote was run.
    _no_enqueue(app, monkeypatch)
    monkeypatch.setattr(engine, "settle", lambda event_id: None)
    [job] = [jobs.queue(app).huey.dequeue()]
    monkeypatch.setattr(engine, "_run_all", _first_run_only(engine._run_all))
    jobs.queue(app).huey.execute(job)
    monkeypatch.undo()
    monkeypatch.setitem(app.config, "AUTOMATION_MAX_DEPTH", 2)
    monkeypatch.setattr(engine, "SWEEP_GRACE_SECONDS", 0.0)
    with app.app_context():
        engine.sweep.func()
    db.session.rollback()
    runs = runs_of(automation.id)
    assert [(r.depth, r.status) for r in runs] == [
        (1, "succeeded"),
        (2, "succeeded"),
        (3, "skipped"),
    ]
    assert len({r.cascade_event_id for r in runs}) == 1


def _first_run_only(run_all):
    """``_run_all`` that runs the outer change but none of what its runs write."""

    def outer_only(app, triggers):
        if engine._budget.get() is None:
            return run_all(app, triggers)
        return None

    return outer_only


def test_the_worker_acts_within_the_owners_rights_as_they_are_when_it_runs(acme, app, consumer):
    admin = acme.principal("admin")
    automation = services.create_automation(admin, "Owned", FOLLOW_UP, True)  # owner: admin
    member = db.session.scalars(
        select(Membership).where(
            Membership.org_id == acme.org.id, Membership.user_id == acme.users["admin"].id
        )
    ).one()
    jobs.stop_in_process(app)  # the job waits in the queue while the owner is demoted
    task = records.create_record(
        acme.principal("member"), acme.model, {"title": "Late", "status": "todo"}
    )
    # A change no service saw (a script, a restore), made after the event was written.
    db.session.execute(update(Membership).where(Membership.id == member.id).values(role="member"))
    db.session.commit()
    jobs.start_in_process(app, workers=2)
    wait_for(lambda: not _event_of(task.id).pending)
    assert runs_of(automation.id) == [] and _followups(acme) == 0
    db.session.expire_all()
    assert not db.session.get(Automation, automation.id).enabled


def test_a_record_made_private_before_its_job_runs_is_treated_as_private(acme, app, consumer):
    automation = make_automation(acme, FOLLOW_UP)  # not opted in to private records
    owner = acme.principal("owner")
    jobs.stop_in_process(app)
    task = records.create_record(owner, acme.model, {"title": "Soon secret", "status": "todo"})
    records.update_record(owner, acme.model, task.id, {}, visibility="private")
    jobs.start_in_process(app, workers=2)
    wait_for(lambda: not _event_of(task.id).pending)
    assert runs_of(automation.id) == [] and _followups(acme) == 0


@pytest.mark.parametrize(
    ("argv", "debug", "reloader_child", "starts"),
    [
        (["/v/bin/flask", "--app", "app", "run", "--port", "5000"], False, False, True),
        (["/v/bin/flask", "--app", "app", "run"], True, False, False),  # the reloader's watcher
        (["/v/bin/flask", "--app", "app", "run"], True, True, True),  # its serving child
        (["/v/bin/flask", "--app", "app", "run", "--debug", "--no-reload"], True, False, True),
        (["/v/bin/flask", "--app", "app", "seed-demo"], False, False, False),
        (["/v/bin/flask", "--app", "app", "jobs", "worker"], False, False, False),
        (["/v/bin/gunicorn", "-c", "python:monark.gunicorn_conf", "app:app"], False, False, False),
    ],
)
def test_a_consumer_starts_in_the_process_flask_run_serves_from_alone(
    monkeypatch, argv, debug, reloader_child, starts
):
    from types import SimpleNamespace

    monkeypatch.setattr("sys.argv", argv)
    if reloader_child:
        monkeypatch.setenv("WERKZEUG_RUN_MAIN", "true")
    else:
        monkeypatch.delenv("WERKZEUG_RUN_MAIN", raising=False)
    app = SimpleNamespace(config={}, debug=debug)
    assert jobs._serving_under_flask_run(app) is starts
