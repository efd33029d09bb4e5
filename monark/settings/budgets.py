"""Budgets that close the assistant's gate: per org a monthly budget (US dollars, and
tokens of models without a price), per member an optional daily cap in each; unset, the
deployment's defaults (``BUDGET_*``), never above its ceilings.

What was spent is read from the day rows in the database (the org's day totals,
``settings.models.OrgDay``, which the database keeps from ``UsageDay``'s, and a member's own
day rows), so every instance sees the same spend. A turn reads the budget and the month's
settled days once (``settled``: days no reply adds to any more) and, after each reply, only
the recent days' totals, which other instances' replies still add to (a budget changed
meanwhile holds from the next turn, and for the gate at once). At 80% admins see a banner;
at 100% the org's assistant pauses (``spend_check``, installed in the chat runtime: the gate
says why and who can lift it, and a running turn ends after its step). A new month (UTC)
starts fresh. Each change is audited, and so is each crossing of 80% and 100%, once per
period.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, NamedTuple

from sqlalchemy import bindparam, func, select, true, update
from sqlalchemy.dialects import postgresql, sqlite

from monark.core.errors import Forbidden, ValidationFailed
from monark.core.events import record_event
from monark.core.models import Event, Membership, Org, User, utcnow
from monark.core.money import exact, money_text, plain_text
from monark.core.rbac import Principal
from monark.core.settings import SPEND_MAX, spend_settings
from monark.extensions import db
from monark.settings import notices
from monark.settings.models import OrgBudget, OrgDay, UsageDay

WARN_AT = Decimal("0.8")
FIELDS = {
    "monthly_cost": "Monthly budget (US dollars)",
    "monthly_tokens": "Monthly tokens of models without a price",
    "user_daily_cost": "Daily cap per member (US dollars)",
    "user_daily_tokens": "Daily tokens per member (models without a price)",
}
_COST_FIELDS = ("monthly_cost", "user_daily_cost")


@dataclass(frozen=True)
class Limits:
    """The budget in force (None: no limit of that kind)."""

    monthly_cost: Decimal | None
    monthly_tokens: int | None
    user_daily_cost: Decimal | None
    user_daily_tokens: int | None
    # The month's settled spend (``settled``), read once by the turn these limits were
    # resolved for (the resolver reads them anew each turn), by the day it was read on.
    past: dict[date, Spent] = field(default_factory=dict, compare=False, repr=False)

    @property
    def caps_org(self) -> bool:
        """Whether the org's month is capped (in cost or tokens)."""
        return self.monthly_cost is not None or self.monthly_tokens is not None

    def caps_member(self, user_id: int | None) -> bool:
        """Whether a principal's own day is capped (a member's daily caps need a member)."""
        user = self.user_daily_cost is not None or self.user_daily_tokens is not None
        return user and user_id is not None

    def apply_to(self, user_id: int | None) -> bool:
        """Whether any limit caps a principal's spend."""
        return self.caps_org or self.caps_member(user_id)


@dataclass(frozen=True)
class Spent:
    """What was spent: its cost, and the tokens of models without a price."""

    cost: Decimal
    unpriced_tokens: int

    def __add__(self, other: Spent) -> Spent:
        return Spent(self.cost + other.cost, self.unpriced_tokens + other.unpriced_tokens)


@dataclass(frozen=True)
class Reply:
    """A reply's spend, counted by the statement that reads the spend (which sees the
    spend as it was before it, so the check adds it)."""

    day: date
    user_id: int
    spent: Spent


@dataclass(frozen=True)
class Status:
    """An org's month: the budget, what was spent, the share of it used (the higher of
    cost and tokens), and the period."""

    limits: Limits
    spent: Spent
    share: Decimal  # 0 with no budget
    period: str  # "2026-12"
    renews: date

    @property
    def warn(self) -> bool:
        return self.share >= WARN_AT

    @property
    def paused(self) -> bool:
        return self.share >= 1

    @property
    def percent(self) -> int:
        return int(self.share * 100)

    def spent_text(self) -> str:
        """What was spent of what, as people read it."""
        parts = []
        if self.limits.monthly_cost is not None:
            parts.append(f"{money_text(self.spent.cost)} of {money_text(self.limits.monthly_cost)}")
        if self.limits.monthly_tokens is not None:
            parts.append(
                f"{self.spent.unpriced_tokens:,} of {self.limits.monthly_tokens:,} tokens "
                "of models without a price"
            )
        return "; ".join(parts)


