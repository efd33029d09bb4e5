"""The job queue: Huey on a SQLite file beside the database, or on Redis (``JOBS_URL``).

Features declare their jobs at import (``job`` for work queued by the app, ``periodic`` for
work the consumer's scheduler queues itself); ``init_app`` binds them to the app's Huey, so a
job always runs inside an app context of the app that queued it. Work is consumed by
``flask jobs worker`` beside gunicorn, or under ``flask run`` by a consumer in the dev
server's own process (threads), so ``make run`` needs no second command.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
from flask import Flask, current_app
from flask.cli import AppGroup
from huey import Huey, RedisHuey, SqliteHuey, crontab
from huey.api import TaskWrapper
from huey.consumer import Consumer
from huey.storage import SqliteStorage
from sqlalchemy.engine import make_url

from monark.extensions import db

log = logging.getLogger(__name__)

QUEUE_NAME = "monark"
EXTENSION = "monark.jobs"
# An idle consumer on SQLite polls less and less often, up to this (Redis blocks instead):
# Huey's own 10 s would leave an automation waiting that long after a quiet spell.
POLL_MAX_SECONDS = 1.0
FAR_FUTURE = datetime(2999, 1, 1)  # ``drain_scheduled`` reads the schedule up to here


@dataclass(frozen=True)
class JobSettings:
    """The queue's settings, read once from the app's config."""

    url: str  # redis://… or sqlite:///path/to/file
    workers: int  # threads of a consumer started by ``flask run``
    sweep_minutes: int  # how often periodic sweeps run

    @classmethod
    def from_app(cls, app: Flask) -> JobSettings:
        """The settings of ``app``; the SQLite file sits beside a SQLite database."""
        url = app.config["JOBS_URL"].strip()
        if not url:
            url = "sqlite:///" + str(_beside_database(app))
        return cls(
            url=url,
            workers=int(app.config["JOBS_WORKERS"]),
            sweep_minutes=int(app.config["JOBS_SWEEP_MINUTES"]),
        )


def _beside_database(app: Flask) -> Path:
    """``monark.jobs.db`` next to a SQLite database file, else in the instance folder."""
    db_url = make_url(app.config["SQLALCHEMY_DATABASE_URI"])
    if db_url.get_backend_name() == "sqlite" and db_url.database not in (None, "", ":memory:"):
        path = Path(db_url.database)
        return path.with_name(path.stem + ".jobs.db")
    return Path(app.instance_path) / "monark.jobs.db"


class QueueFile(SqliteStorage):
    """Huey's SQLite storage, committing without an fsync each time (WAL, ``synchronous``
    NORMAL): never corrupt, and a job lost with the machine's power is one whose event is
    still pending in the database, which the sweep runs. Half a job's commits are here."""

    def _create_connection(self) -> Any:
        conn = super()._create_connection()
        conn.execute("pragma synchronous=NORMAL")
        return conn


def _make_huey(settings: JobSettings, name: str) -> Huey:
    if settings.url.startswith(("redis://", "rediss://", "unix://")):
        # No results are kept: a job's outcome is written to the database it works on.
        return RedisHuey(name, url=settings.url, results=False, utc=True)
    if settings.url.startswith("sqlite:///"):
        filename = settings.url[len("sqlite:///") :]
        Path(filename).parent.mkdir(parents=True, exist_ok=True)
        return SqliteHuey(name, filename=filename, results=False, utc=True, storage_class=QueueFile)
    raise RuntimeError("JOBS_URL must be redis://host:port/db or sqlite:///path/to/file.")


# ---- declaring jobs ---------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """A job declared by a feature; ``enqueue`` queues it on the current app's queue."""

    name: str
    func: Callable[..., Any]
    every_sweep: bool = False  # periodic: run every ``JOBS_SWEEP_MINUTES``
    minutes: int | None = None  # periodic every this many minutes instead (1-60)

    def enqueue(self, *args: Any, app: Flask | None = None, delay: float = 0.0) -> None:
        """Queue one run of this job with ``args`` (picklable), ``delay`` seconds from now;
        raises if storage fails."""
        app = app or current_app._get_current_object()  # type: ignore[attr-defined]
        task = queue(app).tasks[self.name]
        if delay > 0:
            task.schedule(args, delay=delay)
        else:
            task(*args)
        _look_for_a_consumer(app)


_JOBS: dict[str, Job] = {}


