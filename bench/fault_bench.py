"""Figures for turn survival: inject faults into running turns and count what recovers.

Two gunicorn instances (gthread, one worker each) share one database (a temporary SQLite
file, or a fresh PostgreSQL database when ``DATABASE_URL`` points at a server) and Redis as
their broker (``MONARK_TEST_REDIS_URL``, 127.0.0.1:6379 by default), with a 3 s turn lease.
Their model is the fake Messages API of ``tests/fake_anthropic.py`` in this process, spoken
to by the real SDK. The faults, each repeated ``--rounds`` times:

- kill -9 of the instance streaming a reply, 2 s into it; then Retry on the other instance
  until it is accepted (the time from the kill is "usable again after");
- Stop sent to the other instance than the one streaming (a success: the stream ends
  "stopped" within 3 s and the reply is kept, incomplete);
- a provider that accepts the request and never answers, stopped by Stop;
- 529 overloaded on every try of a step, then Retry;
- an error event in the middle of a reply, then Retry;
- the client's connection closed mid-reply (the turn must still finish);
- the database refusing a confirmed write and its result (in this process, against the same
  database): the call must end FAILED at the next turn and nothing be half-written;
- kill -9 of the instance running a held API write a member confirmed, while it stores its
  result (the write done, not committed): on the other instance the agent's status must say
  failed, nothing changed, asked again (the time from the kill is "usable again after"),
  and the write run once when the new request is confirmed.

The instances serve ``tests.stalling_app`` (the app, with a switch that stalls a tool call
storing its result, so that kill lands mid-write; off for every other fault).

Printed: one row per fault (injected, turns recovered, messages lost, calls left EXECUTING,
time until usable again) and the totals. Targets (exit 1 when missed): every turn recovers,
no message is lost, no call is left EXECUTING, and Stop succeeds every time.

Run from the repo root (about two minutes)::

    .venv/bin/python bench/fault_bench.py
    DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test \
        .venv/bin/python bench/fault_bench.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import contextlib  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402

import httpx2  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

from tests.instances import Client, Deployment, Instance, deployment  # noqa: E402
from tests.llm_script import Call, Fail, HttpFail, Say  # noqa: E402
from tests.stalling_app import STALLED  # noqa: E402

STOP_WITHIN = 3.0


@dataclass
class Row:
    fault: str
    injected: int = 0
    recovered: int = 0
    lost: int = 0
    usable_after: list[float] = field(default_factory=list)


class Bench:
    def __init__(self, running: Deployment, stall: Path):
        self.d = running
        self.engine = create_engine(running.database_url)
        self.fake = running.fake
        self.n = 0
        self.stall = stall  # while this file exists, tool calls stall storing their result
        self.token = ""

    def sql(self, statement: str, **params):
        with self.engine.connect() as conn:
            return conn.execute(text(statement), params).all()

    def title(self, what: str) -> str:
        self.n += 1
        return f"{what} #{self.n}"

    def conversation(self, title: str) -> int:
        deadline = time.monotonic() + 10
        while True:
            rows = self.sql("SELECT id FROM chat_conversations WHERE title = :t", t=title)
            if rows:
                return rows[0][0]
            if time.monotonic() > deadline:
                raise RuntimeError(f"no conversation {title!r}")
            time.sleep(0.02)

    def texts(self, cid: int) -> list[tuple[str, str, str]]:
        return self.sql(
            "SELECT role, status, text FROM chat_messages WHERE conversation_id = :c ORDER BY seq",
            c=cid,
        )

    def lost(self, cid: int, sent: list[str]) -> int:
        """Messages the user sent that are not stored, plus turns that left no reply."""
        rows = self.texts(cid)
        stored = [t for role, _, t in rows if role == "user"]
        missing = sum(1 for t in sent if t not in stored)
        replies = sum(1 for role, _, t in rows if role == "assistant")
        return missing + max(0, len(sent) - replies)

    def reset(self) -> None:
        self.fake.chunk_delay = 0.0
        self.fake.hang = None
        while self.fake.script.remaining:
            self.fake.script.next()

    # ---- faults ----

    def kill(self, row: Row) -> None:
        self.reset()
        self.fake.chunk_delay = 0.05
        self.fake.script.add([Say(" ".join(f"w{i}" for i in range(400)))], [Say("Back.")])
        a = Client(self.d[0].url)
        title = self.title("Kill")
        streaming = a.send(title)
        streaming.wait_for("w30")
        time.sleep(max(0.0, 2.0 - 30 * 0.05))
        cid = self.conversation(title)
        self.d[0].kill()
        killed = time.monotonic()
        b = a.at(self.d[1].url)
        row.injected += 1
        try:
            while time.monotonic() - killed < 30:
                retry = b.stream("POST", "/chat/retry", {"conversation_id": str(cid)})
                if retry.status == 200:
                    row.usable_after.append(time.monotonic() - killed)
                    retry.wait_done(30)
                    break
                retry.wait_done()
                time.sleep(0.1)
        finally:
            self.d[0].start()
        rows = self.texts(cid)
        kept = [r for r in rows if r[0] == "assistant"]
        if len(kept) == 2 and kept[0][1] == "incomplete" and kept[0][2] and kept[1][2] == "Back.":
            row.recovered += 1
        row.lost += self.lost(cid, [title]) + (0 if kept and kept[0][2] else 1)

    def stop(self, row: Row, turn: int) -> None:
        self.reset()
        self.fake.chunk_delay = 0.05
        self.fake.script.add([Say(" ".join(f"w{i}" for i in range(200)))])
        runs, stops = (0, 1) if turn % 2 == 0 else (1, 0)
        a = Client(self.d[runs].url)
        title = self.title("Stop")
        streaming = a.send(title)
        streaming.wait_for("w3")
        cid = self.conversation(title)
        row.injected += 1
        started = time.monotonic()
        answer = a.at(self.d[stops].url).post(f"/chat/conversations/{cid}/stop")
        streaming.wait_done(15)
        took = time.monotonic() - started
        done = streaming.finished or {}
        reply = [r for r in self.texts(cid) if r[0] == "assistant"]
        if (
            answer.status_code == 200
            and done.get("status") == "stopped"
            and took < STOP_WITHIN
            and reply
            and reply[0][1] == "incomplete"
        ):
            row.recovered += 1
        row.lost += self.lost(cid, [title])

    def hang(self, row: Row) -> None:
        self.reset()
        self.fake.hang = threading.Event()
        a = Client(self.d[0].url)
        title = self.title("Hang")
        streaming = a.send(title)
        cid = self.conversation(title)
        time.sleep(0.5)
        row.injected += 1
        started = time.monotonic()
        answer = a.post(f"/chat/conversations/{cid}/stop")
        streaming.wait_done(15)
        took = time.monotonic() - started
        self.fake.hang.set()
        self.fake.hang = None
        if answer.status_code == 200 and took < STOP_WITHIN:
            row.recovered += 1
            row.usable_after.append(took)
        row.lost += self.lost(cid, [title])

    def _then_retry(self, row: Row, steps: list, title: str) -> None:
        self.reset()
        self.fake.script.add(*steps, [Say("Recovered.")])
        a = Client(self.d[0].url)
        failed = a.send(title)
        failed.wait_done(30)
        cid = self.conversation(title)
        row.injected += 1
        started = time.monotonic()
        retry = a.stream("POST", "/chat/retry", {"conversation_id": str(cid)})
        retry.wait_done(30)
        if (failed.finished or {}).get("status") == "error" and "Recovered." in retry.text:
            row.recovered += 1
            row.usable_after.append(time.monotonic() - started)
        row.lost += self.lost(cid, [title])

    def overloaded(self, row: Row) -> None:
        self._then_retry(
            row, [[HttpFail(529, "Overloaded", "overloaded_error")]], self.title("529")
        )

    def error_event(self, row: Row) -> None:
        self._then_retry(row, [[Say("Half of it"), Fail()]], self.title("Error event"))

    def dropped(self, row: Row) -> None:
        self.reset()
        self.fake.chunk_delay = 0.02
        self.fake.script.add([Say(" ".join(f"w{i}" for i in range(80)))])
        a = Client(self.d[0].url)
        title = self.title("Dropped")
        streaming = a.send(title)
        streaming.wait_for("w5")
        streaming.response.close()
        cid = self.conversation(title)
        row.injected += 1
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            reply = [r for r in self.texts(cid) if r[0] == "assistant"]
            if reply and reply[0][1] == "complete" and reply[0][2].endswith("w79"):
                row.recovered += 1
                break
            time.sleep(0.1)
        row.lost += self.lost(cid, [title])

    def held_key(self, owner: Client) -> str:
        """A member key whose writes need approval (made once, on the API keys page)."""
        if not self.token:
            page = owner.post(
                "/settings/api-keys",
                {"name": "Fault bench agent", "role": "member", "writes_need_approval": "on"},
            )
            self.token = re.search(r'id="new-token">([^<]+)<', page.text).group(1)
        return self.token

    def approval(self, base_url: str, approval_id: int) -> dict:
        return httpx2.get(
            f"{base_url}/api/v1/approvals/{approval_id}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        ).json()

    def written(self, title: str) -> int:
        return self.sql("SELECT count(*) FROM records WHERE title = :t", t=title)[0][0]

    def held_write_killed(self, row: Row) -> None:
        """A held API write confirmed on A, A killed while it stores the write's result."""
        a, b = self.d[0], self.d[1]
        owner = Client(a.url)
        title = self.title("Held write")
        held = httpx2.post(
            f"{a.url}/api/v1/models/tasks/records",
            json={"values": {"title": title, "status": "todo"}},
            headers={"Authorization": f"Bearer {self.held_key(owner)}"},
            timeout=30,
        )
        approval_id = held.json()["id"]
        stalls = _logged(a, STALLED)
        self.stall.touch()
        threading.Thread(
            target=_quietly, args=(owner, f"/approvals/{approval_id}/decide"), daemon=True
        ).start()
        try:
            deadline = time.monotonic() + 20
            while _logged(a, STALLED) == stalls and time.monotonic() < deadline:
                time.sleep(0.02)
            a.kill()
        finally:
            self.stall.unlink(missing_ok=True)
        killed = time.monotonic()
        row.injected += 1
        try:
            out = self.approval(b.url, approval_id)
            while out["status"] == "running" and time.monotonic() - killed < 30:
                time.sleep(0.1)
                out = self.approval(b.url, approval_id)
            settled = time.monotonic() - killed
            again = out.get("asked_again_as")
            if out["status"] == "failed" and again and self.written(title) == 0:
                owner.at(b.url).post(f"/approvals/{again}/decide", {"decision": "confirm"})
                done = self.approval(b.url, again)["status"] == "succeeded"
                if done and self.written(title) == 1:
                    row.recovered += 1
                    row.usable_after.append(settled)
        finally:
            a.start()
        row.lost += 0 if self.written(title) == 1 else 1

    def database(self, row: Row, app) -> None:
        """In this process: a write, and the storing of its result, refused."""
        from sqlalchemy import event, func, select
        from sqlalchemy.exc import OperationalError

        from monark.approvals import service as approval_service
        from monark.chat.models import ToolCall
        from monark.chat.turn.start import SendInput, send_message
        from monark.core.models import Membership, User
        from monark.core.rbac import Principal
        from monark.extensions import db
        from monark.records.models import Record

        self.reset()
        title = self.title("Database")
        self.fake.script.add(
            [
                Call(
                    "records_create",
                    {"model": "tasks", "values": {"title": title, "status": "todo"}},
                )
            ],
            [Say("Noted.")],
            [Say("Still here.")],
        )

        def refuse(conn, cursor, statement, parameters, context, executemany):
            if statement.startswith("INSERT INTO records") or (
                statement.startswith("UPDATE chat_tool_calls") and "duration_ms" in statement
            ):
                raise OperationalError(statement, parameters, Exception("database unavailable"))

        with app.app_context():
            user = db.session.scalar(select(User).where(User.email == "ada@acme.test"))
            membership = db.session.scalar(select(Membership).where(Membership.user_id == user.id))
            principal = Principal.for_user(user.id, membership.org_id, membership.role)
            proposed = send_message(principal, SendInput(text=title))
            call_id = db.session.scalar(
                select(ToolCall.id).where(
                    ToolCall.conversation_id == proposed.conversation_id,
                    ToolCall.status == "PROPOSED",
                )
            )
            row.injected += 1
            event.listen(db.engine, "before_cursor_execute", refuse)
            try:
                approval_service.confirm_tool_call(principal, call_id)
            except OperationalError:
                pass
            finally:
                event.remove(db.engine, "before_cursor_execute", refuse)
                db.session.rollback()
            send_message(
                principal,
                SendInput(text="And now?", conversation_id=proposed.conversation_id),
            )
            db.session.rollback()
            call = db.session.get(ToolCall, call_id)
            written = db.session.scalar(select(func.count()).where(Record.title == title))
            if call.status == "FAILED" and written == 0:
                row.recovered += 1
            row.lost += self.lost(proposed.conversation_id, [title, "And now?"])
            db.session.remove()