NOTHING = Spent(Decimal(0), 0)


def current_day() -> date:
    """The day (UTC) spend is counted on now: budgets' one clock (tests move it)."""
    return utcnow().date()


@lru_cache(maxsize=16)  # after every reply of a budgeted org, on one or two days
def _period(day: date) -> tuple[date, str, date]:
    start = day.replace(day=1)
    renews = (start + timedelta(days=32)).replace(day=1)
    return start, start.strftime("%Y-%m"), renews


def _row(org_id: int) -> OrgBudget | None:
    return db.session.scalar(select(OrgBudget).where(OrgBudget.org_id == org_id))


def _capped(value: Any, ceiling: Decimal | None) -> Any:
    """``value`` kept at or under the deployment's ceiling (a ceiling alone is the limit)."""
    if ceiling is None:
        return value
    return ceiling if value is None else min(value, ceiling)


def limits_of(row: Any) -> Limits:
    """The org's own budget over the deployment's defaults, within its ceilings."""
    spend = spend_settings()

    def own(name: str, default: Decimal | None) -> Any:
        value = getattr(row, name, None) if row is not None else None
        return value if value is not None else default

    tokens = _capped(own("monthly_tokens", spend.monthly_tokens), spend.tokens_ceiling)
    user_tokens = own("user_daily_tokens", spend.user_daily_tokens)
    return Limits(
        monthly_cost=_capped(own("monthly_cost", spend.monthly_cost), spend.cost_ceiling),
        monthly_tokens=int(tokens) if tokens is not None else None,
        user_daily_cost=own("user_daily_cost", spend.user_daily_cost),
        user_daily_tokens=int(user_tokens) if user_tokens is not None else None,
    )


def _spent(where: list[Any]) -> Spent:
    cost, tokens = db.session.execute(
        select(func.sum(OrgDay.cost), func.sum(OrgDay.unpriced_tokens)).where(*where)
    ).one()
    return Spent(cost if cost is not None else Decimal(0), int(tokens or 0))


def recent_since(day: date) -> date:
    """The first day of ``day``'s month whose rows may still change: yesterday's too, as a
    reply counts on the day it was opened and one opened before midnight is charged after."""
    return max(_period(day)[0], day - timedelta(days=1))


SETTLED = (
    select(func.sum(OrgDay.cost), func.sum(OrgDay.unpriced_tokens))
    .where(OrgDay.org_id == bindparam("org"))
    .where(OrgDay.day >= bindparam("start"), OrgDay.day < bindparam("since"))
)


def settled(budget: object, org_id: int, day: date) -> tuple[date, Spent]:
    """From which day ``CHECK`` must read an org's rows on ``day``, and what its month spent
    before that: with the turn's budget (``Limits``) the settled days are read once a turn
    (and once more if the turn runs into another day); without, ``CHECK`` reads the month."""
    start = _period(day)[0]
    if not isinstance(budget, Limits):
        return start, NOTHING
    since = recent_since(day)
    found = budget.past.get(day)
    if found is None:
        found = NOTHING
        if since > start:
            params = {"org": org_id, "start": start, "since": since}
            cost, tokens = db.session.connection().execute(SETTLED, params).one()
            found = Spent(cost if cost is not None else Decimal(0), int(tokens or 0))
        budget.past.clear()  # a turn counts on one day at a time
        budget.past[day] = found
    return since, found


def _share(spent: Spent, cost: Decimal | None, tokens: int | None) -> Decimal:
    shares = [Decimal(0)]
    if cost is not None:
        shares.append(spent.cost / cost if cost > 0 else Decimal(1))
    if tokens is not None:
        shares.append(Decimal(spent.unpriced_tokens) / tokens if tokens > 0 else Decimal(1))
    return max(shares)


