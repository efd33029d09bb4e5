"""Real app processes for tests and benchmarks: gunicorn instances on one database.

A ``Deployment`` makes an empty database (a temporary SQLite file, or a fresh PostgreSQL
database on the server of ``DATABASE_URL``), migrates it and loads the demo data with the
README's own commands, and starts gunicorn instances (gthread, one worker each) that share
it, a ``SECRET_KEY`` and, when ``broker`` is set, Redis as their broker. Their model is the
fake Anthropic server of ``tests/fake_anthropic.py``, running in this process. ``Client``
signs in over HTTP and reads Server-Sent Events as they come.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from sqlalchemy import create_engine, text

from tests.databases import is_postgres, new_postgres_database
from tests.fake_anthropic import FakeAnthropic
from tests.llm_script import Call, Say

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
PASSWORD = "monark-demo"
REDIS_URL = os.environ.get("MONARK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)"')
CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


_GIVEN_PORTS: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, never one this process handed out before: the
    instances of a deployment boot side by side, so none has bound its port when the next
    asks for one."""
    while True:
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port


@contextlib.contextmanager
def empty_database() -> Iterator[str]:
    """An empty database URL: a new PostgreSQL database when ``DATABASE_URL`` points at
    PostgreSQL, a temporary SQLite file otherwise; dropped afterwards."""
    url = os.environ.get("DATABASE_URL", "")
    if not is_postgres(url):
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/instances.db"
        return
    with new_postgres_database(url, f"monark_inst_{uuid.uuid4().hex[:12]}") as fresh:
        yield fresh