def _logged(instance: Instance, line: str) -> int:
    """How many times the instance's log says ``line``."""
    return instance.log_path.read_text().count(line)


def _quietly(client: Client, path: str) -> None:
    """Confirm on an instance that is killed before it answers."""
    with contextlib.suppress(httpx2.HTTPError):
        client.post(path, {"decision": "confirm"})


def _app(running: Deployment):
    import os

    from monark import create_app

    os.environ["ANTHROPIC_BASE_URL"] = running.fake.url
    app = create_app(
        {
            "SQLALCHEMY_DATABASE_URI": running.database_url,
            "SECRET_KEY": "fault-bench",
            "ANTHROPIC_API_KEY": "sk-test-not-real",
            "CHAT_LLM_MAX_RETRIES": 0,
            "RATELIMIT_ENABLED": False,  # faults are measured here, not the limits
        }
    )
    app.logger.disabled = True  # the refused writes are logged with tracebacks: expected here
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stops", type=int, default=20)
    args = parser.parse_args(argv)
    rows: list[Row] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        deployment(
            2, app="tests.stalling_app:app", MONARK_TEST_STALL_FILE=f"{tmp}/stall-writes"
        ) as running,
    ):
        bench = Bench(running, Path(tmp) / "stall-writes")
        app = _app(running)
        plan = [
            ("kill -9 mid-reply", bench.kill, args.rounds),
            ("Stop on the other instance", None, args.stops),
            ("provider never answers", bench.hang, args.rounds),
            ("529 on every try", bench.overloaded, args.rounds),
            ("error event mid-reply", bench.error_event, args.rounds),
            ("connection dropped", bench.dropped, args.rounds),
            ("database refuses a write", lambda r: bench.database(r, app), args.rounds),
            ("held API write, kill -9", bench.held_write_killed, args.rounds),
        ]
        for name, run, rounds in plan:
            row = Row(name)
            for i in range(rounds):
                if run is None:
                    bench.stop(row, i)
                else:
                    run(row)
            rows.append(row)
            print(f"  {name}: {row.recovered}/{row.injected}", file=sys.stderr)
        executing = bench.sql("SELECT count(*) FROM chat_tool_calls WHERE status = 'EXECUTING'")
        left = executing[0][0]
    return report(rows, left)


