"""Benchmark of the assistant's plumbing: in-process tool calls and the loop's own overhead.

Two measurements, each printed as a row per case with the median and p95 latency and the
SQL queries per call (counted with a ``before_cursor_execute`` listener):

1. One read tool call, ``records_list`` for model ``tasks`` with ``limit`` 25 on an org with
   ~1,000 records, made two ways with the same view work behind it:

   * in-process: ``build_chat_toolset(V1_ROUTES).execute(principal.via_assistant(id),
     "records_list", {...})`` inside an app context (the dispatcher runs the view in its own
     app context, with its own session, through the full request pipeline);
   * over loopback HTTP: ``GET /api/v1/models/tasks/records?limit=25`` with an API key
     (``Authorization: Bearer mrk_…``, same role) to the app served by werkzeug's threaded
     server on 127.0.0.1, through one kept-alive ``http.client.HTTPConnection``; the body is
     parsed with ``json.loads``, as the dispatcher parses its answer.

   A third row times the view work both share (parse, handler, JSON out and back in)
   without routing, hooks or auth, to show what each path adds on top of it. The three
   take turns in blocks of 50 calls. A breakdown follows of where the in-process call's
   time goes, stage by stage (each stage timed by a wrapper, so the parts add up to a
   little more than the call). The whole in-process call can never be 10x cheaper than
   HTTP while the view work is most of both; what the architecture promises is about the
   rest. Targets: what the dispatcher adds beyond the view work at least 10x less than what
   loopback HTTP adds; the view work itself at most 1 ms.

2. The loop's own overhead per step: ``advance_conversation(principal, conversation_id)`` with
   a provider that answers "ok" at once, on conversations pre-seeded with 10, 100 and 500
   messages (user and assistant turns alternating, a quarter of the assistant turns with a
   SUCCEEDED ``records_list`` call and its stored result of five records).
   Each run happens in a fresh app context (as a request would) and the assistant message
   it adds is deleted afterwards, so every run starts from the same N messages.
   Targets: the same query count at 10, 100 and 500 messages, at most 12 of them per step
   (the turn's setup included), and the overhead at 500 no more than 5x that at 10.

3. How the dispatcher runs a request: ``dispatch()`` as it is (the request run as
   ``Flask.wsgi_app`` runs it, through Flask's public API, keeping the ``Response``) against
   the same call made through Flask's test client (``app.test_client().open`` with the
   principal in ``environ_overrides``, in the same unit of work), the same ``records_list``
   call both ways in alternating blocks. Printed for the record; it sets no target.

It exits 1 when a target is missed.

Run from the repo root::

    .venv/bin/python bench/chat_bench.py              # fresh temporary SQLite file
    .venv/bin/python bench/chat_bench.py --calls 3000 --steps 50

PostgreSQL runs only when asked for explicitly, because the benchmark DROPS AND RECREATES
every table at that URL (``db.drop_all()`` / ``db.create_all()``); use a throwaway database::

    .venv/bin/python bench/chat_bench.py --database-url postgresql+psycopg://u:p@host/bench
    BENCH_DATABASE_URL=postgresql+psycopg://u:p@host/bench .venv/bin/python bench/chat_bench.py

``DATABASE_URL`` on its own is ignored on purpose: it usually points at data you care about.

Set ``BENCH_SHOW_SQL=1`` to print the statements of each size's last loop step.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _measure import (  # noqa: E402
    CaseResult,
    QueryLog,
    add_database_argument,
    throwaway_database,
    verdict,
)
from flask import Flask  # noqa: E402
from sqlalchemy import delete, insert, select  # noqa: E402
from werkzeug.serving import WSGIRequestHandler, make_server  # noqa: E402

from monark import create_app  # noqa: E402
from monark.api.routes import V1_ROUTES  # noqa: E402
from monark.assistant.tools import build_chat_toolset  # noqa: E402
from monark.chat import store  # noqa: E402
from monark.chat.llm.types import (  # noqa: E402
    LlmEvent,
    LlmRequest,
    StopReason,
    TextDelta,
    UsageReport,
)
from monark.chat.loop import advance_conversation  # noqa: E402
from monark.chat.models import Message, ToolCall  # noqa: E402
from monark.chat.runtime import set_llm_provider  # noqa: E402
from monark.core.auth import hash_password  # noqa: E402
from monark.core.keys import create_key  # noqa: E402
from monark.core.models import Membership, Org, User  # noqa: E402
from monark.core.rbac import Principal  # noqa: E402
from monark.core.routes import answer_json, parse_part  # noqa: E402
from monark.extensions import db  # noqa: E402
from monark.records import services  # noqa: E402
from monark.records.models import Record, RecordModel  # noqa: E402
from monark.records.values import display_title, search_text  # noqa: E402

FAST_HASH = "pbkdf2:sha256:1000"
STATUSES = ["todo", "doing", "done", "blocked"]
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india")
LIMIT = 25
MODEL = "tasks"
API_PATH = f"/api/v1/models/{MODEL}/records?limit={LIMIT}"
VIEW_WORK_MS = 1.0  # records_list, 25 rows: parse, two queries, 25 rows, pydantic, JSON
CONVERSATION_SIZES = (10, 100, 500)
TARGET_RATIO = 10.0
BLOCK = 50  # calls of one case in a row
TARGET_GROWTH = 5.0
# Queries of one step, its setup included (AI settings and budget, tool specs, the org).
TARGET_QUERIES = 12


# ---- query counting --------------------------------------------------------------------


# ---- results ---------------------------------------------------------------------------


# ---- seeding ---------------------------------------------------------------------------


@dataclass
class Seeded:
    owner: Principal
    api_token: str
    tool_conversation_id: int
    conversations: dict[int, int]  # message count -> conversation id


def _org(name: str, slug: str, n_users: int) -> tuple[Org, list[User], RecordModel]:
    org = Org(name=name, slug=slug)
    db.session.add(org)
    users = [
        User(
            email=f"user{i}@{slug}.bench",
            name=f"{name} User {i}",
            password_hash=hash_password("bench password 123", FAST_HASH),
        )
        for i in range(n_users)
    ]
    db.session.add_all(users)
    db.session.flush()
    for i, user in enumerate(users):
        db.session.add(
            Membership(user_id=user.id, org_id=org.id, role="owner" if i == 0 else "member")
        )
    db.session.commit()
    owner = Principal.for_user(users[0].id, org.id, "owner")
    model = services.create_model(owner, MODEL, "Tasks", "Benchmark tasks")
    services.add_field(owner, model, key="title", label="Title", type="text", required=True)
    services.add_field(owner, model, key="status", label="Status", type="select", options=STATUSES)
    services.add_field(owner, model, key="points", label="Points", type="number")
    services.add_field(owner, model, key="assignee", label="Assignee", type="user")
    services.add_field(owner, model, key="notes", label="Notes", type="long_text")
    return org, users, model


def _records(org: Org, users: list[User], model: RecordModel, count: int, rng: random.Random):
    fields = list(model.fields)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(count):
        values: dict[str, Any] = {
            "title": f"{org.name} task {i} {rng.choice(WORDS)}",
            "status": rng.choice(STATUSES),
            "points": rng.randint(1, 13),
            "assignee": rng.choice(users).id,
        }
        if i % 3 == 0:
            values["notes"] = " ".join(rng.choices(WORDS, k=12))
        stamp = start + timedelta(minutes=i)
        rows.append(
            {
                "org_id": org.id,
                "model_id": model.id,
                "values": values,
                "title": display_title(fields, values),
                "search_text": search_text(fields, values),
                "visibility": "private" if i % 20 == 0 else "org",
                "creator_id": rng.choice(users).id,
                "created_at": stamp,
                "updated_at": stamp,
            }
        )
    return rows


def _tool_result(rng: random.Random, record_ids: list[int]) -> dict[str, Any]:
    """What a stored records_list call holds: a small page of records (~1-2 KB of JSON)."""
    items = []
    for record_id in rng.sample(record_ids, 5):
        items.append(
            {
                "id": record_id,
                "model": MODEL,
                "title": f"Acme task {record_id} {rng.choice(WORDS)}",
                "values": {
                    "title": f"Acme task {record_id}",
                    "status": rng.choice(STATUSES),
                    "points": rng.randint(1, 13),
                },
                "visibility": "org",
                "creator_id": 1,
                "created_at": "2024-01-01T00:00:00Z",
                "updated_at": "2024-01-01T00:00:00Z",
            }
        )
    return {"items": items, "next_cursor": str(min(record_ids))}


def _seed_conversation(
    owner: Principal, n_messages: int, rng: random.Random, record_ids: list[int]
) -> int:
    """A conversation of ``n_messages`` rows, ending with a user message (a turn to answer).

    User and assistant messages alternate; every fourth assistant message called
    ``records_list`` (a SUCCEEDED call with its stored result).
    """
    conversation = store.create_conversation(owner, f"bench {n_messages}")
    db.session.commit()
    base = {"org_id": owner.org_id, "conversation_id": conversation.id}
    start = datetime(2024, 6, 1, tzinfo=UTC)
    roles: list[str] = []
    while len(roles) < n_messages:
        roles.append("assistant" if roles and roles[-1] == "user" else "user")
    roles = roles[:n_messages]
    if roles[-1] != "user":  # the conversation waits for an answer
        roles[-1] = "user"
    messages, call_specs = [], []
    for i, role in enumerate(roles):
        seq = i + 1
        row: dict[str, Any] = {
            **base,
            "seq": seq,
            "role": role,
            "status": "complete",
            "created_at": start + timedelta(seconds=seq),
        }
        if role == "user":
            row.update(
                author_kind="user",
                author_user_id=owner.user_id,
                text=f"Question {seq}: what about the {rng.choice(WORDS)} tasks?",
                content=[{"type": "text", "text": "Page context: today is 2024-06-01."}],
            )
        else:
            with_call = i % 8 == 1
            row.update(
                author_kind="agent",
                text="Let me look." if with_call else "Here is what I found. " * 6,
                content=[],
                model="bench-model",
                stop_reason="tool_use" if with_call else "end_turn",
                input_tokens=1200,
                output_tokens=80,
                cache_read_tokens=1000,
            )
            if with_call:
                call_specs.append(seq)
        messages.append(row)
    db.session.execute(insert(Message), messages)
    ids = dict(
        db.session.execute(
            select(Message.seq, Message.id).where(Message.conversation_id == conversation.id)
        ).all()
    )
    calls = [
        {
            **base,
            "message_id": ids[seq],
            "position": 0,
            "provider_call_id": f"toolu_bench_{conversation.id}_{seq}",
            "name": "records_list",
            "input": {"model": MODEL, "limit": 5},
            "mutates": False,
            "status": "SUCCEEDED",
            "result": _tool_result(rng, record_ids),
            "duration_ms": 4,
            "created_at": start + timedelta(seconds=seq),
        }
        for seq in call_specs
    ]
    if calls:
        db.session.execute(insert(ToolCall), calls)
    db.session.commit()
    return conversation.id


def seed(n_records: int, n_other: int) -> Seeded:
    rng = random.Random(42)
    org_a, users_a, model_a = _org("Acme", "acme", 20)
    org_b, users_b, model_b = _org("Globex", "globex", 5)
    rows = _records(org_a, users_a, model_a, n_records, rng)
    rows += _records(org_b, users_b, model_b, n_other, rng)
    rng.shuffle(rows)  # the two orgs' ids interleave, as in a shared table
    db.session.execute(insert(Record), rows)
    db.session.commit()
    owner = Principal.for_user(users_a[0].id, org_a.id, "owner")
    # The key has the same role as the user, so both sides run the same list query.
    _, token = create_key(owner, "bench key", "owner")
    record_ids = list(db.session.scalars(select(Record.id).where(Record.org_id == org_a.id)))
    tool_conversation = store.create_conversation(owner, "bench tool calls")
    db.session.commit()
    conversations = {n: _seed_conversation(owner, n, rng, record_ids) for n in CONVERSATION_SIZES}
    return Seeded(owner, token, tool_conversation.id, conversations)


# ---- 1. one read tool call: in-process vs loopback HTTP ---------------------------------


class QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


@contextmanager
def serve(app: Flask) -> Iterator[int]:
    """The app on werkzeug's threaded server at 127.0.0.1:<free port>, in a daemon thread."""
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="bench-http", daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        thread.join(timeout=5)
        server.server_close()