def status(org_id: int, today: date | None = None) -> Status:
    """The org's month so far against its budget."""
    start, period, renews = _period(today or current_day())
    limits = limits_of(_row(org_id))
    if limits.monthly_cost is None and limits.monthly_tokens is None:
        return Status(limits, Spent(Decimal(0), 0), Decimal(0), period, renews)
    spent = _spent([OrgDay.org_id == org_id, OrgDay.day >= start])
    return Status(
        limits, spent, _share(spent, limits.monthly_cost, limits.monthly_tokens), period, renews
    )


def _unless(principal: Principal, what: str) -> str:
    """How the pause ends early: the reader raises it themselves when they may, or else
    who may."""
    if principal.can("org.manage"):
        return f"unless you raise the {what} in Settings → Usage"
    return f"unless {_lifters(principal.org_id)} raises the {what} in Settings → Usage"


def _lifters(org_id: int) -> str:
    """Who can lift a pause: the org's admins and owners, by name (a few)."""
    names = db.session.scalars(
        select(User.name)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.org_id == org_id, Membership.role.in_(("owner", "admin")))
        .order_by(User.name)
        .limit(4)
    ).all()
    shown = ", ".join(names[:3]) + (" and others" if len(names) > 3 else "")
    return f"an admin ({shown})" if shown else "an admin"


def _ensure_row(org_id: int) -> None:
    """The org's budget row, made if missing (its trips are marked on it)."""
    dialect = db.session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    values = {"org_id": org_id, "updated_at": utcnow()}
    db.session.execute(insert(OrgBudget).values(**values).on_conflict_do_nothing())


def _mark(principal: Principal, column: str, state: Status, kind: str) -> None:
    """Audit one crossing once per period, across instances: a conditional update wins."""
    _ensure_row(principal.org_id)
    column_of = getattr(OrgBudget, column)
    won = db.session.execute(
        update(OrgBudget)
        .where(OrgBudget.org_id == principal.org_id)
        .where((column_of.is_(None)) | (column_of != state.period))
        .values({column: state.period})
        .execution_options(synchronize_session=False)
    ).rowcount
    if won:
        notices.budget_reached(principal.org_id, 100 if kind == "tripped" else 80, state.period)
        record_event(
            principal,
            f"budget.{kind}",
            "org",
            principal.org_id,
            {"period": state.period, "percent": state.percent},
        )


def _user_trip_recorded(principal: Principal, today: date) -> bool:
    since = datetime.combine(today, datetime.min.time())
    return (
        db.session.scalar(
            select(Event.id)
            .where(
                Event.org_id == principal.org_id,
                Event.type == "budget.user_capped",
                Event.subject_id == principal.user_id,
                Event.created_at >= since,
            )
            .limit(1)
        )
        is not None
    )


# The org's budget row, its sums since ``since`` (its day totals, ``OrgDay``: a row a day;
# the month's recent days, ``settled`` having the rest, or the whole month) and the
# member's day's (their few day rows), in one statement, built once: the gate's check and
# the loop's as a turn starts. After each reply ``settings.metering`` reads the same sums
# (not the budget: the turn's limits) in the statement that counts the reply. The sums in
# derived tables of one row (an aggregate with no GROUP BY), joined to the org's.
ORG_SINCE = [OrgDay.org_id == bindparam("org"), OrgDay.day >= bindparam("since")]
_ORG_SUMS = (
    select(
        func.sum(OrgDay.cost).label("cost"),
        func.sum(OrgDay.unpriced_tokens).label("tokens"),
    )
    .where(*ORG_SINCE)
    .subquery("spent")
)
_MY_SUMS = (
    select(
        func.sum(UsageDay.cost).label("cost"),
        func.sum(UsageDay.unpriced_tokens).label("tokens"),
    )
    .where(
        UsageDay.org_id == bindparam("org"),
        UsageDay.day == bindparam("today"),
        UsageDay.user_id == bindparam("user"),
    )
    .subquery("mine")
)
LIMIT_NAMES = ("monthly_cost", "monthly_tokens", "user_daily_cost", "user_daily_tokens")
CHECK = (
    select(
        *(getattr(OrgBudget, name) for name in LIMIT_NAMES),
        _ORG_SUMS.c.cost,
        _ORG_SUMS.c.tokens,
        _MY_SUMS.c.cost,
        _MY_SUMS.c.tokens,
    )
    .select_from(Org)
    .outerjoin(OrgBudget, OrgBudget.org_id == Org.id)
    .join(_ORG_SUMS, true())
    .join(_MY_SUMS, true())
    .where(Org.id == bindparam("org"))
)


