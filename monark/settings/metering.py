"""Metering the assistant's replies (``chat.host.Meter``, installed by the factory): each
reply's usage and exact cost stored on it, and counted in its day's row (``UsageDay``, one a
day per org, user and model) in the same transaction as the reply, so the usage page and
budgets read a few rows instead of every reply, and always agree with the stored replies.

A reply with a known cost adds it to ``cost``; one without (a model the price table does
not name, or a provider that reported no usage) adds its tokens to ``unpriced_tokens``.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.dialects import postgresql, sqlite

from monark.chat.host import Charge, count_tokens
from monark.chat.models import Message
from monark.core import metrics
from monark.core.models import utcnow
from monark.core.rbac import Principal
from monark.extensions import db
from monark.settings import budgets
from monark.settings.models import NO_USER, OrgDay, UsageDay
from monark.settings.prices import Price, cost_of

# The columns a reply adds to (the rest are its row's key).
SUMMED = (
    "replies",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost",
    "unpriced_tokens",
    "unpriced_replies",
)


def charge(reply: Charge) -> str | None:
    """Store a reply's usage and cost (unknown without a price or a reported usage), count
    it in its day's row, in the caller's transaction, and say why the spend now pauses the
    principal's assistant (``budgets.judged``), or None. ``reply.price`` and
    ``reply.budget``: what the resolver put in ``ResolvedAi`` (a ``Price``, or None:
    unknown; ``budgets.Limits``, or None: no check), the limits read once a turn."""
    message, principal, budget = reply.message, reply.principal, reply.budget
    count_tokens(message, reply.usage)
    message.cost = cost_of(reply.price if isinstance(reply.price, Price) else None, reply.usage)
    _count_for_operators(message)
    values = day_values(message, principal.user_id)
    # On the session's connection, in its transaction: the reply's own pending changes need
    # no flush first (the commit writes them), which keeps this to one statement a reply.
    connection = db.session.connection()
    dialect = connection.dialect.name
    if not isinstance(budget, budgets.Limits) or not budget.apply_to(principal.user_id):
        connection.execute(_upsert(dialect), values)
        return None
    today = budgets.current_day()
    # The month's settled days once a turn (kept on the turn's budget), the recent days'
    # rows after every reply: another instance's replies today count at once. The limits
    # are the turn's (its resolver read them with the org's AI settings): after a reply
    # only the spend they cap is read, in the statement that counts the reply.
    since, past = budgets.settled(budget, principal.org_id, today)
    params = budgets.check_params(principal, today, since) | values
    counted = budgets.Reply(
        values["day"], values["user_id"], budgets.Spent(values["cost"], values["unpriced_tokens"])
    )
    parts = (budget.caps_org, budget.caps_member(principal.user_id))
    sums = _spend_counted(connection, dialect, parts, params, counted, principal, today)
    return budgets.judged(principal, budget, sums, today, record=True, reply=counted, past=past)


def _spend_counted(
    connection: Any,
    dialect: str,
    parts: tuple[bool, bool],
    params: dict[str, Any],
    reply: budgets.Reply,
    principal: Principal,
    today: date,
) -> tuple[Any, ...]:
    """The reply's day row counted and, in the same statement, the spend ``parts`` names
    (the org's since ``since``, the member's today; None where not read), without the
    reply: ``budgets.judged``'s sums."""
    org, mine = parts
    nothing = (None, None)
    statement = _counted_spend(parts) if dialect == "postgresql" else _returning_spend(parts)
    found = tuple(connection.execute(statement, params).one())
    org_sums, found = (found[:2], found[2:]) if org else (nothing, found)
    if not mine:
        return (*org_sums, *nothing)
    if dialect != "postgresql":  # the member's other rows today and the reply's own
        found = _without_reply(found, reply, principal.user_id, today)
    return (*org_sums, *found)


def _count_for_operators(message: Message) -> None:
    """/metrics: the reply's tokens by kind and its cost (every stored reply, summaries too)."""
    provider, model = message.provider or "", message.model or ""
    kinds = {
        "input": message.input_tokens,
        "output": message.output_tokens,
        "cache_read": message.cache_read_tokens,
        "cache_write": message.cache_creation_tokens,
    }
    metrics.tokens(provider, model, kinds)
    metrics.cost(provider, model, message.cost)


class Metering:
    """The host's ``chat.host.Meter``: ``charge`` above."""

    def charge(self, reply: Charge) -> str | None:
        return charge(reply)


