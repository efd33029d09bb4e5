"""Fixtures: one app per session on SQLite (default) or DATABASE_URL, tables emptied per test."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from flask import Flask, g
from flask.testing import FlaskClient
from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from werkzeug.serving import make_server

from monark import create_app
from monark.core import jobs, mail, ratelimit
from monark.extensions import db
from tests import factories
from tests.databases import is_postgres, new_postgres_database
from tests.smtp_server import SmtpServer
from tests.tuning import configure, reconfigure
from tests.webhook_server import WebhookServer

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


# The slow tiers' files go first, so that on several processes the many short files fill in
# at the end instead of one process finishing a long file alone. CI runs a second database's
# pass beside the first with MONARK_TEST_SLOW_LAST=1: its short, CPU-bound files then run
# while the first pass's slow files mostly wait (on browsers, servers and clocks).
_TIER_ORDER = ("instances", "browser", "realtime")
_SLOW_LAST = os.environ.get("MONARK_TEST_SLOW_LAST", "") not in ("", "0")


@pytest.hookimpl(trylast=True)  # after tests/browser/conftest.py has marked its tier
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the files by tier (the slowest first, or last with ``MONARK_TEST_SLOW_LAST``),
    keeping each file's tests together and in order."""

    def tier(item: pytest.Item) -> int:
        marks = {m.name for m in item.iter_markers()}
        return next((i for i, name in enumerate(_TIER_ORDER) if name in marks), len(_TIER_ORDER))

    slowest: dict[str, int] = {}
    for item in items:
        path = item.location[0]
        slowest[path] = min(slowest.get(path, len(_TIER_ORDER)), tier(item))
    rank = {path: -t if _SLOW_LAST else t for path, t in slowest.items()}
    first_seen = {path: n for n, path in enumerate(dict.fromkeys(i.location[0] for i in items))}
    items.sort(key=lambda i: (rank[i.location[0]], first_seen[i.location[0]]))


def _database_url(tmpdir: str) -> str:
    return os.environ.get("DATABASE_URL") or f"sqlite:///{tmpdir}/test.db"


@contextmanager
def _worker_database(url: str) -> Iterator[str]:
    """Under pytest-xdist each worker gets a database of its own on the PostgreSQL server of
    ``url`` (made here, dropped afterwards); SQLite files are per worker already."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or not is_postgres(url):
        yield url
        return
    with new_postgres_database(url, f"{make_url(url).database}_{worker}") as own:
        yield own


@pytest.fixture(scope="session")
def app() -> Iterator[Flask]:
    with tempfile.TemporaryDirectory() as tmpdir, _worker_database(_database_url(tmpdir)) as url:
        os.environ["DATABASE_URL"] = url
        app = create_app(
            {
                "TESTING": True,
                "SECRET_KEY": "test",
                "PASSWORD_HASH_METHOD": factories.FAST_HASH,
                # The session's own queue file, whatever the database.
                "JOBS_URL": f"sqlite:///{tmpdir}/jobs.db",
                # Mail goes to the session's own outbox folder unless a test sets MAIL_URL.
                "MAIL_OUTBOX": f"{tmpdir}/outbox",
                # One try per webhook unless a test asks for retries, and short waits then.
                "WEBHOOK_MAX_ATTEMPTS": 1,
                "WEBHOOK_RETRY_SECONDS": 0.05,
                "WEBHOOK_RETRY_FACTOR": 2.0,
                "WEBHOOK_RETRY_JITTER": 0.0,
            }
        )
        with app.app_context():
            if db.engine.dialect.name == "sqlite":
                # Tests need no crash safety; fsync per commit was half their runtime.
                @event.listens_for(db.engine, "connect")
                def _fast_sqlite(connection, record):
                    connection.execute("PRAGMA synchronous=OFF")

                db.engine.dispose()
            db.drop_all()
            db.create_all()
        yield app
        with app.app_context():
            db.session.remove()
            db.drop_all()


@pytest.fixture(scope="session")
def live_server(app: Flask) -> Iterator[str]:
    """The app served by werkzeug on a loopback port, for real HTTP clients; yields its URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def _empty_tables() -> None:
    # DELETE, not TRUNCATE: on tables this small PostgreSQL's TRUNCATE costs seven times more.
    for table in reversed(db.metadata.sorted_tables):
        db.session.execute(table.delete())
    if db.engine.dialect.name == "postgresql":
        db.session.execute(text(_restart_sequences()))
    db.session.commit()


_RESTART: list[str] = []


def _restart_sequences() -> str:
    """One statement that starts every id sequence again at 1, as TRUNCATE's RESTART IDENTITY."""
    if not _RESTART:
        names = db.session.execute(
            text(
                "SELECT pg_get_serial_sequence(c.table_name, c.column_name) FROM"
                " information_schema.columns c WHERE c.table_schema = current_schema()"
                " AND pg_get_serial_sequence(c.table_name, c.column_name) IS NOT NULL"
            )
        ).scalars()
        _RESTART.append("SELECT " + ", ".join(f"setval('{n}', 1, false)" for n in names))
    return _RESTART[0]


@pytest.fixture(autouse=True)
def _clean_db(app: Flask) -> Iterator[None]:
    ratelimit.reset(app)  # every test starts with nothing counted (sign-ins, messages, …)
    jobs.queue(app).huey.flush()  # no job of an earlier test runs in this one
    shutil.rmtree(mail.state(app).outbox, ignore_errors=True)  # nor its mail shows
    with app.app_context():
        _empty_tables()
        yield
        db.session.remove()


