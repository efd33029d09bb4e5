"""What the benchmarks share: counting SQL statements and summarising timed cases."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from flask import Flask
from sqlalchemy import event

from monark.extensions import db


@dataclass
class QueryLog:
    """SQL statements seen on an engine while ``active`` (hook ``listener`` to it)."""

    active: bool = False
    statements: list[tuple[str, Any]] = field(default_factory=list)

    def listener(self, conn, cursor, statement, parameters, context, executemany) -> None:
        if self.active:
            self.statements.append((statement, parameters))

    @property
    def count(self) -> int:
        return len(self.statements)

    @contextmanager
    def capture(self) -> Iterator[list[tuple[str, Any]]]:
        self.statements = []
        self.active = True
        try:
            yield self.statements
        finally:
            self.active = False


@dataclass
class CaseResult:
    """One measured case: its timings and how many queries each run took."""

    name: str
    times_ms: list[float] = field(default_factory=list)
    query_counts: list[int] = field(default_factory=list)
    last_sql: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def p95(self) -> float:
        ordered = sorted(self.times_ms)
        return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]

    @property
    def queries(self) -> int:
        """The usual count (an occasional extra write, e.g. key last_used_at, is not typical)."""
        return Counter(self.query_counts).most_common(1)[0][0]

    @property
    def queries_label(self) -> str:
        low, high = min(self.query_counts), max(self.query_counts)
        return str(self.queries) if low == high else f"{self.queries} ({low}-{high})"


# ---- the throwaway database and the verdict every benchmark prints -----------------------


def add_database_argument(parser: argparse.ArgumentParser) -> None:
    """``--database-url`` (or ``BENCH_DATABASE_URL``); ``DATABASE_URL`` is ignored on purpose."""
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", ""),
        help="a THROWAWAY database (all its tables are dropped); default: temporary SQLite",
    )


@contextmanager
def throwaway_database(
    database_url: str, build_app: Callable[[str], Flask]
) -> Iterator[tuple[Flask, QueryLog]]:
    """An app on empty tables (a temporary SQLite file unless ``database_url`` names one),
    with a ``QueryLog`` listening on its engine; PostgreSQL tables are dropped afterwards."""
    with tempfile.TemporaryDirectory(prefix="monark-bench-") as tmpdir:
        url = database_url or f"sqlite:///{tmpdir}/bench.db"
        if url.startswith(("postgres://", "postgresql://")):
            url = "postgresql+psycopg://" + url.split("://", 1)[1]
        app = build_app(url)
        with app.app_context():
            engine = db.engine
            print(f"database: {engine.url.render_as_string(hide_password=True)}")
            if engine.dialect.name != "sqlite":
                print("  dropping and recreating all tables there (db.drop_all / db.create_all)")
            db.drop_all()
            db.create_all()
        log = QueryLog()
        event.listen(engine, "before_cursor_execute", log.listener)
        try:
            yield app, log
        finally:
            event.remove(engine, "before_cursor_execute", log.listener)
            if engine.dialect.name != "sqlite":
                with app.app_context():
                    db.drop_all()
            engine.dispose()


def verdict(checks: list[tuple[str, bool]]) -> int:
    """Print each target as PASS or FAIL, then OK or FAILED; the exit status."""
    print()
    print("targets:")
    for label, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {label}")
    ok = all(ok for _, ok in checks)
    print()
    print("OK" if ok else "FAILED")
    return 0 if ok else 1
