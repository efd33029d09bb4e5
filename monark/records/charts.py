"""Whether rows of a result draw as a chart: a text or date label column first, then numeric
columns. Pure: the query tool says why a chart it was asked for cannot be drawn, and the
assistant's panel draws the ones that can (``assistant/result_view.py``)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

ChartKind = Literal["bar", "line"]
MAX_POINTS = 50  # a chart of more rows than this would be unreadable in a panel
MAX_SERIES = 4
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class Chart:
    """How a table's figures draw: its label column and the numeric columns as series."""

    kind: ChartKind
    label_column: int
    series: list[int]


def number(value: Any) -> float | None:
    """``value`` as a figure a chart can draw (None: it is none; Yes/No is no figure)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def is_date(value: Any) -> bool:
    """Whether ``value`` reads as a date (``YYYY-MM-DD``, maybe with a time after it)."""
    if not isinstance(value, str) or not _DATE.fullmatch(value[:10]):
        return False
    try:
        date.fromisoformat(value[:10])
    except ValueError:
        return False
    return True


def _series(columns: list[str], rows: list[list[Any]]) -> list[int]:
    numeric = [i for i in range(1, len(columns)) if all(number(r[i]) is not None for r in rows)]
    return numeric[:MAX_SERIES]


def chart_problem(columns: list[str], rows: list[list[Any]]) -> str | None:
    """Why these rows draw no chart, in words for the model and the user (None: they do)."""
    if len(rows) < 2:
        return "a chart needs at least two rows"
    if len(rows) > MAX_POINTS:
        return f"a chart shows at most {MAX_POINTS} rows: group or aggregate the rows"
    if len(columns) < 2 or any(len(r) != len(columns) for r in rows):
        return "a chart needs a label column and at least one numeric column"
    if not all(isinstance(r[0], str) and r[0] for r in rows):
        return f"its first column ({columns[0]}) must be a text or date label in every row"
    if not _series(columns, rows):
        return "no column after the first is a number in every row"
    return None


def chart_of(
    columns: list[str], rows: list[list[Any]], kind: ChartKind | None = None
) -> Chart | None:
    """The chart of these rows (``kind``, else a line over dates and bars otherwise), or None
    when their shape draws none (``chart_problem`` says why)."""
    if chart_problem(columns, rows) is not None:
        return None
    chosen = kind or ("line" if all(is_date(r[0]) for r in rows) else "bar")
    return Chart(chosen, 0, _series(columns, rows))
