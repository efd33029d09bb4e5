"""What the assistant used, read from the day rows (``settings.models.UsageDay``), never from
every reply: an org's (for admins) or one member's own, over the last 30 or 90 days.

Each figure comes as a table (``Table``): the page draws it as a chart and as the table
beside it, and the CSV export writes the same rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Date, case, cast, func, select
from sqlalchemy.dialects import postgresql, sqlite

from monark.chat.models import Conversation, ToolCall
from monark.core.errors import Forbidden, ValidationFailed
from monark.core.models import User, utcnow
from monark.core.money import money_text, plain_text
from monark.core.rbac import Principal
from monark.core.settings import chat_settings, spend_settings
from monark.extensions import db
from monark.settings.metering import SUMMED
from monark.settings.models import NO_USER, ToolDay, UsageDay
from monark.settings.prices import price_table

PERIODS = (30, 90)  # days a page may show


@dataclass
class Totals:
    """Sums of the day rows: replies, tokens by kind, the known cost, unpriced tokens."""

    replies: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: Decimal = Decimal(0)
    unpriced_tokens: int = 0

    def __post_init__(self) -> None:
        self.cost = Decimal(self.cost)  # a sum of no days is the int 0

    @property
    def tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    @property
    def cache_share(self) -> Decimal:
        """The share of prompt tokens read from the cache (0 to 1)."""
        prompt = self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
        return Decimal(self.cache_read_tokens) / prompt if prompt else Decimal(0)

    def cells(self) -> list[Any]:
        return [
            self.replies,
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.cost,
            self.unpriced_tokens,
        ]


# What a ``Totals`` holds, in its order (a reply count without a price is not shown).
_FIELDS = tuple(f for f in SUMMED if f != "unpriced_replies")
TOTAL_COLUMNS = [
    "Replies",
    "Input tokens",
    "Output tokens",
    "Cache read",
    "Cache write",
    "Cost (USD)",
    "Tokens without a price",
]
_SUMS = [func.sum(getattr(UsageDay, f)) for f in _FIELDS]


def _totals(row: Any, start: int) -> Totals:
    values = list(row[start : start + 7])
    cost = values[5] if values[5] is not None else Decimal(0)
    ints = [int(v or 0) for v in values[:5]]
    return Totals(*ints, cost=cost, unpriced_tokens=int(values[6] or 0))


@dataclass
class Table:
    """One figure: a title, columns, rows; what its chart plots (a label column and the
    series columns) and how."""

    key: str
    title: str
    columns: list[str]
    rows: list[list[Any]]
    chart: str = "bar"  # a Chart.js type
    series: list[int] = field(default_factory=list)  # columns the chart plots
    stacked: bool = False

    def text_rows(self) -> list[list[str]]:
        """The rows as the CSV holds them: exact amounts, plain digits."""
        return [[cell_text(v) for v in row] for row in self.rows]

    def shown_rows(self) -> list[list[str]]:
        """The rows as the page's table shows them: dollars as people read them (the CSV
        has them exact), counts with their thousands apart."""
        return [[shown_text(v) for v in row] for row in self.rows]

    def chart_data(self) -> dict[str, Any]:
        """What ``static/js/usage.js`` draws (numbers as JSON numbers: the table is exact)."""
        return {
            "key": self.key,
            "type": self.chart,
            "stacked": self.stacked,
            "labels": [str(row[0]) for row in self.rows],
            "datasets": [
                {"label": self.columns[i], "data": [float(row[i] or 0) for row in self.rows]}
                for i in self.series
            ],
        }


def cell_text(value: Any) -> str:
    """A cell as the CSV holds it: an amount exact, without the zeros its column pads it
    with (``1.1456``, not ``1.1456000000``)."""
    if isinstance(value, Decimal):
        return plain_text(value)
    return str(value)


def shown_text(value: Any) -> str:
    """A cell as the page shows it: ``$1.15``, ``750,060``."""
    if isinstance(value, Decimal):
        return money_text(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


@dataclass(frozen=True)
class Unpriced:
    """A model whose replies have no cost in the period, and why (said on the page)."""

    model: str  # "provider · model"
    tokens: int  # of its replies without a price
    replies: int  # of its replies with cost unknown (no price, or no usage reported)
    no_usage: int  # of those, replies whose provider reported no tokens at all
    priced_now: bool  # the price table has it now (added after these replies)

    @property
    def reasons(self) -> list[str]:
        """Why its cost is unknown, said plainly."""
        out = []
        if self.replies > self.no_usage:
            if self.priced_now:
                out.append("its price was added after these replies were stored")
            else:
                out.append("the price table has no price for this model")
        if self.no_usage:
            n = self.no_usage
            out.append(f"the provider reported no usage for {n} repl{'y' if n == 1 else 'ies'}")
        return out


@dataclass
class Report:
    """A period's usage: totals, and the tables the page shows."""

    days: int
    since: date
    until: date
    totals: Totals
    tables: list[Table]
    own: bool  # one member's own usage (their profile)
    unpriced: list[Unpriced] = field(default_factory=list)  # why a cost is unknown
    prices_read: str = ""  # the day the price table was read

    @property
    def cost_text(self) -> str:
        return money_text(self.totals.cost)

    @property
    def charts(self) -> list[dict[str, Any]]:
        """Every table's chart, for the page's JSON."""
        return [t.chart_data() for t in self.tables]

    def table(self, key: str) -> Table:
        return next(t for t in self.tables if t.key == key)


