"""Benchmark of work outside the request: what a save waits for, how fast workers drain.

* Save latency: ``POST /api/v1/models/tasks/records`` (Bearer API key, the Flask test
  client, server time only) with no automations, then with 5 enabled automations each
  sending a webhook to a loopback endpoint that takes 2 s to answer. The save must not wait
  for them: its median within 10% (or 5 ms) of the save without automations.
* Drain rate: ``--events`` records created while no consumer runs (one cheap automation
  each: an audit note), then 2 ``flask jobs worker`` processes (one thread each) started
  on the same queue file; events per second until no event is pending.

* Retry times: a webhook to a loopback endpoint that always answers 500, tried 3 times
  ``--retry-seconds`` apart, then twice that (no jitter), by the dev server's in-process
  consumer: each retry must arrive within 10% of its configured wait after the try before.
* Kill -9: ``--kill-events`` records, each triggering 2 automations of 4 audit notes, drained
  by a ``flask jobs worker`` killed with SIGKILL 20 times (each time as soon as a run is seen
  running), then a last worker, with the periodic sweeps (outbox, cut-off runs) run until
  nothing is pending. Counted from the database: every (automation, event) has exactly one
  run, none left open (0 lost), no run twice and no note written twice (0 duplicated).

Runs on a fresh temporary SQLite database and queue file; prints a table, exits 1 on a miss.

    .venv/bin/python bench/jobs_bench.py
    .venv/bin/python bench/jobs_bench.py --saves 40 --events 2000
    .venv/bin/python bench/jobs_bench.py --rows retries,kill
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flask import Flask  # noqa: E402
from sqlalchemy import func, select, update  # noqa: E402

from monark import create_app  # noqa: E402
from monark.automations import engine, leases, webhooks  # noqa: E402
from monark.automations import services as automations  # noqa: E402
from monark.automations.models import AutomationRun, WebhookDelivery  # noqa: E402
from monark.core import jobs  # noqa: E402
from monark.core.models import Event  # noqa: E402
from monark.extensions import db  # noqa: E402
from monark.records import services as records  # noqa: E402
from tests import factories  # noqa: E402
from tests.webhook_server import WebhookServer  # noqa: E402

WORKER = ("--app", "app", "jobs", "worker", "--workers", "1")


def _graph(action: tuple[str, str, dict]) -> dict:
    return {
        "nodes": [
            {"id": "t", "type": "record.created", "config": {"model": "tasks"}},
            {"id": action[0], "type": action[1], "config": action[2]},
        ],
        "edges": [{"from": "t", "to": action[0]}],
    }


def _save_latency(app: Flask, key: str, saves: int) -> list[float]:
    client = app.test_client()
    headers = {"Authorization": f"Bearer {key}"}
    times = []
    for i in range(saves):
        started = time.perf_counter()
        answer = client.post(
            "/api/v1/models/tasks/records", json={"values": {"title": f"T{i}"}}, headers=headers
        )
        times.append(time.perf_counter() - started)
        assert answer.status_code == 201, answer.get_data(as_text=True)
    return times


def _pending() -> int:
    db.session.rollback()
    return int(db.session.scalar(select(func.count(Event.id)).where(Event.pending.is_(True))))


ROWS = ("latency", "drain", "retries", "kill")
KILLS = 20
NOTES = 4


def _latency_row(app: Flask, world: factories.OrgWorld, args, misses: list[str]) -> None:
    key = factories.make_key(world.principal("owner"), "member")
    # The dev server's setup: a consumer on threads of the serving process, so the webhooks
    # really run (and take their 2 s) while the saves are measured.
    jobs.start_in_process(app, workers=2)
    _save_latency(app, key, 3)  # warm up
    bare = statistics.median(_save_latency(app, key, args.saves))
    slow = WebhookServer(delay=2.0).start()
    owner = world.principal("owner")
    for i in range(5):
        hook = ("hook", "send_webhook", {"url": slow.url, "timeout_seconds": 5})
        automations.create_automation(owner, f"Hook {i}", _graph(hook), True)
    hooked = statistics.median(_save_latency(app, key, args.saves))
    jobs.queue(app).huey.flush()  # the hooked saves' runs are not what is measured
    consumer = jobs.queue(app).consumer
    jobs.queue(app).consumer = None
    consumer.stop()  # the runs in progress end on their own (daemon threads)
    slow.stop()
    _quiet(owner)
    fine = hooked <= max(bare * 1.10, bare + 0.005)
    misses += [] if fine else ["save latency with 5 slow webhooks"]
    _row("save, no automations (median)", f"{bare * 1000:.1f} ms")
    _row("save, 5 automations x 2 s webhook (median)", f"{hooked * 1000:.1f} ms")


def _quiet(owner) -> None:
    """Every automation off, nothing pending: the next row starts clean."""
    for automation in automations.list_automations(owner):
        if automation.enabled:
            automations.set_enabled(owner, automation.id, False)
    db.session.execute(Event.__table__.update().values(pending=False))
    open_runs = AutomationRun.status.in_(["queued", "running", "retrying"])
    db.session.execute(update(AutomationRun).where(open_runs).values(status="failed"))
    open_deliveries = WebhookDelivery.status.in_(webhooks.OPEN)
    db.session.execute(update(WebhookDelivery).where(open_deliveries).values(status="failed"))
    db.session.commit()


def _row(case: str, value: str) -> None:
    print(f"{case:<52}{value:>16}")


def _drain_row(app: Flask, world: factories.OrgWorld, env: dict, args, misses: list[str]) -> None:
    owner = world.principal("owner")
    note = ("note", "add_audit_note", {"note": "saw {{record.id}}"})
    automations.create_automation(owner, "Note", _graph(note), True)
    member = world.principal("member")
    for i in range(args.events):
        records.create_record(member, world.model, {"title": f"E{i}"})
    assert _pending() == args.events
    workers = [_worker(env) for _ in range(2)]
    started = time.perf_counter()
    try:
        while (left := _pending()) > 0:
            if time.perf_counter() - started > 600:
                misses.append(f"drain: {left} events left after 600 s")
                break
            time.sleep(0.1)
    finally:
        elapsed = time.perf_counter() - started
        for worker in workers:
            worker.send_signal(signal.SIGINT)
        for worker in workers:
            worker.wait(30)
    _quiet(owner)
    _row(f"{args.events} events, 2 worker processes", f"{args.events / elapsed:.0f} ev/s")


def _worker(env: dict, workers: int = 1) -> subprocess.Popen:
    return subprocess.Popen(
        [str(Path(sys.executable).with_name("flask")), *WORKER[:-1], str(workers)],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _retries_row(app: Flask, world: factories.OrgWorld, args, misses: list[str]) -> None:
    wait = args.retry_seconds
    app.config.update(
        WEBHOOK_MAX_ATTEMPTS=3,
        WEBHOOK_RETRY_SECONDS=wait,
        WEBHOOK_RETRY_FACTOR=2.0,
        WEBHOOK_RETRY_JITTER=0.0,
    )
    failing = WebhookServer(status=500).start()
    owner = world.principal("owner")
    hook = ("hook", "send_webhook", {"url": failing.url, "timeout_seconds": 5})
    automations.create_automation(owner, "Failing", _graph(hook), True)
    jobs.start_in_process(app, workers=2)
    try:
        records.create_record(world.principal("member"), world.model, {"title": "Retry me"})
        arrived = failing.wait_for(3, timeout=wait * 3 + 30)
        # The last try's outcome is written after its answer: wait for the delivery to end.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            db.session.rollback()
            if db.session.scalar(
                select(func.count(WebhookDelivery.id)).where(WebhookDelivery.status == "failed")
            ):
                break
            time.sleep(0.1)
    finally:
        jobs.stop_in_process(app)
        failing.stop()
    _quiet(owner)
    for n, expected in ((2, wait), (3, wait * 2)):
        gap = arrived[n - 1]["at"] - arrived[n - 2]["at"]
        off = abs(gap - expected) / expected
        _row(f"retry {n} of 3 after try {n - 1} (configured {expected:g} s)", f"{gap:.2f} s")
        if off > 0.10:
            misses.append(f"retry {n}: {gap:.2f} s after the try before, not {expected:g} s ±10%")
    if len(failing.received) != 3:
        misses.append(f"retries: {len(failing.received)} tries, not 3")


def _open_runs(automation_ids: list[int]) -> int:
    db.session.rollback()
    return int(
        db.session.scalar(
            select(func.count(AutomationRun.id)).where(
                AutomationRun.automation_id.in_(automation_ids),
                AutomationRun.status.in_(["queued", "running", "retrying"]),
            )
        )
        or 0
    )


def _newest_run() -> int:
    db.session.rollback()
    return int(db.session.scalar(select(func.max(AutomationRun.id))) or 0)


def _kill_row(app: Flask, world: factories.OrgWorld, env: dict, args, misses: list[str]) -> None:
    owner = world.principal("owner")
    notes = [
        (f"n{i}", "add_audit_note", {"note": f"n{i} of {{{{record.id}}}}"}) for i in range(NOTES)
    ]
    made = []
    for name in ("Kill A", "Kill B"):
        graph = {
            "nodes": [{"id": "t", "type": "record.created", "config": {"model": "tasks"}}]
            + [{"id": i, "type": t, "config": c} for i, t, c in notes],
            "edges": [{"from": "t", "to": "n0"}]
            + [{"from": f"n{i}", "to": f"n{i + 1}"} for i in range(NOTES - 1)],
        }
        made.append(automations.create_automation(owner, name, graph, True))
    first_event = int(db.session.scalar(select(func.max(Event.id))) or 0)
    member = world.principal("member")
    for i in range(args.kill_events):
        records.create_record(member, world.model, {"title": f"K{i}"})
    rng = random.Random(7)
    kills, started = 0, time.perf_counter()
    while kills < KILLS and _pending() > 0:
        before = _newest_run()
        worker = _worker(env, workers=2)
        seen = time.monotonic() + 30
        # Until this worker has claimed a run of its own.
        while _newest_run() == before and time.monotonic() < seen and worker.poll() is None:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.05))  # somewhere inside the runs, not only at a start
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        kills += 1
    killing = time.perf_counter() - started
    # A last worker, and the periodic sweeps (what its scheduler queues) until all is done.
    engine.SWEEP_GRACE_SECONDS = 0.0
    worker = _worker(env, workers=2)
    deadline = time.monotonic() + 300
    try:
        while _pending() > 0 or _open_runs([a.id for a in made]) > 0:
            if time.monotonic() > deadline:
                misses.append("kill: work left after 300 s")
                break
            with app.app_context():
                leases.settle_cut_off.func()
                engine.sweep.func()
                webhooks.sweep_deliveries.func()
            time.sleep(0.5)
    finally:
        worker.send_signal(signal.SIGINT)
        worker.wait(30)
    elapsed = time.perf_counter() - started
    ids = [a.id for a in made]
    db.session.rollback()
    events = db.session.scalars(
        select(Event.id).where(Event.id > first_event, Event.type == "record.created")
    ).all()
    runs = db.session.execute(
        select(
            AutomationRun.automation_id,
            AutomationRun.trigger_event_id,
            AutomationRun.status,
            AutomationRun.error,
            AutomationRun.attempt,
        ).where(AutomationRun.automation_id.in_(ids))
    ).all()
    per_pair: dict[tuple[int, int], int] = {}
    for run in runs:
        per_pair[(run.automation_id, run.trigger_event_id)] = (
            per_pair.get((run.automation_id, run.trigger_event_id), 0) + 1
        )
    lost = sum(1 for e in events for a in ids if (a, e) not in per_pair)
    lost += sum(1 for r in runs if r.status not in ("succeeded", "failed", "skipped"))
    duplicated = sum(n - 1 for n in per_pair.values() if n > 1)
    written = db.session.execute(
        select(
            Event.payload["automation_id"].as_integer(),
            Event.payload["note"].as_string(),
            func.count(Event.id),
        )
        .where(Event.type == "automation.note", Event.id > first_event)
        .group_by(Event.payload["automation_id"].as_integer(), Event.payload["note"].as_string())
    ).all()
    duplicated += sum(n - 1 for *_, n in written if n > 1)
    cut_failed = sum(
        1 for r in runs if r.status == "failed" and (r.error or "").startswith("Cut off")
    )
    resumed = sum(1 for r in runs if r.attempt > 1)
    _row(f"kill -9 x{kills}: {len(events)} events x 2 automations", f"{len(runs)} runs")
    _row("  lost (no run, or left open)", f"{lost}")
    _row("  duplicated (a second run, or a note twice)", f"{duplicated}")
    _row("  cut off before an action: taken up once", f"{resumed}")
    _row("  cut off during an action: failed, not rerun", f"{cut_failed}")
    _row("  wall time: killing, then to the end", f"{killing:.1f} s, {elapsed:.1f} s")
    if kills < KILLS:
        misses.append(f"kill: only {kills} kills before the work ran out (more --kill-events)")
    if lost or duplicated:
        misses.append(f"kill: {lost} lost, {duplicated} duplicated")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--saves", type=int, default=30)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--retry-seconds", type=float, default=20.0)
    parser.add_argument("--kill-events", type=int, default=400)
    parser.add_argument("--rows", default=",".join(ROWS), help="any of " + ",".join(ROWS))
    args = parser.parse_args()
    rows = set(args.rows.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "DATABASE_URL": f"sqlite:///{tmp}/bench.db",
            "JOBS_URL": f"sqlite:///{tmp}/bench.jobs.db",
            "SECRET_KEY": "bench",
            "AUTOMATION_WEBHOOK_ALLOW_PRIVATE": "1",
            # A killed worker's run is settled 2 s after its last step, not 2 minutes.
            "AUTOMATION_RUN_LEASE_SECONDS": "2",
        }
        os.environ.update(env)
        app = create_app({"PASSWORD_HASH_METHOD": factories.FAST_HASH})
        misses: list[str] = []
        with app.app_context():
            db.create_all()
            world = factories.make_org_world("Acme")
            jobs.drain(app)
            _row("case", "value")
            if "latency" in rows:
                _latency_row(app, world, args, misses)
            if "drain" in rows:
                _drain_row(app, world, env, args, misses)
            if "retries" in rows:
                _retries_row(app, world, args, misses)
            if "kill" in rows:
                _kill_row(app, world, env, args, misses)
    for miss in misses:
        print(f"MISS: {miss}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
