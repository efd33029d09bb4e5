"""What the benchmarks share: counting SQL statements and summarising timed cases."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


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
