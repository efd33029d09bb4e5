"""Questions over all the records: ``records_query`` at 10,000 and 100,000 visible records.

The org has a ``tasks`` model (title, status, points, due, assignee) with N records a member
can see (one in twenty is private to someone else, and skipped), next to another org's
records in the same table. Each case is the in-process tool call the assistant makes, as
that member: ``records_query`` with "the count of overdue tasks per assignee"::

    SELECT assignee_name, count(*) FROM tasks
    WHERE due < date('now') AND status != 'done' GROUP BY assignee ORDER BY 2 DESC

Printed per size: median and p95 time, the SQL statements it ran on the app's database,
and how many overdue tasks it counted. Target (exit 1 when missed):
under 500 ms at the median at 100,000 records.

Run from the repo root (about a minute; PostgreSQL only when named, its tables are
dropped)::

    .venv/bin/python bench/query_bench.py
    .venv/bin/python bench/query_bench.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/bench
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import UTC, date, datetime, timedelta
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
from sqlalchemy import insert  # noqa: E402

from monark import create_app  # noqa: E402
from monark.api.routes import V1_ROUTES  # noqa: E402
from monark.assistant.tools import build_chat_toolset  # noqa: E402
from monark.core.models import Membership, Org, User  # noqa: E402
from monark.core.rbac import Principal  # noqa: E402
from monark.extensions import db  # noqa: E402
from monark.records import services  # noqa: E402
from monark.records.models import Record  # noqa: E402

SIZES = (10_000, 100_000)
QUERY_MS = 500.0
OVERDUE = (
    "SELECT assignee_name, count(*) FROM tasks "
    "WHERE due < date('now') AND status != 'done' GROUP BY assignee ORDER BY 2 DESC"
)
STATUSES = ("todo", "doing", "done", "blocked")


def _org(name: str, people: int) -> tuple[Org, list[User], Principal]:
    org = Org(name=name, slug=name.lower())
    users = [
        User(email=f"u{i}@{name.lower()}.test", name=f"{name} person {i}", password_hash="x")
        for i in range(people)
    ]
    db.session.add_all([org, *users])
    db.session.flush()
    for i, user in enumerate(users):
        role = "owner" if i == 0 else "member"
        db.session.add(Membership(user_id=user.id, org_id=org.id, role=role))
    db.session.commit()
    return org, users, Principal.for_user(users[0].id, org.id, "owner")


def _tasks(owner: Principal) -> Any:
    model = services.create_model(owner, "tasks", "Tasks", "")
    services.add_field(owner, model, key="title", label="Title", type="text", required=True)
    services.add_field(
        owner, model, key="status", label="Status", type="select", options=list(STATUSES)
    )
    services.add_field(owner, model, key="points", label="Points", type="number")
    services.add_field(owner, model, key="due", label="Due", type="date")
    services.add_field(owner, model, key="assignee", label="Assignee", type="user")
    return model


def _rows(org: Org, model: Any, users: list[User], count: int, rng: random.Random) -> list:
    today = date.today()
    start = datetime(2025, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(count):
        values = {
            "title": f"Task {i}",
            "status": rng.choice(STATUSES),
            "points": rng.randint(1, 13),
            "due": (today + timedelta(days=rng.randint(-200, 200))).isoformat(),
            "assignee": rng.choice(users).id,
        }
        stamp = start + timedelta(minutes=i)
        rows.append(
            {
                "org_id": org.id,
                "model_id": model.id,
                "values": values,
                "title": values["title"],
                "search_text": values["title"].lower(),
                "visibility": "private" if i % 20 == 0 else "org",
                "creator_id": users[0].id,  # the owner: the member sees none of the private
                "created_at": stamp,
                "updated_at": stamp,
            }
        )
    return rows


def seed(visible: int) -> Principal:
    """An org whose member sees ``visible`` tasks, and another org with 20,000."""
    rng = random.Random(7)
    org, users, owner = _org("Acme", 30)
    other, other_users, other_owner = _org("Globex", 5)
    model, other_model = _tasks(owner), _tasks(other_owner)
    total = visible * 20 // 19 + 1  # one in twenty is private to the owner
    for chunk in range(0, total, 20_000):
        n = min(20_000, total - chunk)
        db.session.execute(insert(Record), _rows(org, model, users, n, rng))
    db.session.execute(insert(Record), _rows(other, other_model, other_users, 20_000, rng))
    db.session.commit()
    return Principal.for_user(users[1].id, org.id, "member")


def measure(app: Flask, log: QueryLog, size: int, runs: int) -> tuple[CaseResult, int]:
    with app.app_context():
        db.drop_all()
        db.create_all()
        t0 = time.perf_counter()
        member = seed(size)
        print(f"  seeded {size:,} visible records in {time.perf_counter() - t0:.1f} s")
    toolset = build_chat_toolset(V1_ROUTES)
    actor = member.via_assistant(1)
    case = CaseResult(f"records_query, overdue per assignee, {size:,} records")
    with app.app_context():
        for i in range(runs + 2):
            with log.capture():
                t0 = time.perf_counter()
                outcome = toolset.execute(actor, "records_query", {"sql": OVERDUE})
                elapsed = (time.perf_counter() - t0) * 1000
            if not outcome.ok:
                raise SystemExit(f"records_query failed: {outcome.error}")
            if i >= 2:  # two warm-up runs
                case.times_ms.append(elapsed)
                case.query_counts.append(log.count)
        overdue = sum(row[1] for row in outcome.result["rows"])
    return case, overdue


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    add_database_argument(parser)
    args = parser.parse_args(argv)

    def build(url: str) -> Flask:
        return create_app({"SQLALCHEMY_DATABASE_URI": url, "SECRET_KEY": "bench"})

    results = []
    with throwaway_database(args.database_url, build) as (app, log):
        for size in SIZES:
            results.append(measure(app, log, size, args.runs))
    print()
    width = max(len(c.name) for c, _ in results)
    print(f"{'case':<{width}}  {'median ms':>9}  {'p95 ms':>7}  queries  overdue rows")
    print(f"{'-' * width}  {'-' * 9}  {'-' * 7}  -------  ------------")
    for case, overdue in results:
        print(
            f"{case.name:<{width}}  {case.median:9.1f}  {case.p95:7.1f}  "
            f"{case.queries_label:>7}  {overdue:>12,}"
        )
    largest = results[-1][0]
    return verdict(
        [
            (
                f"records_query at {SIZES[-1]:,} records under {QUERY_MS:.0f} ms "
                f"(got {largest.median:.1f} ms)",
                largest.median < QUERY_MS,
            )
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