def report(rows: list[Row], executing: int) -> int:
    print()
    head = f"{'fault':<30} {'injected':>8} {'recovered':>9} {'lost':>5} {'usable after (s)':>22}"
    print(head)
    print("-" * len(head))
    for row in rows:
        usable = (
            f"{statistics.median(row.usable_after):.2f} med, {max(row.usable_after):.2f} max"
            if row.usable_after
            else "-"
        )
        print(f"{row.fault:<30} {row.injected:>8} {row.recovered:>9} {row.lost:>5} {usable:>22}")
    injected = sum(r.injected for r in rows)
    recovered = sum(r.recovered for r in rows)
    lost = sum(r.lost for r in rows)
    print("-" * len(head))
    print(f"{'total':<30} {injected:>8} {recovered:>9} {lost:>5}")
    crash = next(r for r in rows if r.fault.startswith("kill"))
    stop = next(r for r in rows if r.fault.startswith("Stop"))
    print()
    print(f"calls left EXECUTING: {executing}")
    if crash.usable_after:
        print(
            "usable again after a crash: "
            f"median {statistics.median(crash.usable_after):.2f} s, "
            f"max {max(crash.usable_after):.2f} s (lease 3 s)"
        )
    held = next((r for r in rows if r.fault.startswith("held API")), None)
    if held is not None and held.usable_after:
        print(
            "held API write settled after kill -9: "
            f"median {statistics.median(held.usable_after):.2f} s, "
            f"max {max(held.usable_after):.2f} s (lease 3 s)"
        )
    stop_rate = 100.0 * stop.recovered / max(1, stop.injected)
    print(f"Stop across two processes: {stop.recovered}/{stop.injected} ({stop_rate:.0f}%)")
    ok = recovered == injected and lost == 0 and executing == 0 and stop_rate == 100.0
    print("verdict:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