def period(raw: str | None) -> int:
    """The days asked for (30 by default); another number is refused, naming the field."""
    if raw in (None, ""):
        return PERIODS[0]
    if raw.isdigit() and int(raw) in PERIODS:
        return int(raw)
    raise ValidationFailed(
        "days: show the last 30 or 90 days.",
        [{"field": "days", "message": "Show the last 30 or 90 days."}],
    )


def can_see_org_usage(principal: Principal) -> bool:
    return principal.can("org.manage")


def report(principal: Principal, days: int, own: bool = False, today: date | None = None) -> Report:
    """The org's usage (admins), or with ``own`` the principal's own, over ``days`` days."""
    if not own and not can_see_org_usage(principal):
        raise Forbidden("Only admins see the organization's usage.")
    until = today or utcnow().date()
    since = until - timedelta(days=days - 1)
    where = [UsageDay.org_id == principal.org_id, UsageDay.day >= since, UsageDay.day <= until]
    if own:
        where.append(UsageDay.user_id == (principal.user_id or -1))
    daily, totals = _daily(where, since, until)
    models, unpriced = _by_model(where)
    tables = [daily, models]
    if not own:
        tables.append(_by_user(where))
    tables.append(_tools(principal, since, until, own))
    read = price_table(spend_settings().prices_file).read
    return Report(days, since, until, totals, tables, own, unpriced, read)


def _daily(where: list[Any], since: date, until: date) -> tuple[Table, Totals]:
    """The table per day, and the period's totals (the sum of its days)."""
    found = {
        row[0]: _totals(row, 1)
        for row in db.session.execute(
            select(UsageDay.day, *_SUMS).where(*where).group_by(UsageDay.day)
        )
    }
    rows = []
    day = since
    while day <= until:  # every day of the period, the quiet ones as zeros
        t = found.get(day) or Totals()
        rows.append([day.isoformat(), *t.cells(), _share(t)])
        day += timedelta(days=1)
    totals = Totals(*(sum(getattr(t, f) for t in found.values()) for f in _FIELDS))
    return Table(
        "daily",
        "Per day",
        ["Day", *TOTAL_COLUMNS, "Cache-read share"],
        rows,
        chart="bar",
        series=[2, 3, 4, 5],
        stacked=True,
    ), totals


def _share(t: Totals) -> str:
    return f"{(t.cache_share * 100).quantize(Decimal('0.1'))}%"


def _by_model(where: list[Any]) -> tuple[Table, list[Unpriced]]:
    """The table by model, and the models with replies of unknown cost (one query)."""
    # A day row counts a reply without usage as an unpriced reply with no tokens: the
    # replies with no usage are those the row's tokens do not account for.
    no_usage = func.sum(case((UsageDay.unpriced_tokens == 0, UsageDay.unpriced_replies), else_=0))
    found = db.session.execute(
        select(UsageDay.provider, UsageDay.model, *_SUMS, func.sum(UsageDay.unpriced_replies))
        .add_columns(no_usage)
        .where(*where)
        .group_by(UsageDay.provider, UsageDay.model)
        .order_by(UsageDay.provider, UsageDay.model)
    ).all()
    prices = price_table(spend_settings().prices_file)
    rows, unpriced = [], []
    for row in found:
        label = f"{row[0]} · {row[1]}" if row[0] else (row[1] or "(none)")
        totals = _totals(row, 2)
        rows.append([label, *totals.cells()])
        replies, none = int(row[-2] or 0), int(row[-1] or 0)
        if replies:
            priced = prices.get(row[0], row[1]) is not None
            unpriced.append(Unpriced(label, totals.unpriced_tokens, replies, none, priced))
    table = Table("models", "By model", ["Model", *TOTAL_COLUMNS], rows, series=[6])
    return table, unpriced


