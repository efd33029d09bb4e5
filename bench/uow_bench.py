"""What a tool call's time limit costs per statement (``core.uow.time_limit``).

Inside a ``time_limit``, a unit of work's connection has a ``before_cursor_execute`` hook
that refuses a statement once the deadline has passed and, on PostgreSQL, sets
``statement_timeout`` again to the time left when the last one was set more than
``STATEMENT_TIMEOUT_SLACK`` ago (a round trip). Measured: one unit of work running a burst
of short statements (``SELECT id FROM orgs WHERE id = 1``), four ways:

* no limit: the unit alone, no hook;
* limit: the hook as shipped (refusal check; on PostgreSQL the SET at most every slack);
* limit, SET each statement: PostgreSQL's SET before every statement (slack 0), to show
  what the slack saves;
* opening a unit, with and without a limit (the hook's listener is added per unit).

Printed: the median per statement (µs) over blocks of statements, and per unit opened.

Run from the repo root::

    .venv/bin/python bench/uow_bench.py                 # a temporary SQLite file
    .venv/bin/python bench/uow_bench.py --database-url postgresql+psycopg://u@host/bench

The PostgreSQL database is a THROWAWAY one: its tables are dropped and recreated.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402

from bench._measure import add_database_argument, throwaway_database  # noqa: E402
from monark import create_app  # noqa: E402
from monark.core import uow  # noqa: E402
from monark.core.models import Org  # noqa: E402
from monark.extensions import db  # noqa: E402

STATEMENT = text("SELECT id FROM orgs WHERE id = 1")


def _app(url: str):
    return create_app({"TESTING": True, "SECRET_KEY": "bench", "SQLALCHEMY_DATABASE_URI": url})


def burst(statements: int, limit: float | None) -> float:
    """µs per statement of a burst of ``statements`` in one unit."""
    with uow.time_limit(limit) if limit else nullcontext(), uow.unit_of_work(read_only=True):
        db.session.execute(STATEMENT).scalar()  # the unit's connection is open
        start = time.perf_counter()
        for _ in range(statements):
            db.session.execute(STATEMENT).scalar()
        return (time.perf_counter() - start) / statements * 1e6


def one_unit(limit: float | None) -> float:
    """µs to open and end a unit running one statement."""
    start = time.perf_counter()
    with uow.time_limit(limit) if limit else nullcontext(), uow.unit_of_work(read_only=True):
        db.session.execute(STATEMENT).scalar()
    return (time.perf_counter() - start) * 1e6


def with_slack(slack: float, measure: Callable[[], float]) -> Callable[[], float]:
    """``measure`` run with ``STATEMENT_TIMEOUT_SLACK`` set to ``slack``."""

    def run() -> float:
        kept = uow.STATEMENT_TIMEOUT_SLACK
        uow.STATEMENT_TIMEOUT_SLACK = slack
        try:
            return measure()
        finally:
            uow.STATEMENT_TIMEOUT_SLACK = kept

    return run


def medians(cases: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Each case's median, the cases taking turns (the machine's noise falls on all)."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, measure in cases.items():
            times[name].append(measure())
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_database_argument(parser)
    parser.add_argument("--statements", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=30)
    args = parser.parse_args(argv)
    with throwaway_database(args.database_url, _app) as (app, _), app.app_context():
        db.session.add(Org(id=1, name="Bench", slug="bench"))
        db.session.commit()
        postgres = db.engine.dialect.name == "postgresql"
        n, limit = args.statements, 60.0
        statements = {
            "no limit": lambda: burst(n, None),
            "limit (as shipped)": lambda: burst(n, limit),
        }
        if postgres:
            statements["limit, SET each statement"] = with_slack(0.0, lambda: burst(n, limit))
        rows = medians(statements, args.blocks)
        units = medians(
            {
                "open a unit, no limit": lambda: one_unit(None),
                "open a unit, limit": lambda: one_unit(limit),
            },
            n,
        )
    print(
        f"slack: {uow.STATEMENT_TIMEOUT_SLACK * 1000:g} ms; {n} statements x {args.blocks} bursts"
    )
    print()
    print(f"{'case':32} {'µs per statement':>18}")
    for name, value in rows.items():
        print(f"{name:32} {value:18.1f}")
    print()
    print(f"{'case':32} {'µs per unit':>18}")
    for name, value in units.items():
        print(f"{name:32} {value:18.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