class Sums(NamedTuple):
    """``CHECK``'s row: the org's budget, its spend since ``since`` and the member's today."""

    monthly_cost: Decimal | None
    monthly_tokens: int | None
    user_daily_cost: Decimal | None
    user_daily_tokens: int | None
    cost: Decimal | None
    tokens: int | None
    my_cost: Decimal | None
    my_tokens: int | None


def check_params(principal: Principal, today: date, since: date) -> dict[str, Any]:
    """``CHECK``'s parameters for a principal's spend on ``today``, the org's from ``since``."""
    return {
        "org": principal.org_id,
        "since": since,
        "user": principal.user_id or -1,
        "today": today,
    }


def capped(budget: object, principal: Principal) -> bool:
    """Whether a budget the resolver read (``ResolvedAi.budget``) caps the principal's
    spend; a budget not read yet (None) might."""
    return not isinstance(budget, Limits) or budget.apply_to(principal.user_id)


def spend_check(principal: Principal, budget: object = None, record: bool = False) -> str | None:
    """Why the principal's assistant is paused by spend now, or None (the gate's check,
    and the loop's before a turn's first step).

    ``budget``: the org's, as the turn's resolver read it: with no limit at all the spend is
    not read. ``record``: crossing 80% or 100% this period is audited now (once, whichever
    instance wins)."""
    if not capped(budget, principal):
        return None
    day = current_day()
    since, past = settled(budget, principal.org_id, day)
    row = db.session.connection().execute(CHECK, check_params(principal, day, since)).first()
    if row is None:
        return None  # no such org
    return judged(principal, limits_of(row), row[4:], day, record, past=past)


def judged(
    principal: Principal,
    limits: Limits,
    sums: Any,
    today: date,
    record: bool,
    reply: Reply | None = None,
    past: Spent = NOTHING,
) -> str | None:
    """The verdict under ``limits`` on ``sums``: the org's spend since ``settled``'s day and
    the member's today (cost and tokens of each, None: nothing), without ``reply`` and the
    month's ``past`` spend, which are added here."""
    if not limits.apply_to(principal.user_id):
        return None
    start = _period(today)[0]
    cost, tokens, my_cost, my_tokens = (value or 0 for value in sums)
    spent = Spent(Decimal(cost), int(tokens)) + past
    day = Spent(Decimal(my_cost), int(my_tokens))
    if reply is not None and reply.day >= start:
        spent += reply.spent
        if reply.day == today and reply.user_id == principal.user_id:
            day += reply.spent
    share = _share(spent, limits.monthly_cost, limits.monthly_tokens)
    if share >= WARN_AT:  # the status (and its period) is drawn only near the budget
        paused = _month_verdict(
            principal, Status(limits, spent, share, *_period(today)[1:]), record
        )
        if paused:
            return paused
    if principal.user_id is None:
        return None
    if _share(day, limits.user_daily_cost, limits.user_daily_tokens) < 1:
        return None
    if record and not _user_trip_recorded(principal, today):
        record_event(
            principal, "budget.user_capped", "user", principal.user_id, {"day": str(today)}
        )
    return (
        "You reached your daily cap on the assistant. It is paused for you until tomorrow "
        f"(UTC), {_unless(principal, 'cap')}."
    )


def _month_verdict(principal: Principal, state: Status, record: bool) -> str | None:
    """Why the org's month pauses the assistant (crossings audited with ``record``), or None."""
    if record and state.warn:
        _mark(principal, "warned_period", state, "warned")
    if not state.paused:
        return None
    if record:
        _mark(principal, "tripped_period", state, "tripped")
    org = db.session.get(Org, principal.org_id)
    return (
        f"{org.name if org else 'This organization'}'s monthly budget for the assistant is "
        f"used up ({state.spent_text()}). It is paused until {state.renews.isoformat()}, "
        f"{_unless(principal, 'budget')}."
    )