def _by_user(where: list[Any]) -> Table:
    found = db.session.execute(
        select(UsageDay.user_id, *_SUMS).where(*where).group_by(UsageDay.user_id)
    ).all()
    ids = {row[0] for row in found if row[0] != NO_USER}
    names = dict(db.session.execute(select(User.id, User.name).where(User.id.in_(ids))).all())
    rows = sorted(
        ([names.get(row[0], "(no one)"), *_totals(row, 1).cells()] for row in found),
        key=lambda r: (-r[6], r[0]),
    )
    return Table("users", "By member", ["Member", *TOTAL_COLUMNS], rows, series=[6])


def _midnight(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time())


def settled_before(today: date) -> date:
    """The first day whose calls may still change status: a proposal lives up to the
    approval TTL (expired by the hourly upkeep), so older days are kept as they are."""
    return today - timedelta(days=math.ceil(chat_settings().approval_ttl / 86400) + 2)


def _keep_days(org_id: int, since: date, until: date) -> None:
    """Count the calls of the settled days in ``[since, until)`` not kept yet, once (two
    instances at once: the second's rows are ignored)."""
    kept = set(
        db.session.scalars(
            select(ToolDay.day)
            .where(ToolDay.org_id == org_id, ToolDay.day >= since, ToolDay.day < until)
            .where(ToolDay.name == "")
            .distinct()
        )
    )
    missing = [since + timedelta(days=i) for i in range((until - since).days)]
    missing = [d for d in missing if d not in kept]
    if not missing:
        return
    dialect = db.session.get_bind().dialect.name
    day_of = (
        func.date(ToolCall.created_at) if dialect == "sqlite" else cast(ToolCall.created_at, Date)
    )
    found = db.session.execute(
        select(day_of, ToolCall.name, ToolCall.status, func.count())
        .where(
            ToolCall.org_id == org_id,
            ToolCall.created_at >= _midnight(missing[0]),
            ToolCall.created_at < _midnight(missing[-1] + timedelta(days=1)),
        )
        .group_by(day_of, ToolCall.name, ToolCall.status)
    ).all()
    wanted = set(missing)
    rows = [{"org_id": org_id, "day": d, "name": "", "status": "", "calls": 0} for d in missing]
    for day, name, status, n in found:
        day = day if isinstance(day, date) else date.fromisoformat(str(day))
        if day in wanted:
            rows.append(
                {"org_id": org_id, "day": day, "name": name, "status": str(status), "calls": n}
            )
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    db.session.execute(insert(ToolDay).on_conflict_do_nothing(), rows)
    db.session.commit()


def _tool_counts(principal: Principal, since: date, until: date, own: bool) -> list[Any]:
    """(tool, status, calls) of the period: kept days from ``usage_tool_days``, the recent
    ones (and a member's own) counted from the calls."""
    live_from = since
    counted: list[Any] = []
    if not own:
        live_from = max(since, min(settled_before(until), until + timedelta(days=1)))
        if live_from > since:
            _keep_days(principal.org_id, since, live_from)
            counted = list(
                db.session.execute(
                    select(ToolDay.name, ToolDay.status, func.sum(ToolDay.calls))
                    .where(
                        ToolDay.org_id == principal.org_id,
                        ToolDay.day >= since,
                        ToolDay.day < live_from,
                        ToolDay.name != "",
                    )
                    .group_by(ToolDay.name, ToolDay.status)
                )
            )
    query = (
        select(ToolCall.name, ToolCall.status, func.count())
        .where(ToolCall.org_id == principal.org_id, ToolCall.created_at >= _midnight(live_from))
        .group_by(ToolCall.name, ToolCall.status)
    )
    if own:
        query = query.join(Conversation, Conversation.id == ToolCall.conversation_id).where(
            Conversation.creator_id == principal.user_id
        )
    return counted + list(db.session.execute(query))


def _tools(principal: Principal, since: date, until: date, own: bool) -> Table:
    counts: dict[str, dict[str, int]] = {}
    statuses: set[str] = set()
    for name, status, n in _tool_counts(principal, since, until, own):
        by = counts.setdefault(name, {})
        by[str(status)] = by.get(str(status), 0) + int(n)
        statuses.add(str(status))
    order = sorted(statuses)
    rows = [[name, *(by.get(s, 0) for s in order)] for name, by in sorted(counts.items())]
    return Table(
        "tools",
        "Tool calls by tool and status",
        ["Tool", *order],
        rows,
        series=list(range(1, len(order) + 1)),
        stacked=True,
    )
