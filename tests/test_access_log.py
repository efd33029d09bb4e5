"""Access logs, under gunicorn (``monark.gunicorn_conf``) and ``flask run`` (werkzeug's
request log): no query string (SQL, filters, search words), no token in a path."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import httpx2
import pytest
from gunicorn.config import Config

from monark.core.accesslog import redact
from monark.gunicorn_conf import AccessLogger
from tests.instances import BIN, HOST, ROOT, free_port

INVITE = "inv_s3cret-T0ken_value0123456789ab"  # the shape of settings.members' tokens
SQL = "SELECT title FROM tasks WHERE title = 'Quarterly secret'"
# What a request may carry that an access log must not: SQL, field values, tokens.
REQUESTS = [
    ("/api/v1/query", {"sql": SQL}),
    ("/models/tasks/records", {"q": "Quarterly secret", "filter": "title:eq:Quarterly secret"}),
    (f"/invite/{INVITE}", {}),
    ("/reset/eyJ1c2VyIjo0Mn0.ZxKq9w.Hc2pQ-7yKJ_3mVx0bTfGl1s", {}),  # a signed reset link
    ("/confirm/3f1b9c2ad8e44f0fa1b2c3d4e5f60718", {}),  # a hex token
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LEAKS = ["Quarterly", "secret", "SELECT", "title:eq", INVITE, "eyJ1c2Vy", "3f1b9c2ad8e4"]


def _leaks(text: str) -> list[str]:
    return [needle for needle in LEAKS if needle.lower() in text.lower()]


@pytest.mark.parametrize(
    ("line", "logged"),
    [
        (f"GET /invite/{INVITE}?utm=mail HTTP/1.1", "GET /invite/[redacted]?[redacted] HTTP/1.1"),
        ("GET /api/v1/query?sql=SELECT%201 HTTP/1.1", "GET /api/v1/query?[redacted] HTTP/1.1"),
        (
            "https://app.example/reset/9b2c4e1f-0a3d-4c5e-8f7a-6b5c4d3e2f1a",
            "https://app.example/reset/[redacted]",
        ),
        # Names stay: model keys, ids, static files.
        ("GET /models/customer_tickets_2024/records/12 HTTP/1.1", None),
        ("GET /static/vendor/htmx.min.js HTTP/1.1", None),
        ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0.0.0", None),
    ],
)
def test_one_rule_cuts_tokens_and_query_strings_and_keeps_names(line, logged):
    assert redact(line) == (logged or line)


def test_flask_runs_request_log_has_no_query_strings_or_tokens(live_server, caplog):
    caplog.set_level(logging.INFO, logger="werkzeug")
    with httpx2.Client(base_url=live_server) as http:
        for path, params in REQUESTS:
            http.get(path, params=params)
    # Without its colours (werkzeug paints a line by its status).
    lines = [ANSI.sub("", r.getMessage()) for r in caplog.records if r.name == "werkzeug"]
    assert len([line for line in lines if '"GET ' in line]) == len(REQUESTS)
    assert _leaks("\n".join(lines)) == []
    assert any('"GET /api/v1/query?[redacted] HTTP/1.1" 401' in line for line in lines)
    assert any('"GET /invite/[redacted] HTTP/1.1"' in line for line in lines)


@dataclass
class Gunicorn:
    url: str
    proc: subprocess.Popen
    log_path: Path

    def wait_for(self, ready: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text()[-3000:]
                raise AssertionError(f"gunicorn never got there:\n{tail}")
            time.sleep(0.05)

    def lines(self) -> list[str]:
        """The access log's lines of GET requests, so far."""
        return [line for line in self.log_path.read_text().splitlines() if '"GET ' in line]


@pytest.fixture(scope="module")
def gunicorn() -> Iterator[Gunicorn]:
    """The app under gunicorn with Monark's own settings (``monark.gunicorn_conf``)."""
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {
            **os.environ,
            "DATABASE_URL": f"sqlite:///{tmp}/empty.db",
            "SECRET_KEY": "access-log-test-" + "x" * 32,
            "MONARK_BIND": f"{HOST}:{port}",
            "WEB_CONCURRENCY": "1",
            "MONARK_THREADS": "4",
        }
        log_path = Path(tmp) / "gunicorn.log"
        with open(log_path, "w") as log:
            command = [str(BIN / "gunicorn"), "-c", "python:monark.gunicorn_conf", "app:app"]
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
        server = Gunicorn(f"http://{HOST}:{port}", proc, log_path)
        try:
            server.wait_for(lambda: _answers(server.url))
            yield server
        finally:
            proc.terminate()
            proc.wait(15)


def _answers(url: str) -> bool:
    try:
        return httpx2.get(url + "/login", timeout=2).status_code == 200
    except httpx2.HTTPError:
        return False


@pytest.mark.instances
def test_gunicorns_access_log_has_no_query_strings_or_tokens(gunicorn):
    url = gunicorn.url
    with httpx2.Client(base_url=url) as http:
        for path, params in REQUESTS:
            headers = {"Referer": f"{url}/invite/{INVITE}?q=Quarterly+secret"}
            http.get(path, params=params, headers=headers)
    # gunicorn writes a request's line once its answer is sent: wait for the last one.
    gunicorn.wait_for(lambda: any("/confirm/" in line for line in gunicorn.lines()))
    lines = gunicorn.lines()
    assert _leaks("\n".join(lines)) == []
    assert any('"GET /api/v1/query?[redacted] HTTP/1.1" 401' in line for line in lines)
    assert any(f'"{url}/invite/[redacted]?[redacted]"' in line for line in lines)  # Referer


def test_gunicorns_atoms_hold_no_query_string_whatever_the_format_names():
    """A deployment's own ``access_log_format`` may name any atom: each is safe."""
    environ = {
        "REQUEST_METHOD": "GET",
        "RAW_URI": f"/invite/{INVITE}?utm=mail",
        "PATH_INFO": f"/invite/{INVITE}",
        "QUERY_STRING": "sql=SELECT+1",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_REFERER": f"https://app.example/invite/{INVITE}",
    }
    response = SimpleNamespace(status="303 SEE OTHER", sent=0, headers=[("Location", "/x?a=b")])
    request = SimpleNamespace(headers=[("Referer", f"https://app.example/invite/{INVITE}")])
    atoms = AccessLogger(Config()).atoms(response, request, environ, timedelta(seconds=0))
    assert _leaks(repr(atoms)) == [] and "utm" not in repr(atoms)
    assert atoms["r"] == "GET /invite/[redacted]?[redacted] HTTP/1.1"
    assert (atoms["U"], atoms["q"], atoms["{location}o"]) == (
        "/invite/[redacted]",
        "[redacted]",
        "/x?[redacted]",
    )
