"""A list or query result drawn as people read data: a compact table of its first rows (with
*Open as a list* for a records list), and a bar or line chart when its shape fits.

Both come only from a stored tool result (never from what a model wrote), through the card's
own bounded copy of it. The table is always there, as the chart's text alternative; the chart
is drawn from the table's cells by ``static/js/charts.js``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import url_for

from monark.core.text import scalar_text
from monark.records.charts import MAX_POINTS, Chart, chart_of

SHOWN_ROWS = 10  # rows a card's table shows
SHOWN_FIELDS = 4  # a record's fields beside its title


@dataclass(frozen=True)
class ResultTable:
    """The first rows of a result, how many it had, and where to see all of them."""

    columns: list[str]
    rows: list[list[str]]
    total: int
    links: list[str | None]  # per row: the record it shows, if any
    open_url: str | None = None
    chart: Chart | None = None
    total_is_lower_bound: bool = False  # more than ``total`` (a list's count stopped there)

    @property
    def more(self) -> int:
        """Rows the result had beyond those shown."""
        return max(0, self.total - len(self.rows))


def _cell(value: Any) -> str:
    """A value as a reader sees it in a table: Yes or No, a list's items, an object cut."""
    if isinstance(value, bool):
        return "Yes" if value else "No"
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    return "…" if isinstance(value, dict) else scalar_text(value)


def _query_table(result: dict[str, Any]) -> ResultTable | None:
    columns, rows = result.get("columns"), result.get("rows")
    if not isinstance(columns, list) or not isinstance(rows, list):
        return None
    if not all(isinstance(c, str) for c in columns):
        return None
    rows = [r for r in rows if isinstance(r, list) and len(r) == len(columns)]
    total = result.get("row_count")
    total = total if isinstance(total, int) and total >= len(rows) else len(rows)
    asked = result.get("chart") if result.get("chart") in ("bar", "line") else None
    chart = chart_of(columns, rows, asked) if len(rows) == total else None
    # A chart's table shows every point it draws: it is the chart's text alternative.
    shown = rows[: MAX_POINTS if chart else SHOWN_ROWS]
    return ResultTable(
        columns=list(columns),
        rows=[[_cell(v) for v in r] for r in shown],
        total=total,
        links=[None] * len(shown),
        chart=chart,
    )


def _list_table(arguments: dict[str, Any], result: dict[str, Any]) -> ResultTable | None:
    items, model = result.get("items"), arguments.get("model")
    if not isinstance(items, list) or not isinstance(model, str):
        return None
    items = [i for i in items if isinstance(i, dict) and isinstance(i.get("id"), int)]
    fields: list[str] = []
    for item in items:
        values = item.get("values") if isinstance(item.get("values"), dict) else {}
        fields += [k for k in values if k not in fields and k != "title"]
    fields = fields[:SHOWN_FIELDS]
    total = result.get("total")
    total = total if isinstance(total, int) and total >= len(items) else len(items)
    more = result.get("total_is_lower_bound") is True
    query = {k: arguments[k] for k in ("q", "filter", "sort") if arguments.get(k) not in (None, "")}
    raw = [[i.get("title"), *((i.get("values") or {}).get(f) for f in fields)] for i in items]
    chart = chart_of(["Title", *fields], raw) if len(items) == total and not more else None
    shown = items[: MAX_POINTS if chart else SHOWN_ROWS]
    return ResultTable(
        columns=["Title", *fields],
        rows=[[_cell(r[0]) or "Untitled", *(_cell(v) for v in r[1:])] for r in raw[: len(shown)]],
        total=total,
        links=[url_for("records.record_detail", key=model, record_id=i["id"]) for i in shown],
        open_url=url_for("records.record_list", key=model, **query),
        chart=chart,
        total_is_lower_bound=more,
    )


def result_table(name: str, arguments: Any, result: Any) -> ResultTable | None:
    """The table (and chart) of a ``records_list`` or ``records_query`` result; None for any
    other tool, or a result not of the shape they answer with."""
    if not isinstance(result, dict) or not isinstance(arguments, dict):
        return None
    if name == "records_query":
        return _query_table(result)
    if name == "records_list":
        return _list_table(arguments, result)
    return None
