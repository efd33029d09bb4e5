"""Benchmark of the records list: latency, SQL queries per request and the list query's plan.

What it measures, in-process with the Flask test client (server time only, no network):

* the web list page ``/models/tasks/records`` (signed in through POST /login), first page and
  a deep cursor page;
* the API ``GET /api/v1/models/tasks/records`` (``records_list``, Bearer API key) with
  ``limit`` 10, 25 and 100, and a deep cursor page (after walking to the ~9,000th record).

For each case it prints the median and p95 latency and the SQL queries per request (counted
with a ``before_cursor_execute`` listener). It then runs ``EXPLAIN QUERY PLAN`` (SQLite) or
``EXPLAIN`` (PostgreSQL) on the list query the service really issued and checks that it walks
``ix_records_org_id_model_id_id``. It exits 1 when the query count grows with the page size
or the index is not used.

Data: one org with a ``tasks`` model (text, select, number, user, long text fields) and
10,000 records (some private), plus a second org with 2,000 records interleaved by id, so
the tenancy filters matter. Rows are bulk-inserted with ``insert(Record)``. Creators and
assignees are spread over 150 members, so a per-row lazy load (an N+1) cannot hide in the
session's identity map and shows up as a query count that grows with ``limit``.

Run from the repo root::

    .venv/bin/python bench/records_bench.py            # fresh temporary SQLite file
    .venv/bin/python bench/records_bench.py --n 100 --records 20000

PostgreSQL runs only when asked for explicitly, because the benchmark DROPS AND RECREATES
every table at that URL (``db.drop_all()`` / ``db.create_all()``); use a throwaway database::

    .venv/bin/python bench/records_bench.py --database-url postgresql+psycopg://u:p@host/bench
    BENCH_DATABASE_URL=postgresql+psycopg://u:p@host/bench .venv/bin/python bench/records_bench.py

``DATABASE_URL`` on its own is ignored on purpose: it usually points at data you care about.
On PostgreSQL the planner may walk the primary key instead when the benchmarked org holds
most of the table (as with the defaults); ``--other 90000`` gives a more realistic tenant mix.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
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
)
from flask import Flask  # noqa: E402
from flask.testing import FlaskClient  # noqa: E402
from sqlalchemy import insert, text  # noqa: E402

from monark import create_app  # noqa: E402
from monark.core.auth import hash_password  # noqa: E402
from monark.core.keys import create_key  # noqa: E402
from monark.core.models import Membership, Org, User  # noqa: E402
from monark.core.rbac import Principal  # noqa: E402
from monark.extensions import db  # noqa: E402
from monark.records import services  # noqa: E402
from monark.records.models import Record, RecordModel  # noqa: E402
from monark.records.values import display_title, search_text  # noqa: E402

INDEX_NAME = "ix_records_org_id_model_id_id"
PASSWORD = "bench password 123"
FAST_HASH = "pbkdf2:sha256:1000"
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
STATUSES = ["todo", "doing", "done", "blocked"]
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india")


# ---- query counting --------------------------------------------------------------------


# ---- seeding ---------------------------------------------------------------------------


def _user(email: str, name: str) -> User:
    user = User(email=email, name=name, password_hash=hash_password(PASSWORD, FAST_HASH))
    db.session.add(user)
    return user


def _org_with_model(name: str, slug: str, n_users: int) -> tuple[Org, list[User], RecordModel]:
    org = Org(name=name, slug=slug)
    db.session.add(org)
    users = [_user(f"user{i}@{slug}.bench", f"{name} User {i}") for i in range(n_users)]
    db.session.flush()
    for i, user in enumerate(users):
        db.session.add(
            Membership(user_id=user.id, org_id=org.id, role="owner" if i == 0 else "member")
        )
    db.session.commit()
    owner = Principal.for_user(users[0].id, org.id, "owner")
    model = services.create_model(owner, "tasks", "Tasks", "Benchmark tasks")
    services.add_field(owner, model, key="title", label="Title", type="text", required=True)
    services.add_field(owner, model, key="status", label="Status", type="select", options=STATUSES)
    services.add_field(owner, model, key="points", label="Points", type="number")
    services.add_field(owner, model, key="assignee", label="Assignee", type="user")
    services.add_field(owner, model, key="notes", label="Notes", type="long_text")
    return org, users, model


def _rows(org: Org, users: list[User], model: RecordModel, count: int, rng: random.Random):
    fields = list(model.fields)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    for i in range(count):
        values: dict[str, Any] = {
            "title": f"{org.name} task {i} {rng.choice(WORDS)}",
            "status": rng.choice(STATUSES),
            "points": rng.randint(1, 13),
            "assignee": rng.choice(users).id,
        }
        if i % 3 == 0:
            values["notes"] = " ".join(rng.choices(WORDS, k=12))
        creator = rng.choice(users)
        stamp = start + timedelta(minutes=i)
        yield {
            "org_id": org.id,
            "model_id": model.id,
            "values": values,
            "title": display_title(fields, values),
            "search_text": search_text(fields, values),
            "visibility": "private" if i % 20 == 0 else "org",
            "creator_id": creator.id,
            "created_at": stamp,
            "updated_at": stamp,
        }


@dataclass
class Seeded:
    web_email: str
    api_token: str
    a_record_ids: set[int]


def seed(n_records: int, n_other: int) -> Seeded:
    rng = random.Random(42)
    org_a, users_a, model_a = _org_with_model("Acme", "acme", 150)
    org_b, users_b, model_b = _org_with_model("Globex", "globex", 20)
    rows_a = list(_rows(org_a, users_a, model_a, n_records, rng))
    rows_b = list(_rows(org_b, users_b, model_b, n_other, rng))
    # Interleave the two orgs so their ids mix, as they would in a shared table.
    rows: list[dict[str, Any]] = []
    step = max(1, n_records // max(1, n_other))
    it_b = iter(rows_b)
    for i, row in enumerate(rows_a):
        rows.append(row)
        if i % step == 0:
            rows.extend(r for r in [next(it_b, None)] if r is not None)
    rows.extend(it_b)
    for chunk in range(0, len(rows), 5000):
        db.session.execute(insert(Record), rows[chunk : chunk + 5000])
    db.session.commit()
    owner = Principal.for_user(users_a[0].id, org_a.id, "owner")
    _, token = create_key(owner, "bench key", "member")
    db.session.execute(text("ANALYZE"))  # planner statistics, as a live database would have
    db.session.commit()
    a_ids = set(db.session.scalars(db.select(Record.id).where(Record.org_id == org_a.id)).all())
    return Seeded(
        web_email=users_a[1].email,  # a member: the list query carries the visibility OR
        api_token=token,
        a_record_ids=a_ids,
    )


# ---- measuring -------------------------------------------------------------------------


def run_case(
    client: FlaskClient, log: QueryLog, name: str, url: str, n: int, headers: dict | None = None
) -> CaseResult:
    check = client.get(url, headers=headers)  # warm-up (template compile, key last_used_at)
    if check.status_code != 200:
        raise SystemExit(f"{name}: GET {url} answered {check.status_code}")
    times, counts, sql = [], [], []
    for _ in range(n):
        with log.capture() as statements:
            t0 = time.perf_counter()
            response = client.get(url, headers=headers)
            elapsed = (time.perf_counter() - t0) * 1000
        assert response.status_code == 200, (name, response.status_code)
        times.append(elapsed)
        counts.append(len(statements))
        sql = list(statements)
    return CaseResult(name, times, counts, sql)


def login(client: FlaskClient, email: str) -> None:
    page = client.get("/login").get_data(as_text=True)
    match = CSRF_RE.search(page)
    if not match:
        raise SystemExit("No CSRF token on /login")
    response = client.post(
        "/login", data={"email": email, "password": PASSWORD, "csrf_token": match.group(1)}
    )
    if response.status_code != 302:
        raise SystemExit(f"Login failed: {response.status_code}")


def walk_cursor(client: FlaskClient, url: str, headers: dict, depth: int) -> tuple[str, int]:
    """Follow next_cursor with limit 100 until about ``depth`` records were seen."""
    seen, cursor = 0, None
    while seen < depth:
        page = client.get(
            url + "?limit=100" + (f"&cursor={cursor}" if cursor else ""), headers=headers
        ).get_json()
        if not page["next_cursor"]:
            break
        seen += len(page["items"])
        cursor = page["next_cursor"]
    if cursor is None:
        raise SystemExit("Could not walk the cursor: too few records")
    return cursor, seen


# ---- query plans -----------------------------------------------------------------------


def list_statement(sql: list[tuple[str, Any]]) -> tuple[str, Any]:
    """The service's keyset list query among a request's statements."""
    for statement, params in sql:
        flat = " ".join(statement.split()).upper()
        if "FROM RECORDS" in flat and "ORDER BY" in flat and "LIMIT" in flat:
            return statement, params
    raise SystemExit("The list query was not among the captured statements")


def explain(statement: str, params: Any) -> tuple[list[str], bool]:
    """Plan lines of ``statement`` and whether they walk the listing index."""
    conn = db.session.connection()
    if db.engine.dialect.name == "sqlite":
        rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
        lines = [str(row[-1]) for row in rows]
        uses = any(re.search(rf"USING (COVERING )?INDEX {INDEX_NAME}\b", line) for line in lines)
    else:
        rows = conn.exec_driver_sql("EXPLAIN " + statement, params).all()
        lines = [str(row[0]) for row in rows]
        # PostgreSQL picks between the listing index and walking the primary key backwards
        # by cost (a selective cursor favours the key); either is an index, never a scan.
        uses = any("Index Scan" in line for line in lines) and not any(
            "Seq Scan on records" in line for line in lines
        )
    db.session.rollback()
    return lines, uses


# ---- main ------------------------------------------------------------------------------


def build_app(url: str) -> Flask:
    return create_app(
        {
            "SQLALCHEMY_DATABASE_URI": url,
            "SECRET_KEY": "bench",
            "PASSWORD_HASH_METHOD": FAST_HASH,
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="requests per case (default 50)")
    parser.add_argument("--records", type=int, default=10_000, help="records in the main org")
    parser.add_argument(
        "--other", type=int, default=40_000, help="records of other orgs (default 40,000)"
    )
    add_database_argument(parser)
    args = parser.parse_args(argv)

    with throwaway_database(args.database_url, build_app) as (app, log):
        with app.app_context():
            t0 = time.perf_counter()
            seeded = seed(args.records, args.other)
            print(
                f"seeded {args.records} + {args.other} records in "
                f"{time.perf_counter() - t0:.1f} s; {args.n} requests per case"
            )
        # Requests run without an outer app context, so each gets its own context and
        # session (and identity map), as under a real server.
        return measure(app, log, seeded, args.n)


def measure(app: Flask, log: QueryLog, seeded: Seeded, n: int) -> int:
    api = "/api/v1/models/tasks/records"
    web = "/models/tasks/records"
    bearer = {"Authorization": f"Bearer {seeded.api_token}"}
    web_client = app.test_client()
    login(web_client, seeded.web_email)
    api_client = app.test_client()

    # Tenancy sanity: the key's pages hold only the main org's records.
    first = api_client.get(api + "?limit=100", headers=bearer).get_json()
    foreign = [item["id"] for item in first["items"] if item["id"] not in seeded.a_record_ids]
    if foreign or len(first["items"]) != 100:
        raise SystemExit(f"Tenancy check failed: {len(first['items'])} items, foreign {foreign}")

    cursor, seen = walk_cursor(api_client, api, bearer, depth=len(seeded.a_record_ids) * 9 // 10)
    web_first = run_case(web_client, log, "web list page 1", web, n)
    web_deep = run_case(web_client, log, f"web list cursor @{seen}", f"{web}?cursor={cursor}", n)
    by_limit = [
        run_case(api_client, log, f"api limit={limit}", f"{api}?limit={limit}", n, bearer)
        for limit in (10, 25, 100)
    ]
    api_deep = run_case(
        api_client,
        log,
        f"api limit=25 cursor @{seen}",
        f"{api}?limit=25&cursor={cursor}",
        n,
        bearer,
    )
    cases = [web_first, web_deep, *by_limit, api_deep]

    print()
    width = max(len(c.name) for c in cases)
    print(f"{'case':<{width}}  {'median ms':>9}  {'p95 ms':>7}  queries/request")
    print(f"{'-' * width}  {'-' * 9}  {'-' * 7}  {'-' * 15}")
    for case in cases:
        print(f"{case.name:<{width}}  {case.median:9.2f}  {case.p95:7.2f}  {case.queries_label}")

    ok = True
    print()
    counts = ", ".join(f"{c.name}: {c.queries}" for c in by_limit)
    if len({c.queries for c in by_limit}) == 1:
        print(f"queries vs page size: constant ({counts})")
    else:
        ok = False
        print(f"FAIL: queries grow with page size ({counts})")
    if web_deep.queries != web_first.queries or api_deep.queries != by_limit[1].queries:
        ok = False
        print("FAIL: a deep cursor page issues more queries than the first page")

    print()
    pk_walk = False
    with app.app_context():
        for case in (by_limit[1], api_deep, web_first):
            statement, params = list_statement(case.last_sql)
            lines, uses = explain(statement, params)
            what = INDEX_NAME if db.engine.dialect.name == "sqlite" else "an index"
            print(f"plan [{case.name}]: {'uses' if uses else 'does NOT use'} {what}")
            for line in lines:
                print(f"  {line}")
            ok = ok and uses
            pk_walk = pk_walk or (not uses and any("using pk_records" in x for x in lines))
    if pk_walk:
        print(
            "NOTE: PostgreSQL walked the primary key backwards and filtered, a cost-based choice\n"
            "  when one tenant holds most of the table. Re-run with a realistic tenant mix,\n"
            "  e.g. --other 90000, to see whether the listing index is chosen."
        )
    print()
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
