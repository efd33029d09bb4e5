"""``make run``'s sequence on a fresh SQLite file serves the app with its automations
working, with no second command: ``flask run`` consumes the queue in its own process."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.instances import BIN, HOST, ROOT, Client, flask_command, free_port

pytestmark = pytest.mark.instances


@pytest.fixture
def made_run(tmp_path: Path) -> Iterator[str]:
    """``flask db upgrade``, ``flask seed-demo``, ``flask run`` (as the Makefile's ``run``)
    on a new SQLite file, nothing else started; yields the server's URL."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("JOBS_", "CHAT_BROKER", "PYTEST", "FLASK_"))
    }
    env |= {"DATABASE_URL": f"sqlite:///{tmp_path}/monark.db", "SECRET_KEY": "make-run-test"}
    flask_command("db", "upgrade", env=env)
    flask_command("seed-demo", env=env)
    port = free_port()
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [str(BIN / "flask"), "--app", "app", "run", "--host", HOST, "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=out,
        )
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, log.read_text()[-3000:]
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(url + "/login", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "flask run did not answer within 60 s"
            time.sleep(0.1)
        assert "Jobs: a consumer on" in log.read_text()
        assert (tmp_path / "monark.jobs.db").exists()  # the queue beside the database
        yield url
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)


def test_make_runs_sequence_runs_an_automation_with_no_second_command(made_run):
    ada = Client(made_run)  # the demo owner
    form = ada.http.get("/models/tasks/records/new").text
    token = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
    made = ada.http.post(
        "/models/tasks/records/new",
        data={"csrf_token": token, "v_title": "Ship the queue", "v_status": "todo"},
    )
    assert made.status_code == 303, made.text[:500]
    record = made.headers["location"].rstrip("/").rsplit("/", 1)[-1]
    # The demo's "Review finished tasks": a task set to done gets a review task.
    started = time.monotonic()
    done = ada.http.post(
        f"/models/tasks/records/{record}/edit",
        data={"csrf_token": token, "v_title": "Ship the queue", "v_status": "done"},
    )
    assert done.status_code == 303, done.text[:500]
    assert time.monotonic() - started < 5  # the save did not wait for the run
    deadline = time.monotonic() + 30
    while "Review: Ship the queue" not in ada.http.get("/models/tasks/records").text:
        assert time.monotonic() < deadline, "the automation never ran"
        time.sleep(0.2)
    automations = ada.http.get("/automations").text
    assert "Review finished tasks" in automations and "succeeded" in automations
    assert 'id="queue-health"' not in automations  # the consumer is seen: no warning
