"""Benchmark of work outside the request: what a save waits for, how fast workers drain.

* Save latency: ``POST /api/v1/models/tasks/records`` (Bearer API key, the Flask test
  client, server time only) with no automations, then with 5 enabled automations each
  sending a webhook to a loopback endpoint that takes 2 s to answer. The save must not wait
  for them: its median within 10% (or 5 ms) of the save without automations.
* Drain rate: ``--events`` records created while no consumer runs (one cheap automation
  each: an audit note), then 2 ``flask jobs worker`` processes (one thread each) started
  on the same queue file; events per second until no event is pending.

Runs on a fresh temporary SQLite database and queue file; prints a table, exits 1 on a miss.

    .venv/bin/python bench/jobs_bench.py
    .venv/bin/python bench/jobs_bench.py --saves 40 --events 2000
"""

from __future__ import annotations

import argparse
import os
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
from sqlalchemy import func, select  # noqa: E402

from monark import create_app  # noqa: E402
from monark.automations import services as automations  # noqa: E402
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


def drain_rate(world: factories.OrgWorld, events: int, env: dict[str, str]) -> tuple[float, list]:
    """Events per second that 2 ``flask jobs worker`` processes drain, from ``events``
    records created while none ran (one enabled automation each: an audit note), until no
    event is pending; and what missed (a drain that never ends)."""
    owner, misses = world.principal("owner"), []
    for automation in automations.list_automations(owner):
        automations.set_enabled(owner, automation.id, False)
    note = ("note", "add_audit_note", {"note": "saw {{record.id}}"})
    automations.create_automation(owner, "Note", _graph(note), True)
    member = world.principal("member")
    for i in range(events):
        records.create_record(member, world.model, {"title": f"E{i}"})
    assert _pending() == events
    workers = [
        subprocess.Popen(
            [str(Path(sys.executable).with_name("flask")), *WORKER],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
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
    return events / elapsed, misses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--saves", type=int, default=30)
    parser.add_argument("--events", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "DATABASE_URL": f"sqlite:///{tmp}/bench.db",
            "JOBS_URL": f"sqlite:///{tmp}/bench.jobs.db",
            "SECRET_KEY": "bench",
            "AUTOMATION_WEBHOOK_ALLOW_PRIVATE": "1",
        }
        os.environ.update(env)
        app = create_app({"PASSWORD_HASH_METHOD": factories.FAST_HASH})
        misses = []
        with app.app_context():
            db.create_all()
            world = factories.make_org_world("Acme")
            key = factories.make_key(world.principal("owner"), "member")
            jobs.drain(app)
            # The dev server's setup: a consumer on threads of the serving process, so the
            # webhooks really run (and take their 2 s) while the saves are measured.
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
            db.session.execute(Event.__table__.update().values(pending=False))
            db.session.commit()
            fine = hooked <= max(bare * 1.10, bare + 0.005)
            misses += [] if fine else ["save latency with 5 slow webhooks"]
            print(f"{'case':<44}{'value':>14}")
            print(f"{'save, no automations (median)':<44}{bare * 1000:>11.1f} ms")
            print(f"{'save, 5 automations x 2 s webhook (median)':<44}{hooked * 1000:>11.1f} ms")

            rate, missed = drain_rate(world, args.events, env)
            misses += missed
            print(f"{f'{args.events} events, 2 worker processes':<44}{rate:>9.0f} ev/s")
    for miss in misses:
        print(f"MISS: {miss}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