def day_values(message: Message, user_id: int | None) -> dict[str, Any]:
    """What one stored reply adds to its day's row, with the row's key."""
    tokens = (
        message.input_tokens
        + message.output_tokens
        + message.cache_read_tokens
        + message.cache_creation_tokens
    )
    cost = message.cost
    return {
        "org_id": message.org_id,
        "day": (message.created_at or utcnow()).date(),
        "user_id": user_id or NO_USER,
        "provider": (message.provider or "")[:40],
        "model": (message.model or "")[:80],
        "replies": 1,
        "input_tokens": message.input_tokens,
        "output_tokens": message.output_tokens,
        "cache_read_tokens": message.cache_read_tokens,
        "cache_write_tokens": message.cache_creation_tokens,
        "cost": cost if cost is not None else Decimal(0),
        "unpriced_tokens": 0 if cost is not None else tokens,
        "unpriced_replies": 0 if cost is not None else 1,
    }


_KEY = ["org_id", "day", "user_id", "provider", "model"]
_UPSERTS: dict[str, Any] = {}


def _upsert(dialect: str) -> Any:
    """The day row's ``INSERT … ON CONFLICT DO UPDATE`` (adding to it), built once per
    dialect: building it anew for every reply cost more than running it."""
    found = _UPSERTS.get(dialect)
    if found is None:
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        table = UsageDay.__table__
        statement = insert(table).values({name: bindparam(name) for name in [*_KEY, *SUMMED]})
        found = _UPSERTS[dialect] = statement.on_conflict_do_update(
            index_elements=_KEY,
            set_={name: table.c[name] + statement.excluded[name] for name in SUMMED},
        )
    return found


# The member's day rows; on SQLite not the reply's own row, whichever way SQLite lets a
# subquery of the upsert's ``RETURNING`` see it: that comes from the row the upsert returns.
_MINE = [
    UsageDay.org_id == bindparam("org"),
    UsageDay.day == bindparam("today"),
    UsageDay.user_id == bindparam("user"),
]
_OWN = (
    (UsageDay.day == bindparam("day"))
    & (UsageDay.provider == bindparam("provider"))
    & (UsageDay.model == bindparam("model"))
)


def _org_spend() -> list[Any]:
    return [
        _summed(OrgDay.cost, budgets.ORG_SINCE),
        _summed(OrgDay.unpriced_tokens, budgets.ORG_SINCE),
    ]


def _my_spend(where: list[Any]) -> list[Any]:
    return [_summed(UsageDay.cost, where), _summed(UsageDay.unpriced_tokens, where)]


def _returning_spend(parts: tuple[bool, bool]) -> Any:
    """SQLite's: the day row's upsert ``RETURNING`` the sums ``parts`` names: the org's
    since ``since`` (its day totals, which the triggers change only after the statement's
    ``RETURNING`` is computed: without the reply), the member's other day rows today (all
    but the reply's own) and the reply's own row as the upsert left it."""
    key = ("returning", *parts)
    found = _UPSERTS.get(key)
    if found is None:
        org, mine = parts
        columns = _org_spend() if org else []
        if mine:
            columns += [*_my_spend([*_MINE, ~_OWN]), UsageDay.cost, UsageDay.unpriced_tokens]
        found = _UPSERTS[key] = _upsert("sqlite").returning(*columns)
    return found


def _summed(column: Any, where: list[Any]) -> Any:
    return select(func.sum(column)).where(*where).scalar_subquery()


def _without_reply(
    returned: Any, reply: budgets.Reply, user_id: int | None, today: date
) -> tuple[Any, Any]:
    """The member's day without the reply (``budgets.judged`` adds it), from the sums of
    their other rows and the reply's own row that ``_returning_spend`` returned."""
    cost, tokens = (value or 0 for value in returned[:2])
    own_cost, own_tokens = returned[2:4]
    if reply.day == today and reply.user_id == user_id:  # the reply's row is the member's day's
        cost += own_cost - reply.spent.cost
        tokens += own_tokens - reply.spent.unpriced_tokens
    return cost, tokens


def _counted_spend(parts: tuple[bool, bool]) -> Any:
    """PostgreSQL's: the sums ``parts`` names, with the day row's upsert as the statement's
    ``WITH`` (PostgreSQL runs a data-modifying ``WITH`` once, on the statement's snapshot:
    the sums leave the reply out)."""
    key = ("counted", *parts)
    found = _UPSERTS.get(key)
    if found is None:
        org, mine = parts
        counted = _upsert("postgresql").returning(UsageDay.id).cte("counted")
        columns = [*(_org_spend() if org else []), *(_my_spend(_MINE) if mine else [])]
        found = _UPSERTS[key] = select(*columns).add_cte(counted)
    return found