def banner(principal: Principal) -> Status | None:
    """For admins, the month's status once it reaches 80% of the budget."""
    if not principal.can("org.manage"):
        return None
    state = status(principal.org_id)
    return state if state.warn else None


# ---- the admins' form ----------------------------------------------------------------------


def parse_limit(raw: str | None, name: str) -> Decimal | int | None:
    """One field of the form: blank (the deployment's default), or a number above 0 and at
    most the ceiling; an error names the field."""
    label = FIELDS[name]
    text = (raw or "").strip()
    if not text:
        return None
    # Digits as typed on a keyboard, thousands set apart by commas or not at all: no
    # exponent, underscore or other script's digits (Decimal takes them all, so "1,0,0"
    # would be 100 and "1E+5" a budget nobody typed).
    if not _NUMBER.fullmatch(text):
        raise _invalid(name, f"{label}: '{raw}' is not a number.")
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        raise _invalid(name, f"{label}: '{raw}' is not a number.") from None
    if not value.is_finite() or value <= 0:
        raise _invalid(name, f"{label}: must be above 0 (leave it empty for no limit).")
    if value > SPEND_MAX:
        raise _invalid(name, f"{label}: {value:,} is not a budget.")
    spend = spend_settings()
    ceiling = {"monthly_cost": spend.cost_ceiling, "monthly_tokens": spend.tokens_ceiling}.get(name)
    if ceiling is not None and value > ceiling:
        raise _invalid(name, f"{label}: at most {ceiling:,} on this server.")
    if name in _COST_FIELDS:
        if value != exact(value):
            raise _invalid(name, f"{label}: too many decimal places.")
        return value
    if value != int(value):
        raise _invalid(name, f"{label}: a whole number of tokens.")
    return int(value)


_NUMBER = re.compile(r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|-?\.[0-9]+")


def _invalid(name: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, [{"field": name, "message": message}])


def set_budget(principal: Principal, form: dict[str, str]) -> list[str]:
    """Store the org's budget from the form (all fields checked before any is written);
    the changed field names, audited."""
    if not principal.can("org.manage"):
        raise Forbidden("Only admins set the organization's budget.")
    values: dict[str, Decimal | int | None] = {}
    problems: list[dict[str, Any]] = []
    for name in FIELDS:  # every field's error at once, not the first one's alone
        try:
            values[name] = parse_limit(form.get(name), name)
        except ValidationFailed as err:
            problems += err.details
    if problems:
        raise ValidationFailed(" ".join(str(p["message"]) for p in problems), problems)
    _ensure_row(principal.org_id)
    row = _row(principal.org_id)
    assert row is not None
    changed = [name for name, value in values.items() if getattr(row, name) != value]
    for name in changed:
        setattr(row, name, values[name])
    if changed:
        row.updated_by_id = principal.user_id
        record_event(principal, "budget.updated", "org", principal.org_id, {"fields": changed})
        db.session.flush()
        _judge_anew(principal, row)
    db.session.commit()
    return changed


def _judge_anew(principal: Principal, row: OrgBudget) -> None:
    """The month judged under a changed budget: a line it is back under may be crossed,
    and audited, again this month; a line it is over now (a budget lowered below the
    spend) is crossed by this change, audited and told once, as a reply's crossing is."""
    state = status(principal.org_id)
    if not state.warn:
        row.warned_period = None
    if not state.paused:
        row.tripped_period = None
    db.session.flush()
    _month_verdict(principal, state, record=True)


def form_values(principal: Principal) -> dict[str, str]:
    """The admins' form filled from the org's own row: each limit as typed (``0.0000001``,
    never ``1.000E-7``), empty where it is unset."""
    row = _row(principal.org_id)
    values = {}
    for name in FIELDS:
        value = getattr(row, name) if row is not None else None
        if isinstance(value, Decimal):
            values[name] = plain_text(value)
        else:
            values[name] = "" if value is None else str(value)
    return values