def job(name: str) -> Callable[[Callable[..., Any]], Job]:
    """Declare ``func`` as a job named ``name`` (unique across features)."""

    def declare(func: Callable[..., Any]) -> Job:
        declared = Job(name, func)
        _JOBS[name] = declared
        return declared

    return declare


def periodic(name: str, minutes: int | None = None) -> Callable[[Callable[[], Any]], Job]:
    """Declare ``func`` as a job the consumer queues every ``minutes`` (default:
    ``JOBS_SWEEP_MINUTES``)."""

    def declare(func: Callable[[], Any]) -> Job:
        declared = Job(name, func, every_sweep=True, minutes=minutes)
        _JOBS[name] = declared
        return declared

    return declare


# ---- the app's queue --------------------------------------------------------------------


@dataclass
class Queue:
    """One app's Huey and its bound jobs."""

    huey: Huey
    settings: JobSettings
    tasks: dict[str, TaskWrapper]
    consumer: Consumer | None = None


def _bound(app: Flask, func: Callable[..., Any]) -> Callable[..., Any]:
    def run_in_app(*args: Any) -> None:
        with app.app_context():
            func(*args)

    run_in_app.__module__ = func.__module__
    return run_in_app


def init_app(app: Flask) -> Queue:
    """Make the app's queue and bind every declared job to it."""
    made = app.extensions[EXTENSION] = build_queue(app, JobSettings.from_app(app))
    app.cli.add_command(jobs_cli)
    if _serving_under_flask_run(app):
        start_in_process(app)
        click.echo(f" * Jobs: a consumer on {made.settings.workers} threads of this process")
    return made


def build_queue(app: Flask, settings: JobSettings, name: str = QUEUE_NAME) -> Queue:
    """A queue for ``app`` on the storage ``settings`` name, with every declared job."""
    huey = _make_huey(settings, name)
    tasks: dict[str, TaskWrapper] = {}
    for declared in _JOBS.values():
        bound = _bound(app, declared.func)
        if declared.every_sweep:
            every = crontab(minute=f"*/{declared.minutes or settings.sweep_minutes}")
            tasks[declared.name] = huey.periodic_task(every, name=declared.name)(bound)
        else:
            tasks[declared.name] = huey.task(name=declared.name)(bound)

    @huey.on_startup()
    def fresh_connections() -> None:
        # A worker process forked by ``--worker-type process`` must not share the
        # connections its parent opened.
        with app.app_context():
            db.engine.dispose(close=False)
        beat(huey)  # seen from its start, not only at its first whole minute

    return Queue(huey, settings, tasks)


def queue(app: Flask) -> Queue:
    """The app's queue."""
    return app.extensions[EXTENSION]


def drain(app: Flask, *, limit: int = 10_000) -> int:
    """Run the jobs waiting in the queue in this thread until none is left; how many ran.

    For tests and the benchmark: what a consumer does, without a thread to wait for.
    """
    huey = queue(app).huey
    ran = 0
    while ran < limit and (task := huey.dequeue()) is not None:
        huey.execute(task)
        ran += 1
    return ran


def drain_scheduled(app: Flask, *, limit: int = 10_000) -> int:
    """``drain``, and the jobs scheduled for later (retries) run now, as if their time had
    come, until none is left; how many ran. For tests: a retry without its wait."""
    huey = queue(app).huey
    ran = drain(app, limit=limit)
    while ran < limit:
        due = huey.read_schedule(FAR_FUTURE)
        if not due:
            return ran
        for task in due:
            huey.execute(task, timestamp=task.eta)
            ran += 1
        ran += drain(app, limit=limit - ran)
    return ran


# ---- is anyone consuming? ----------------------------------------------------------------

HEARTBEAT_KEY = "monark.heartbeat"
# A consumer beats every minute: none seen for this long means none is running.
STALE_AFTER = timedelta(minutes=3)
_warned: dict[str, float] = {}  # queue url → when this process last logged it stale


def beat(huey: Huey) -> None:
    """Write now as the time a consumer was last seen, in the queue's own storage."""
    huey.put(HEARTBEAT_KEY, datetime.now(UTC).isoformat())


@periodic("jobs.heartbeat", minutes=1)
def heartbeat() -> None:
    """A consumer is alive: its scheduler queued this and one of its workers ran it."""
    beat(queue(current_app).huey)