@pytest.fixture(scope="session")
def _world_rows(app: Flask) -> factories.WorldSnapshot:
    """The demo world, made once per process in emptied tables and kept as rows."""
    with app.app_context():
        _empty_tables()
        snapshot = factories.WorldSnapshot()
        _empty_tables()
        db.session.remove()
    return snapshot


@pytest.fixture
def world(app: Flask, _world_rows: factories.WorldSnapshot) -> factories.World:
    """Two orgs (Acme, Globex), a user per role in each, a tasks model, records and keys:
    made fresh for each test (restored from the rows made once)."""
    return _world_rows.restore()


class Browser:
    """A test client that signs in and sends the CSRF token like a browser form would."""

    def __init__(self, client: FlaskClient):
        self.client = client
        self.csrf = ""

    def _refresh_token(self, html: str) -> None:
        match = CSRF_RE.search(html)
        if match:
            self.csrf = match.group(1)

    def login(self, email: str, password: str = factories.PASSWORD) -> Browser:
        self._fresh_user()
        self._refresh_token(self.client.get("/login").get_data(as_text=True))
        response = self.client.post(
            "/login", data={"email": email, "password": password, "csrf_token": self.csrf}
        )
        assert response.status_code == 302, response.get_data(as_text=True)[:500]
        self._refresh_token(self.client.get("/profile").get_data(as_text=True))
        return self

    @staticmethod
    def _fresh_user() -> None:
        # The test keeps one app context open, which requests reuse; Flask-Login and
        # Flask-WTF cache the user and the CSRF token on ``g``, so start each request clean.
        for key in list(g):
            g.pop(key, None)

    def get(self, url: str, **kw):
        self._fresh_user()
        return self.client.get(url, **kw)

    def post(self, url: str, data: dict | None = None, **kw):
        self._fresh_user()
        return self.client.post(url, data={**(data or {}), "csrf_token": self.csrf}, **kw)

    def api(self, method: str, url: str, **kw):
        self._fresh_user()
        headers = {"X-CSRFToken": self.csrf, **kw.pop("headers", {})}
        return self.client.open(url, method=method, headers=headers, **kw)


@pytest.fixture
def smtp(app: Flask, monkeypatch: pytest.MonkeyPatch) -> Iterator[SmtpServer]:
    """A real SMTP server on loopback that the app's mail goes to (``MAIL_URL``) in this test,
    with short retry delays."""
    server = SmtpServer().start()
    for key in [k for k in app.config if k.startswith("MAIL_")]:
        monkeypatch.setitem(app.config, key, app.config[key])  # restored after the test
    for key in ("mailman", mail.EXTENSION):
        monkeypatch.setitem(app.extensions, key, app.extensions[key])
    configure(monkeypatch, app, MAIL_URL=server.url(), MAIL_RETRY_SECONDS=0.01)
    mail.configure(app)
    yield server
    server.stop()


@pytest.fixture
def browser(app: Flask) -> Browser:
    return Browser(app.test_client())


@pytest.fixture
def login(app: Flask):
    """``login(email)`` gives a signed-in Browser."""

    def _login(email: str) -> Browser:
        return Browser(app.test_client()).login(email)

    return _login


class NoModel:
    """The provider every test starts with: a test that reaches a model without asking for
    the scripted provider or the fake Anthropic server fails (no key, no network, ever)."""

    name = "no-model"

    def __init__(self) -> None:
        self.reached = 0

    def problem(self) -> None:
        return None

    def stream(self, request):
        self.reached += 1
        raise AssertionError("this test reached a model: use `scripted` or `fake_anthropic`")


@pytest.fixture(autouse=True)
def _no_model(app: Flask, _clean_db) -> Iterator[None]:
    from monark.chat.runtime import runtime, set_llm_provider

    guard = NoModel()
    set_llm_provider(guard)
    yield
    if runtime(app).override is guard:
        set_llm_provider(None)
    if guard.reached:
        pytest.fail("the test reached a model without the scripted or fake provider")


@pytest.fixture
def scripted(app: Flask):
    """The scripted in-process provider, installed for one test."""
    from monark.chat.runtime import set_llm_provider
    from tests.llm_script import ScriptedProvider

    provider = ScriptedProvider()
    set_llm_provider(provider)
    yield provider
    set_llm_provider(None)


@pytest.fixture
def fake_anthropic(app: Flask, monkeypatch):
    """The real AnthropicProvider, via ANTHROPIC_BASE_URL, talking to a loopback fake."""
    from monark.chat.runtime import llm_provider, set_llm_provider
    from tests.fake_anthropic import FakeAnthropic

    fake = FakeAnthropic().start()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    set_llm_provider(None)
    reconfigure(app, ANTHROPIC_API_KEY="sk-test-not-real")
    llm_provider()  # built now, reading ANTHROPIC_BASE_URL like any deploy
    yield fake
    set_llm_provider(None)
    reconfigure(app, ANTHROPIC_API_KEY="")
    fake.stop()


@pytest.fixture
def webhook(app: Flask, monkeypatch) -> Iterator[WebhookServer]:
    """A real loopback server that takes webhooks, with private addresses allowed for
    webhooks during the test."""
    monkeypatch.setitem(app.config, "AUTOMATION_WEBHOOK_ALLOW_PRIVATE", True)
    server = WebhookServer().start()
    yield server
    server.stop()
