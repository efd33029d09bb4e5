"""Questions over all the records: ``records_query`` and ``records_list`` at a million records.

The org has a ``tasks`` model (title, status, points, due, assignee) with N records a member
can see (one in twenty more is private to the owner, and skipped), next to another org's
records in the same tables, loaded by ``monark/records/bench_data.py`` (what ``flask
seed-bench --records N`` runs) and analyzed as after a bulk load. Each case is the
in-process tool call the assistant makes, as that member:

- ``records_query``, "the count of overdue tasks per assignee"::

      SELECT assignee_name, count(*) FROM tasks
      WHERE due < date('now') AND status != 'done' GROUP BY assignee ORDER BY 2 DESC

  first with no kept sandbox (every run starts with the process's cache emptied), then
  the same again, then a different question over the columns the copy holds, then the
  first again after another connection wrote one record (which must copy again and see it);
- ``records_list`` with two filters and a sort (open tasks past due, most overdue first:
  ``status:in:todo,doing``, ``due:lt:today``, sorted by ``due``), with its total (exact
  up to ``RECORDS_LIST_TOTAL_CAP``, past it "more than").

Printed per size: median and p95 time, the SQL statements each ran on the app's database,
what it answered, the database's plan for the list's page, the most memory the kept
sandboxes took (``RECORDS_QUERY_CACHE_MB`` bounds it) and the process's peak resident
memory. Targets (exit 1 when missed) at the largest size (1,000,000 by default): the first
query under 1 s, a repeated or different one under 100 ms, the list under 50 ms, at the
median.

Run from the repo root (a few minutes at a million; PostgreSQL only when named, its tables
are dropped)::

    .venv/bin/python bench/query_bench.py
    .venv/bin/python bench/query_bench.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/bench
    BENCH_SIZES=10000,100000 .venv/bin/python bench/query_bench.py
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
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
from sqlalchemy.orm import Session  # noqa: E402

from monark import create_app  # noqa: E402
from monark.api.routes import V1_ROUTES  # noqa: E402
from monark.assistant.tools import build_chat_toolset  # noqa: E402
from monark.core.rbac import Principal  # noqa: E402
from monark.extensions import db  # noqa: E402
from monark.records.bench_data import seed_bench  # noqa: E402
from monark.records.models import Record  # noqa: E402
from monark.records.sql import sandbox_cache  # noqa: E402

SIZES = tuple(int(n) for n in os.environ.get("BENCH_SIZES", "1000000").split(","))
FIRST_MS = 1000.0
AGAIN_MS = 100.0
OVERDUE = (
    "SELECT assignee_name, count(*) FROM tasks "
    "WHERE due < date('now') AND status != 'done' GROUP BY assignee ORDER BY 2 DESC"
)
# Other questions over what the first one copied (a new one each run, so no kept answer
# serves it): work by status, due from some days ago.
OTHER = (
    "SELECT status, count(*), min(due) FROM tasks WHERE due >= date('now', '-{days} days') "
    "GROUP BY status ORDER BY status"
)
CPU_MS: dict[str, float] = {}
LIST_MS = 50.0
# Open tasks that are overdue, the most overdue first: two filters and a sort.
LIST_ARGS = {"model": "tasks", "filter": ["status:in:todo,doing", "due:lt:today"], "sort": "due"}


def _timed(
    app: Flask, log: QueryLog, name: str, call: Any, runs: int
) -> tuple[CaseResult, Any, list[tuple[str, Any]]]:
    """``call()`` timed ``runs`` times after two warm-ups; its last result and statements.
    The process's CPU time per run is kept too (``CPU_MS``): on a shared machine it says
    what the wall time would be with a core to itself."""
    case = CaseResult(name)
    cpu: list[float] = []
    with app.app_context():
        for i in range(runs + 2):
            with log.capture():
                t0, c0 = time.perf_counter(), time.process_time()
                outcome = call()
                elapsed = (time.perf_counter() - t0) * 1000
                cpu.append((time.process_time() - c0) * 1000)
            if not outcome.ok:
                raise SystemExit(f"{name} failed: {outcome.error}")
            if i >= 2:
                case.times_ms.append(elapsed)
                case.query_counts.append(log.count)
        CPU_MS[name] = statistics.median(cpu[2:])
        return case, outcome.result, list(log.statements)


def plan(app: Flask, statements: list[tuple[str, Any]]) -> list[str]:
    """The database's plan for the list's page statement (the one that sorts)."""
    statement, parameters = next(
        s for s in statements if "record_values" in s[0] and "ORDER BY" in s[0]
    )
    with app.app_context(), db.engine.connect() as conn:
        if db.engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            return [row[-1] for row in rows]
        rows = conn.exec_driver_sql(f"EXPLAIN {statement}", parameters)
        return [row[0] for row in rows]


def _write_elsewhere(app: Flask, model_id: int, owner: Principal) -> None:
    """One more overdue task, written on a connection of its own as another instance would."""
    with app.app_context(), db.engine.begin() as conn:
        session = Session(bind=conn)
        session.add(
            Record(
                org_id=owner.org_id,
                model_id=model_id,
                values={"title": "Late", "status": "todo", "due": "2000-01-01", "assignee": 2},
                title="Late",
                creator_id=owner.user_id,
            )
        )
        session.flush()


def measure(app: Flask, log: QueryLog, size: int, runs: int) -> list[tuple[CaseResult, str]]:
    with app.app_context():
        db.drop_all()
        db.create_all()
        t0 = time.perf_counter()
        made = seed_bench(size)
        print(f"  seeded {size:,} visible records in {time.perf_counter() - t0:.1f} s")
    toolset = build_chat_toolset(V1_ROUTES)
    actor = made.member.via_assistant(1)

    def query(sql: str) -> Any:
        return lambda: toolset.execute(actor, "records_query", {"sql": sql})

    def cold() -> Any:
        sandbox_cache().clear()
        return toolset.execute(actor, "records_query", {"sql": OVERDUE})

    with app.app_context():
        sandbox_cache().peak = 0
    first, answer, _ = _timed(
        app, log, f"records_query, first (nothing kept), {size:,}", cold, max(3, runs // 5)
    )
    overdue = sum(row[1] for row in answer["rows"])
    again, _, _ = _timed(app, log, f"records_query, again, {size:,}", query(OVERDUE), runs)
    asked = iter(range(1, 1000))
    other, other_answer, _ = _timed(
        app,
        log,
        f"records_query, a different one, {size:,}",
        lambda: toolset.execute(actor, "records_query", {"sql": OTHER.format(days=next(asked))}),
        runs,
    )
    _write_elsewhere(app, made.model_id, made.owner)
    with app.app_context():
        after = toolset.execute(actor, "records_query", {"sql": OVERDUE})
        peak = sandbox_cache().peak
    seen = sum(row[1] for row in after.result["rows"])
    if seen != overdue + 1:
        raise SystemExit(f"a write elsewhere was not seen: {overdue:,} then {seen:,} overdue")
    listed, page, statements = _timed(
        app, log, f"records_list, 2 filters + sort, {size:,}", query_list(toolset, actor), runs
    )
    print(f"  plan of the list's page at {size:,} records:")
    if os.environ.get("BENCH_SQL"):
        print(next(s for s in statements if "record_values" in s[0] and "ORDER BY" in s[0]))
    for line in plan(app, statements):
        print(f"    {line}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  kept sandboxes at most {peak / 2**20:.1f} MB; process peak RSS {rss:.0f} MB")
    print(f"  after a write on another connection: {seen:,} overdue (was {overdue:,})")
    return [
        (first, f"{overdue:,} overdue"),
        (again, f"{overdue:,} overdue"),
        (other, f"{len(other_answer['rows'])} statuses"),
        (listed, f"{page['total']:,}{'+' if page.get('total_is_lower_bound') else ''} match"),
    ]


def query_list(toolset: Any, actor: Principal) -> Any:
    """The list call, as the assistant makes it."""
    return lambda: toolset.execute(actor, "records_list", LIST_ARGS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    add_database_argument(parser)
    args = parser.parse_args(argv)

    def build(url: str) -> Flask:
        # Limits far past any target: a slow case is measured, not stopped.
        return create_app(
            {
                "SQLALCHEMY_DATABASE_URI": url,
                "SECRET_KEY": "bench",
                "RECORDS_QUERY_TIMEOUT": 60.0,
                "CHAT_TOOL_TIMEOUT": 300,
            }
        )

    results: list[tuple[CaseResult, str]] = []
    with throwaway_database(args.database_url, build) as (app, log):
        for size in SIZES:
            results += measure(app, log, size, args.runs)
    print()
    width = max(len(c.name) for c, _ in results)
    print(f"{'case':<{width}}  {'median ms':>9}  {'p95 ms':>7}  {'cpu ms':>7}  queries  answer")
    print(f"{'-' * width}  {'-' * 9}  {'-' * 7}  {'-' * 7}  -------  ------------")
    for case, answer in results:
        print(
            f"{case.name:<{width}}  {case.median:9.1f}  {case.p95:7.1f}  "
            f"{CPU_MS[case.name]:7.1f}  {case.queries_label:>7}  {answer}"
        )
    first, again, other, listed = (case for case, _ in results[-4:])
    size = f"{SIZES[-1]:,}"
    return verdict(
        [
            (
                f"records_query at {size} records, first, under {FIRST_MS:.0f} ms "
                f"(got {first.median:.1f} ms)",
                first.median < FIRST_MS,
            ),
            (
                f"records_query at {size} records, again, under {AGAIN_MS:.0f} ms "
                f"(got {again.median:.1f} ms)",
                again.median < AGAIN_MS,
            ),
            (
                f"records_query at {size} records, a different one, under {AGAIN_MS:.0f} ms "
                f"(got {other.median:.1f} ms)",
                other.median < AGAIN_MS,
            ),
            (
                f"records_list at {size} records under {LIST_MS:.0f} ms "
                f"(got {listed.median:.1f} ms)",
                listed.median < LIST_MS,
            ),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