@dataclass
class Instance:
    """One gunicorn process (one gthread worker) serving the app."""

    name: str
    env: dict[str, str]
    log_path: Path
    port: int = 0
    proc: subprocess.Popen | None = None
    app: str = "app:app"  # the WSGI app gunicorn serves
    # With ``conf``: started as the README says, on ``monark/gunicorn_conf.py`` (its hooks:
    # /metrics' multiprocess mode), with that many workers.
    conf: bool = False
    workers: int = 1

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> Instance:
        """Start the process and wait until it answers."""
        return self.launch().wait_ready()

    def launch(self) -> Instance:
        """Start the process without waiting for it (instances of a deployment boot side by
        side: each spends seconds importing the app)."""
        self.port = free_port()
        command = [
            str(BIN / "gunicorn"),
            "--worker-class=gthread",
            f"--workers={self.workers}",
            "--threads=32",
            f"--bind={HOST}:{self.port}",
            "--timeout=120",
            self.app,
        ]
        env = self.env
        if self.conf:
            command = [str(BIN / "gunicorn"), "-c", "python:monark.gunicorn_conf", self.app]
            env = {
                **env,
                "MONARK_BIND": f"{HOST}:{self.port}",
                "WEB_CONCURRENCY": str(self.workers),
            }
        log = open(self.log_path, "a")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
        log.close()
        return self

    def wait_ready(self) -> Instance:
        """Wait until the started process answers ``/login``, or say why it never will."""
        assert self.proc is not None
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.log_path.read_text()[-3000:]}")
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(self.url + "/login", timeout=2).status_code == 200:
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not answer within 60 s")
            time.sleep(0.1)

    def kill(self) -> None:
        """``kill -9`` every process of the instance: no cleanup runs."""
        if self.proc is None:
            return
        for pid in [*_children(self.proc.pid), self.proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        """End the instance at once: the test is over and nothing of it needs to finish
        (gunicorn's own shutdown, graceful or quick, took two seconds per instance)."""
        self.kill()


def _children(pid: int) -> list[int]:
    try:
        out = subprocess.run(
            ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False
        ).stdout
    except FileNotFoundError:
        return []
    return [int(p) for p in out.split()]


@dataclass
class Deployment:
    """Several instances of the app on one database (and one Redis when ``broker``)."""

    instances: list[Instance]
    fake: FakeAnthropic
    database_url: str
    workdir: Path

    def __getitem__(self, index: int) -> Instance:
        return self.instances[index]


def flask_command(*args: str, env: dict[str, str]) -> None:
    """Run ``flask --app app <args>`` in the repository to its end; its output if it fails."""
    done = subprocess.run(
        [str(BIN / "flask"), "--app", "app", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if done.returncode != 0:
        raise RuntimeError(f"flask {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


@contextlib.contextmanager
def deployment(
    count: int = 2,
    broker: bool = True,
    app: str = "app:app",
    conf: bool = False,
    workers: int = 1,
    **settings: str,
) -> Iterator[Deployment]:
    """``count`` instances of ``app`` on a fresh, migrated, seeded database."""
    fake = FakeAnthropic().start()
    with empty_database() as url, tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "SECRET_KEY": "instances-test-" + uuid.uuid4().hex,
            "ANTHROPIC_API_KEY": "sk-test-not-real",
            "ANTHROPIC_BASE_URL": fake.url,
            "CHAT_BROKER_URL": REDIS_URL if broker else "",
            "CHAT_TURN_LEASE_SECONDS": "3",
            "CHAT_LLM_MAX_RETRIES": "0",
            # A deployment lives for a whole test file, so its per-minute counts would carry
            # from one test to the next: the limits are off unless a test sets its own.
            "LIMIT_MESSAGES_PER_MINUTE": "0",
            "LIMIT_DECISIONS_PER_MINUTE": "0",
            "LIMIT_TURNS_PER_ORG": "0",
            "LIMIT_API_PER_MINUTE": "0",
            "LIMIT_QUERIES_PER_MINUTE": "0",
            **settings,
        }
        flask_command("db", "upgrade", env=env)
        flask_command("seed-demo", env=env)
        instances = [
            Instance(
                chr(ord("A") + i),
                env,
                Path(tmp) / f"{chr(ord('A') + i)}.log",
                app=app,
                conf=conf,
                workers=workers,
            )
            for i in range(count)
        ]
        try:
            for instance in instances:
                instance.launch()
            for instance in instances:
                instance.wait_ready()
            yield Deployment(instances, fake, url, Path(tmp))
        finally:
            for instance in instances:
                instance.stop()
            fake.stop()


# ---- clients --------------------------------------------------------------------------------


def parse_frames(raw: str) -> list[dict[str, Any]]:
    """SSE frames as dicts with ``event``, ``id`` and ``data`` (comments left out)."""
    out = []
    for block in raw.split("\n\n"):
        frame: dict[str, Any] = {"event": None, "id": None, "data": []}
        for line in block.split("\n"):
            if line.startswith("event: "):
                frame["event"] = line[7:]
            elif line.startswith("id: "):
                frame["id"] = line[4:]
            elif line.startswith("data: "):
                frame["data"].append(line[6:])
        if frame["event"] or frame["id"] or frame["data"]:
            frame["data"] = "\n".join(frame["data"])
            out.append(frame)
    return out


@dataclass
class Stream:
    """An SSE response read in a thread; ``text`` grows as frames arrive."""

    response: Any
    chunks: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    status: int = 0

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def wait_for(self, needle: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text:
            if self.done.is_set() or time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} never came; got:\n{self.text[-2000:]}")
            time.sleep(0.02)

    def wait_done(self, timeout: float = 30) -> str:
        if not self.done.wait(timeout):
            raise AssertionError(f"the stream did not end; got:\n{self.text[-2000:]}")
        return self.text

    @property
    def finished(self) -> dict[str, Any] | None:
        import json

        for frame in reversed(parse_frames(self.text)):
            if frame["event"] == "done":
                return json.loads(frame["data"])
        return None


class Client:
    """A signed-in browser-like client of one instance (cookies follow it across)."""

    def __init__(self, base_url: str, email: str = "ada@acme.test"):
        self.http = httpx2.Client(base_url=base_url, timeout=httpx2.Timeout(60, connect=5))
        self.csrf = ""
        self.email = email
        page = self.http.get("/login").text
        token = CSRF_INPUT.search(page).group(1)
        signed = self.http.post(
            "/login", data={"email": email, "password": PASSWORD, "csrf_token": token}
        )
        assert signed.status_code == 302, signed.text[:500]
        self.csrf = CSRF_META.search(self.http.get("/models").text).group(1)

    def at(self, base_url: str) -> Client:
        """The same signed-in browser, talking to another instance."""
        other = Client.__new__(Client)
        other.http = httpx2.Client(
            base_url=base_url, timeout=self.http.timeout, cookies=self.http.cookies
        )
        other.csrf, other.email = self.csrf, self.email
        return other

    def post(self, path: str, data: dict[str, str] | None = None) -> httpx2.Response:
        return self.http.post(
            path, data=data or {}, headers={"X-CSRFToken": self.csrf, "HX-Request": "true"}
        )

    def stream(self, method: str, path: str, data: dict[str, str] | None = None, **headers):
        """Open an SSE request and read it in a thread; returns the ``Stream`` at once."""
        request = self.http.build_request(
            method,
            path,
            data=data,
            headers={"X-CSRFToken": self.csrf, "HX-Request": "true", **headers},
        )
        response = self.http.send(request, stream=True)
        stream = Stream(response, status=response.status_code)

        def read() -> None:
            try:
                for chunk in response.iter_text():
                    stream.chunks.append(chunk)
            except httpx2.HTTPError:
                pass
            finally:
                response.close()
                stream.done.set()

        threading.Thread(target=read, daemon=True).start()
        return stream

    def send(self, text: str, conversation_id: int | None = None) -> Stream:
        data = {"text": text, "conversation_id": str(conversation_id or "")}
        return self.stream("POST", "/chat/stream", data)

    def close(self) -> None:
        self.http.close()


# ---- what tests of several instances do again and again --------------------------------

Rows = Callable[..., list[Any]]
T = TypeVar("T")


@contextlib.contextmanager
def sql_on(database_url: str) -> Iterator[Rows]:
    """``run(statement, **params)``: the rows of one statement on the deployment's database."""
    engine = create_engine(database_url)

    def run(statement: str, **params: Any) -> list[Any]:
        with engine.connect() as conn:
            return conn.execute(text(statement), params).all()

    try:
        yield run
    finally:
        engine.dispose()


def propose_task(fake: FakeAnthropic, client: Client, sql: Rows, title: str) -> tuple[int, int]:
    """Ask for a task ``title``; the model proposes ``records_create``: (conversation, call)."""
    fake.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": title, "status": "todo"}})],
        [Say(f"Added {title}.")],
    )
    proposed = client.send(f"Add {title}")
    proposed.wait_done()
    assert proposed.finished["status"] == "awaiting_confirmation", proposed.text
    cid = proposed.finished["conversation_id"]
    [(call_id,)] = sql(
        "SELECT id FROM chat_tool_calls WHERE conversation_id = :c AND status = 'PROPOSED'",
        c=cid,
    )
    return cid, call_id


def wait_turn_ended(sql: Rows, conversation_id: int, timeout: float = 20) -> None:
    """Until no turn holds the conversation (the write a decision started has run)."""
    deadline = time.monotonic() + timeout
    while sql("SELECT turn_id FROM chat_conversations WHERE id = :c", c=conversation_id) != [
        (None,)
    ]:
        assert time.monotonic() < deadline, "the turn never ended"
        time.sleep(0.1)


def at_once(acts: list[Callable[[], T]], timeout: float = 60) -> list[T]:
    """Run each of ``acts`` in a thread of its own, all let go at one moment; what each
    returned (one that raised leaves no answer)."""
    barrier = threading.Barrier(len(acts))
    answers: list[T] = []
    lock = threading.Lock()

    def run(act: Callable[[], T]) -> None:
        barrier.wait()
        answer = act()
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=run, args=(act,)) for act in acts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return answers
