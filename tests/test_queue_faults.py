"""The queue's SQLite file unavailable at commit: the write commits all the same, and its
work runs once the file is back (the sweep), exactly once."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from flask import Flask

from monark.automations import engine
from monark.core import jobs
from monark.extensions import db
from monark.records import services as records
from monark.records.models import Record
from tests import test_jobs
from tests.jobs import drain
from tests.test_automations import FOLLOW_UP, make_automation, runs_of
from tests.test_jobs import _event_of, _followups

acme = test_jobs.acme  # Acme with its followups model (a fixture)


@pytest.fixture
def own_file_queue(app: Flask, tmp_path: Path) -> Iterator[tuple[jobs.Queue, Path]]:
    """The app queues on a SQLite file of this test's own until it ends."""
    original = jobs.queue(app)
    path = tmp_path / "queue.db"
    made = jobs.build_queue(
        app,
        replace(original.settings, url=f"sqlite:///{path}"),
        name=f"monark-test-{uuid.uuid4().hex[:8]}",
    )
    app.extensions[jobs.EXTENSION] = made
    try:
        yield made, path
    finally:
        made.huey.storage.close()
        app.extensions[jobs.EXTENSION] = original


def _take_away(path: Path) -> list[tuple[Path, Path]]:
    """The file (and its WAL) moved aside and a directory in its place: nothing can open it."""
    moved = []
    for part in path.parent.glob(path.name + "*"):
        aside = part.with_name(part.name + ".aside")
        os.replace(part, aside)
        moved.append((aside, part))
    path.mkdir()
    return moved


def _bring_back(path: Path, moved: list[tuple[Path, Path]]) -> None:
    path.rmdir()
    for aside, part in moved:
        os.replace(aside, part)


def test_the_write_commits_while_the_queue_file_is_gone_and_its_work_runs_after(
    acme, app, own_file_queue, monkeypatch
):
    made, path = own_file_queue
    automation = make_automation(acme, FOLLOW_UP)
    made.huey.storage.close()  # its open connection would still reach the moved file
    moved = _take_away(path)
    try:
        with pytest.raises(Exception, match="unable to open database file"):
            made.huey.pending_count()
        task = records.create_record(
            acme.principal("member"), acme.model, {"title": "No queue file", "status": "todo"}
        )
    finally:
        made.huey.storage.close()
        _bring_back(path, moved)
    db.session.expire_all()
    assert db.session.get(Record, task.id).values["title"] == "No queue file"
    assert _event_of(task.id).pending and runs_of(automation.id) == []
    assert drain() == 0  # nothing reached the queue
    monkeypatch.setattr(engine, "SWEEP_GRACE_SECONDS", 0.0)
    made.tasks["automations.sweep"]()  # the file is back: the scheduler's next sweep
    assert drain() >= 1
    [run] = runs_of(automation.id)
    assert run.status == "succeeded" and _followups(acme) == 1
    assert not _event_of(task.id).pending
    made.tasks["automations.sweep"]()
    drain()
    assert len(runs_of(automation.id)) == 1 and _followups(acme) == 1
