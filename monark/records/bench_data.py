"""Many records fast, for measuring (``flask seed-bench --records N``, ``bench/query_bench.py``).

An org "Acme" with 30 people and a ``tasks`` model (title, status, points, due, assignee)
whose N records a member can see (one in twenty more is private to the owner, so the
member does not), and an org "Globex" with 20,000 of its own in the same tables. Records
and their value index rows are written by the driver itself, in one pass (PostgreSQL's
``COPY``, SQLite's ``executemany``), not through the ORM (each model gets a new data
version from the triggers on records all the same), and the database is analyzed as a
while after a bulk load (PostgreSQL vacuumed too, as autovacuum would, so index-only scans
can skip the heap). The search index is left alone (``flask search reindex`` adds them).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import func, select

from monark.core.models import Membership, Org, User
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records import services
from monark.records.index import index_rows, private_to
from monark.records.models import Record, RecordModel, RecordValue

STATUSES = ("todo", "doing", "done", "blocked")
OTHER_ORG_RECORDS = 20_000
_BATCH = 20_000
_RECORD_COLUMNS = (
    "id",
    "org_id",
    "model_id",
    "values",
    "title",
    "search_text",
    "visibility",
    "creator_id",
    "created_at",
    "updated_at",
)
_VALUE_COLUMNS = ("record_id", "field", "model_id", "text_value", "number_value", "private_to")


@dataclass(frozen=True)
class BenchOrg:
    """What was made: the member who sees ``visible`` tasks, the owner, the model."""

    member: Principal
    owner: Principal
    model_id: int
    visible: int


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


def _tasks(owner: Principal) -> RecordModel:
    model = services.create_model(owner, "tasks", "Tasks", "")
    services.add_field(owner, model, key="title", label="Title", type="text", required=True)
    services.add_field(
        owner, model, key="status", label="Status", type="select", options=list(STATUSES)
    )
    services.add_field(owner, model, key="points", label="Points", type="number")
    services.add_field(owner, model, key="due", label="Due", type="date")
    services.add_field(owner, model, key="assignee", label="Assignee", type="user")
    return model


def _rows(
    first_id: int, org_id: int, model_id: int, users: list[User], count: int, rng: random.Random
) -> Iterator[tuple[tuple[Any, ...], list[tuple[Any, ...]]]]:
    """``count`` records from id ``first_id``, each with its value index rows; one in
    twenty is private to the owner (``users[0]``)."""
    today = date.today()
    start = datetime(2025, 1, 1, tzinfo=UTC)
    owner = users[0].id
    for i in range(count):
        values = {
            "title": f"Task {i}",
            "status": rng.choice(STATUSES),
            "points": rng.randint(1, 13),
            "due": (today + timedelta(days=rng.randint(-200, 200))).isoformat(),
            "assignee": rng.choice(users).id,
        }
        visibility = "private" if i % 20 == 0 else "org"
        stamp = start + timedelta(minutes=i)
        record_id = first_id + i
        record = (
            record_id,
            org_id,
            model_id,
            json.dumps(values),
            values["title"],
            values["title"].lower(),
            visibility,
            owner,
            stamp,
            stamp,
        )
        index = index_rows(record_id, model_id, values, private_to(visibility, owner))
        yield record, [tuple(row[c] for c in _VALUE_COLUMNS) for row in index]


def _write(table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """Rows into ``table`` by the driver: ``COPY`` on PostgreSQL, ``executemany`` on SQLite."""
    dbapi = db.session.connection().connection.dbapi_connection
    names = ", ".join(f'"{c}"' for c in columns)
    cursor = dbapi.cursor()
    try:
        if db.engine.dialect.name == "postgresql":
            with cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join("?" for _ in columns)
            # As SQLAlchemy writes a datetime on SQLite: naive UTC, with microseconds.
            dated = [
                tuple(
                    v.strftime("%Y-%m-%d %H:%M:%S.%f") if isinstance(v, datetime) else v
                    for v in row
                )
                for row in rows
            ]
            cursor.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", dated)
    finally:
        cursor.close()


def _load(org: Org, model: RecordModel, users: list[User], count: int, rng: random.Random) -> None:
    first = (db.session.scalar(select(func.max(Record.id))) or 0) + 1
    records: list[tuple[Any, ...]] = []
    values: list[tuple[Any, ...]] = []
    for record, index in _rows(first, org.id, model.id, users, count, rng):
        records.append(record)
        values += index
        if len(records) >= _BATCH:
            _write(Record.__tablename__, _RECORD_COLUMNS, records)
            _write(RecordValue.__tablename__, _VALUE_COLUMNS, values)
            records, values = [], []
    if records:
        _write(Record.__tablename__, _RECORD_COLUMNS, records)
        _write(RecordValue.__tablename__, _VALUE_COLUMNS, values)


@contextmanager
def _indexes_after() -> Iterator[None]:
    """The lookup indexes of the two tables dropped for the block and built again after it:
    one sort of each is far cheaper than a million inserts into each (on a live database
    other readers would go without them meanwhile: this is for a bench's database)."""
    indexes = [
        index
        for table in (Record.__table__, RecordValue.__table__)
        for index in table.indexes
        if not index.unique
    ]
    conn = db.session.connection()
    for index in indexes:
        index.drop(conn)
    yield
    for index in indexes:
        index.create(conn)


def analyze() -> None:
    """Planner statistics as after a bulk load has settled (PostgreSQL: vacuumed too)."""
    db.session.commit()
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("ANALYZE" if db.engine.dialect.name == "sqlite" else "VACUUM ANALYZE")


def seed_bench(visible: int, seed: int = 7) -> BenchOrg:
    """Acme, whose member sees ``visible`` tasks, and Globex with 20,000 (see the module)."""
    rng = random.Random(seed)
    org, users, owner = _org("Acme", 30)
    other, other_users, other_owner = _org("Globex", 5)
    model, other_model = _tasks(owner), _tasks(other_owner)
    total = visible * 20 // 19 + 1  # one in twenty is private to the owner
    with _indexes_after():
        _load(org, model, users, total, rng)
        _load(other, other_model, other_users, OTHER_ORG_RECORDS, rng)
    if db.engine.dialect.name == "postgresql":
        db.session.execute(
            select(func.setval(func.pg_get_serial_sequence("records", "id"), func.max(Record.id)))
        )
    analyze()
    member = Principal.for_user(users[1].id, org.id, "member")
    return BenchOrg(member, owner, model.id, visible)