def measure_tool_call(app: Flask, log: QueryLog, seeded: Seeded, n: int) -> list[CaseResult]:
    """The in-process call, the HTTP call and the view work they share, interleaved."""
    toolset = build_chat_toolset(V1_ROUTES)
    route = next(r for r in V1_ROUTES if r.name == "records_list")
    actor = seeded.owner.via_assistant(seeded.tool_conversation_id)
    arguments = {"model": MODEL, "limit": LIMIT}
    headers = {"Authorization": f"Bearer {seeded.api_token}", "Accept": "application/json"}
    local = CaseResult(f"records_list limit={LIMIT}: in-process tool call")
    remote = CaseResult(f"records_list limit={LIMIT}: loopback HTTP + API key")
    shared = CaseResult("  of which view work both share (no pipeline)")

    with serve(app) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

        def over_http() -> dict[str, Any]:
            conn.request("GET", API_PATH, headers=headers)
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise SystemExit(f"HTTP GET {API_PATH} answered {response.status}: {body[:200]!r}")
            return json.loads(body)

        def view_work() -> dict[str, Any]:
            """The view's body without routing, hooks or auth: parse, handle, JSON out and in."""
            with app.app_context():
                path = parse_part(route.path_model, {"model": MODEL}, "path")
                query = parse_part(route.query_model, {"limit": str(LIMIT)}, "query")
                result = route.handler(actor, path, query, None)
                return json.loads(answer_json(result))

        with app.app_context():  # the loop's context: the call runs in its own one inside

            def in_process() -> dict[str, Any]:
                outcome = toolset.execute(actor, "records_list", dict(arguments))
                if not outcome.ok:
                    raise SystemExit(f"in-process records_list failed: {outcome.error}")
                return outcome.result

            # The same answer all three ways (the same view work), and warm-up.
            a, b, c = in_process(), over_http(), view_work()
            if not a == b == c or len(a["items"]) != LIMIT:
                raise SystemExit("in-process, HTTP and bare view answers differ")
            for _ in range(20):
                in_process()
                over_http()
                view_work()

            # In blocks of BLOCK calls, the three cases taking turns: drift (other load, the
            # clock) spreads over all three, and no call pays for the previous case's
            # leftovers (the server thread closing its request holds the GIL a while).
            for _ in range(max(1, n // BLOCK)):
                for case, call in ((local, in_process), (remote, over_http), (shared, view_work)):
                    for _ in range(BLOCK):
                        with log.capture():
                            t0 = time.perf_counter()
                            call()
                            elapsed = (time.perf_counter() - t0) * 1000
                        case.times_ms.append(elapsed)
                        case.query_counts.append(log.count)
            db.session.rollback()
        conn.close()
    return [local, remote, shared]


# ---- 2. the loop's own overhead per step ------------------------------------------------


class InstantProvider:
    """Answers every request with one short text at once (no network, no model)."""

    name = "instant"

    def stream(self, request: LlmRequest) -> Iterator[LlmEvent]:
        yield TextDelta("ok")
        yield UsageReport(100, 1, 0, 0)
        yield StopReason("end_turn")


def measure_loop(app: Flask, log: QueryLog, seeded: Seeded, runs: int) -> list[CaseResult]:
    """One step per run, the sizes interleaved (so drift hits them alike), after warm-up."""
    warmup = 5
    cases = {
        size: CaseResult(f"advance_conversation, {size} messages") for size in seeded.conversations
    }
    set_llm_provider(InstantProvider(), app)
    try:
        for i in range(warmup + runs):
            for size, conversation_id in seeded.conversations.items():
                with app.app_context():  # a fresh context and session, as for a request
                    with log.capture():
                        t0 = time.perf_counter()
                        result = advance_conversation(seeded.owner, conversation_id)
                        elapsed = (time.perf_counter() - t0) * 1000
                    queries = log.count
                    if os.environ.get("BENCH_SHOW_SQL") and i == warmup + runs - 1:
                        for statement, _ in log.statements:
                            print("   ", " ".join(statement.split())[:150])
                    if result.status != "done" or len(result.message_ids) != 1:
                        raise SystemExit(f"unexpected turn result: {result}")
                    # Back to the same N messages for the next run.
                    db.session.execute(delete(Message).where(Message.id.in_(result.message_ids)))
                    db.session.commit()
                if i >= warmup:
                    cases[size].times_ms.append(elapsed)
                    cases[size].query_counts.append(queries)
    finally:
        set_llm_provider(None, app)
    return list(cases.values())


# ---- main ------------------------------------------------------------------------------


def build_app(url: str) -> Flask:
    # The loop and the dispatcher are measured, not the rate limits (bench/limits_bench.py).
    return create_app(
        {"SQLALCHEMY_DATABASE_URI": url, "SECRET_KEY": "bench", "RATELIMIT_ENABLED": False}
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="tool calls per case (1000)")
    parser.add_argument("--steps", type=int, default=30, help="loop steps per size (30)")
    parser.add_argument("--records", type=int, default=1_000, help="records in the main org")
    parser.add_argument("--other", type=int, default=200, help="records in the second org")
    add_database_argument(parser)
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    with throwaway_database(args.database_url, build_app) as (app, log):
        with app.app_context():
            t0 = time.perf_counter()
            seeded = seed(args.records, args.other)
            print(
                f"seeded {args.records} + {args.other} records and conversations of "
                f"{', '.join(map(str, CONVERSATION_SIZES))} messages in "
                f"{time.perf_counter() - t0:.1f} s; {args.calls} tool calls per side, "
                f"{args.steps} loop steps per size"
            )
        tool_cases = measure_tool_call(app, log, seeded, args.calls)
        stages = dispatcher_stages(app, seeded, args.calls)
        paths = measure_dispatch_paths(app, seeded, args.calls)
        loop_cases = measure_loop(app, log, seeded, args.steps)
    print_stages(stages)
    print_paths(paths)
    return report(tool_cases, loop_cases)


def print_stages(stages: list[tuple[str, float]]) -> None:
    width = max(len(label) for label, _ in stages)
    print()
    print("where the in-process call's time goes (median ms per stage, wrappers included)")
    for label, ms in stages:
        print(f"  {label:<{width}}  {ms:7.3f}")


def dispatcher_stages(app: Flask, seeded: Seeded, n: int) -> list[tuple[str, float]]:
    """Median ms of each stage of the in-process call, timed by wrappers put in place
    for the run and taken away after it."""
    from monark.api import dispatch as dispatcher
    from monark.api import routes as api_routes

    times: dict[str, list[float]] = {}
    stages = [
        (dispatcher, "_environ", "build the WSGI environ"),
        (app, "request_context", "make the request context (request, URL adapter)"),
        (app, "preprocess_request", "before_request hooks"),
        (app, "dispatch_request", "the view: guard, parse, handler, JSON, Response"),
        (api_routes.records, "get_model", "  of which the model and its fields (1 query)"),
        (api_routes.queries, "list_records", "  of which 25 records (1 query)"),
        (app, "process_response", "after_request hooks, session"),
        (dispatcher, "_json_of", "read the JSON answer"),
        (dispatcher, "_handle", "the whole request pipeline"),
        (dispatcher, "dispatch", "dispatch(): + the unit of work, its session"),
    ]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in stages]

    def timed(label: str, fn: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                times.setdefault(label, []).append((time.perf_counter() - t0) * 1000)

        return run

    toolset = build_chat_toolset(V1_ROUTES)
    actor = seeded.owner.via_assistant(seeded.tool_conversation_id)
    for (owner, name, label), (_, _, fn) in zip(stages, originals, strict=True):
        setattr(owner, name, timed(label, fn))
    execute = timed("the tool call (+ split and check the arguments)", toolset.execute)
    try:
        with app.app_context():
            for i in range(n + 100):
                if i == 100:
                    times.clear()  # warm-up done
                execute(actor, "records_list", {"model": MODEL, "limit": LIMIT})
            db.session.rollback()
    finally:
        for owner, name, fn in originals:
            setattr(owner, name, fn)
    return [(label, statistics.median(values)) for label, values in times.items()]


def measure_dispatch_paths(app: Flask, seeded: Seeded, n: int) -> list[CaseResult]:
    """``dispatch()`` against the same call through Flask's test client, interleaved."""
    from monark.api.dispatch import DispatchResponse, dispatch
    from monark.core.auth import PRINCIPAL_ENVIRON_KEY
    from monark.core.uow import unit_of_work

    actor = seeded.owner.via_assistant(seeded.tool_conversation_id)
    path, query = f"/api/v1/models/{MODEL}/records", {"limit": LIMIT}
    client = app.test_client(use_cookies=False)

    def via_test_client() -> DispatchResponse:
        with unit_of_work(read_only=True):
            response = client.get(
                path,
                query_string=query,
                headers={"Accept": "application/json"},
                environ_overrides={PRINCIPAL_ENVIRON_KEY: actor},
            )
            return DispatchResponse(response.status_code, response.get_json(silent=True))

    def via_dispatch() -> DispatchResponse:
        return dispatch(actor, "GET", path, query=query)

    mirror = CaseResult("dispatch(): the request run as wsgi_app runs it")
    tested = CaseResult("the same call through Flask's test client")
    with app.app_context():
        a, b = via_dispatch(), via_test_client()
        if a != b or a.status != 200:
            raise SystemExit("dispatch() and the test client answer differently")
        for _ in range(20):
            via_dispatch()
            via_test_client()
        for _ in range(max(1, n // BLOCK)):
            for case, call in ((mirror, via_dispatch), (tested, via_test_client)):
                for _ in range(BLOCK):
                    t0 = time.perf_counter()
                    call()
                    case.times_ms.append((time.perf_counter() - t0) * 1000)
        db.session.rollback()
    return [mirror, tested]


def print_paths(paths: list[CaseResult]) -> None:
    mirror, tested = paths
    width = max(len(c.name) for c in paths)
    print()
    print("how the dispatcher runs a request (records_list, median and p95 ms per call)")
    for case in paths:
        print(f"  {case.name:<{width}}  {case.median:7.3f}  {case.p95:7.3f}")
    extra = tested.median - mirror.median
    print(
        f"  the test client costs {extra:+.3f} ms a call "
        f"({100 * extra / mirror.median:+.0f}% of dispatch())"
    )


def report(tool_cases: list[CaseResult], loop_cases: list[CaseResult]) -> int:
    local, remote, shared = tool_cases
    cases = [*tool_cases, *loop_cases]
    width = max(len(c.name) for c in cases)
    print()
    print(f"{'case':<{width}}  {'median ms':>9}  {'p95 ms':>7}  queries")
    print(f"{'-' * width}  {'-' * 9}  {'-' * 7}  {'-' * 7}")
    for case in cases:
        print(f"{case.name:<{width}}  {case.median:9.3f}  {case.p95:7.3f}  {case.queries_label}")

    ratio = remote.median / local.median
    print()
    print(
        f"ratio: loopback HTTP / in-process = {ratio:.1f}x "
        f"(median {remote.median:.3f} ms / {local.median:.3f} ms)"
    )
    own_local, own_remote = local.median - shared.median, remote.median - shared.median
    share = min(100.0, 100 * shared.median / local.median)
    print(
        f"  both include the view work they share ({shared.median:.3f} ms, {share:.0f}% of "
        f"the in-process call);\n  beyond it HTTP adds ~{own_remote:.3f} ms and the in-process "
        + (
            f"path ~{own_local:.3f} ms (~{own_remote / own_local:.0f}x less, approximate)"
            if own_local >= 0.02
            else "path nothing measurable (within noise)"
        )
    )

    small, large = loop_cases[0], loop_cases[-1]
    growth = large.median / small.median
    counts = {c.queries for c in loop_cases}
    checks = [
        (
            f"the dispatcher adds at least {TARGET_RATIO:.0f}x less than loopback HTTP beyond "
            f"the view work (got {own_remote / max(own_local, 1e-9):.1f}x)",
            own_remote >= TARGET_RATIO * own_local,
        ),
        (
            f"the view work itself at most {VIEW_WORK_MS:.1f} ms (got {shared.median:.3f} ms)",
            shared.median <= VIEW_WORK_MS,
        ),
        (
            "loop queries per step the same at "
            + ", ".join(f"{c.name.split(', ')[1]}: {c.queries}" for c in loop_cases),
            len(counts) == 1,
        ),
        (
            f"loop queries per step at most {TARGET_QUERIES} (got {max(counts)})",
            max(counts) <= TARGET_QUERIES,
        ),
        (
            f"loop overhead at {large.name.split(', ')[1]} at most {TARGET_GROWTH:.0f}x "
            f"that at {small.name.split(', ')[1]} (got {growth:.1f}x)",
            growth <= TARGET_GROWTH,
        ),
    ]
    return verdict(checks)


if __name__ == "__main__":
    sys.exit(main())