@dataclass(frozen=True)
class Health:
    """Whether a consumer was seen lately; ``reachable`` False when the storage is down."""

    reachable: bool
    seen_at: datetime | None

    @property
    def stale(self) -> bool:
        """No consumer beat within ``STALE_AFTER`` (or the queue cannot be read)."""
        return self.seen_at is None or datetime.now(UTC) - self.seen_at > STALE_AFTER


def health(app: Flask) -> Health:
    """When a consumer was last seen; a stale one is logged (once in 10 minutes)."""
    made = queue(app)
    try:
        raw = made.huey.get(HEARTBEAT_KEY, peek=True)
    except Exception:  # the storage's own errors (sqlite3, redis) have no common base
        log.warning("the job queue cannot be read", exc_info=True)
        return Health(False, None)
    seen = datetime.fromisoformat(raw) if isinstance(raw, str) else None
    found = Health(True, seen)
    if found.stale and time.monotonic() - _warned.get(made.settings.url, -1e9) > 600:
        _warned[made.settings.url] = time.monotonic()
        since = f"since {seen:%Y-%m-%d %H:%M} UTC" if seen else "yet"
        # Never seen on this storage is how a fresh setup starts (``make run`` seeds its
        # data before it serves): worth a line, not a warning.
        log.log(
            logging.WARNING if seen else logging.INFO,
            "no job consumer seen %s: automations and schedules wait until "
            "`flask jobs worker` (or `flask run`) runs",
            since,
        )
    return found


_looked: dict[str, float] = {}  # queue url → when this process last read the heartbeat
LOOK_EVERY_SECONDS = 60.0


def _look_for_a_consumer(app: Flask) -> None:
    """Whoever queues work hears (in its log) that nobody consumes it: the heartbeat is
    read at most once a minute per process."""
    url = queue(app).settings.url
    if time.monotonic() - _looked.get(url, -1e9) >= LOOK_EVERY_SECONDS:
        _looked[url] = time.monotonic()
        health(app)


# ---- consumers --------------------------------------------------------------------------


class InProcessConsumer(Consumer):
    """A consumer on threads of a process that owns its signals (the dev server's)."""

    def _set_signal_handlers(self) -> None:
        # Huey's handlers can only be set on the main thread, and Ctrl+C is the server's.
        pass


def start_in_process(app: Flask, workers: int | None = None) -> InProcessConsumer:
    """Start a threaded consumer in this process (the dev server's, or a test's)."""
    made = queue(app)
    consumer = InProcessConsumer(
        made.huey,
        workers=workers or made.settings.workers,
        worker_type="thread",
        max_delay=POLL_MAX_SECONDS,
    )
    consumer.start()
    made.consumer = consumer
    return consumer


def stop_in_process(app: Flask) -> None:
    """Stop the consumer ``start_in_process`` started, after its running jobs end."""
    made = queue(app)
    if made.consumer is not None:
        made.consumer.stop(graceful=True)
        made.consumer = None


def _serving_under_flask_run(app: Flask) -> bool:
    """Whether this process is the one ``flask run`` serves from (not the reloader's
    watcher, which serves nothing, nor any other command, gunicorn or a test)."""
    # ``flask`` loads the app while it looks the command up, before any context of ``run``
    # exists: the command line is what says it.
    argv = [a for a in sys.argv[1:] if not a.startswith("-")]
    is_flask = Path(sys.argv[0]).name == "flask" or sys.argv[0].endswith("flask/__main__.py")
    if not is_flask or "run" not in argv or app.config.get("TESTING"):
        return False
    if os.environ.get("WERKZEUG_RUN_MAIN") == "true":
        return True  # the reloader's child: the serving process
    reloads = (app.debug and "--no-reload" not in sys.argv) or "--reload" in sys.argv
    return not reloads


jobs_cli = AppGroup("jobs", help="The job queue.")


@jobs_cli.command("worker")
@click.option("--workers", "-w", default=2, show_default=True, help="Jobs run at once.")
@click.option(
    "--worker-type",
    "-k",
    type=click.Choice(["thread", "process"]),
    default="thread",
    show_default=True,
)
def worker_command(workers: int, worker_type: str) -> None:
    """Consume the queue until stopped (SIGINT or SIGTERM: after the running jobs end)."""
    made = queue(current_app)
    click.echo(f"Consuming {made.settings.url.split('@')[-1]} with {workers} {worker_type}(s).")
    Consumer(made.huey, workers=workers, worker_type=worker_type, max_delay=POLL_MAX_SECONDS).run()
