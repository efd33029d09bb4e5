"""Spend at scale: the usage page over 1,000,000 stored replies, and what accounting adds
to a model step.

1. The usage page. An org with 50 members talking to 3 models over 90 days has N stored
   replies (1,000,000 by default; ``--replies``) and a tool call for every fourth one. The
   day rows (``chat_usage_days``) are built from the stored replies once, by one
   ``INSERT … SELECT … GROUP BY`` (the app adds to them reply by reply, in each reply's own
   transaction); the bench checks that their totals equal the replies' own sums, then times
   ``settings.usage.report`` for 30 and 90 days and the whole page (``GET /settings/usage``
   through the test client, rendering included), and, for comparison, the same totals
   summed straight from ``chat_messages`` (what the page does not do). Tool calls of days
   past the approval TTL are counted once into ``usage_tool_days`` by the first report (its
   time is printed); later ones count only the recent days' calls. Target: the page under
   300 ms (median).

2. Accounting per model step, side by side: storing a reply's usage as the loop does
   (``settings.metering.charge``: the cost from the price table, exact, the upsert of its day
   row and the budget check after it, with a monthly budget and a member's daily cap set, so
   it reads the org's recent days' totals (``usage_org_days``, a row a day, which the
   database's triggers keep from the day rows) and the member's day rows, in one statement
   with the upsert; the month's settled days are read once a turn, by the spend check as
   it starts, so the budget is resolved and checked anew every ``TURN`` steps, outside the
   timing, as a turn's setup does),
   and the same for an org with no budget (the turn's resolver read none, so nothing is
   checked), against storing only its four token counts (accounting off), each followed by
   the commit the loop makes, in short alternating blocks. The steps run on the month's last
   day (budgets' clock moved there, the reply dated then) with a day row for every member
   and model on each day of the month still to come, so the month holds its most rows
   (members by models by days): the case a check reading every row after each reply made
   slow.
   Target: the median difference under 1 ms, both ways.

    .venv/bin/python bench/usage_bench.py [--replies 1000000] [--database-url postgresql+psycopg://...]

``--database-url`` names a THROWAWAY database (its tables are dropped); by default a
temporary SQLite file.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock_time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _measure import QueryLog, add_database_argument, throwaway_database, verdict
from flask import Flask
from sqlalchemy import func, insert, select, text

from monark import create_app
from monark.chat import store
from monark.chat.host import Charge, count_tokens
from monark.chat.llm.types import UsageReport
from monark.chat.models import Conversation, Message, ToolCall
from monark.core.auth import hash_password
from monark.core.models import Membership, Org, User
from monark.core.rbac import Principal
from monark.extensions import db
from monark.settings import budgets, usage
from monark.settings.ai_provider import resolve
from monark.settings.budgets import Limits
from monark.settings.metering import charge
from monark.settings.models import UsageDay
from monark.settings.prices import cost_of, price_table

USERS = 50
MODELS = (
    ("anthropic", "claude-sonnet-4-5"),
    ("anthropic", "claude-haiku-4-5"),
    ("openai", "gpt-unpriced"),  # no price: its replies' cost is unknown
)
DAYS = 90
NO_BUDGET = Limits(None, None, None, None)
TURN = 10  # steps a turn (its first reads the month's settled days)
BLOCK = 5  # steps in a row in one mode
BATCH = 20_000
TOOLS = ("records_list", "records_query", "records_update", "wiki_read")
STATUSES = ("SUCCEEDED", "SUCCEEDED", "SUCCEEDED", "FAILED", "REJECTED")


def build_app(url: str) -> Flask:
    return create_app({"SQLALCHEMY_DATABASE_URI": url, "SECRET_KEY": "bench"})


def seed_org() -> tuple[Principal, list[int], list[int]]:
    org = Org(name="Bench", slug="bench")
    db.session.add(org)
    users = [
        User(email=f"u{i}@bench.test", name=f"User {i}", password_hash=hash_password("x" * 12))
        for i in range(USERS)
    ]
    db.session.add_all(users)
    db.session.flush()
    for i, user in enumerate(users):
        db.session.add(
            Membership(user_id=user.id, org_id=org.id, role="owner" if i == 0 else "member")
        )
    conversations = [Conversation(org_id=org.id, title=f"c{u.id}", creator_id=u.id) for u in users]
    db.session.add_all(conversations)
    db.session.commit()
    owner = Principal.for_user(users[0].id, org.id, "owner")
    return owner, [u.id for u in users], [c.id for c in conversations]


def seed_replies(org_id: int, conversations: list[int], total: int) -> None:
    """``total`` assistant replies (and a tool call per fourth), spread over ``DAYS`` days."""
    rng = random.Random(7)
    table = price_table()
    now = datetime.now(UTC).replace(tzinfo=None)
    seqs = dict.fromkeys(conversations, 0)
    done = 0
    while done < total:
        rows, calls = [], []
        for _ in range(min(BATCH, total - done)):
            conversation = rng.choice(conversations)
            seqs[conversation] += 1
            provider, model = rng.choice(MODELS)
            usage_ = UsageReport(
                rng.randint(50, 500),
                rng.randint(10, 800),
                rng.randint(0, 3000),
                rng.randint(0, 200),
            )
            price = table.get(provider, model)
            rows.append(
                {
                    "org_id": org_id,
                    "conversation_id": conversation,
                    "seq": seqs[conversation],
                    "author_kind": "agent",
                    "role": "assistant",
                    "text": "ok",
                    "content": [],
                    "status": "complete",
                    "provider": provider,
                    "model": model,
                    "input_tokens": usage_.input_tokens,
                    "output_tokens": usage_.output_tokens,
                    "cache_read_tokens": usage_.cache_read_tokens,
                    "cache_creation_tokens": usage_.cache_creation_tokens,
                    "cost": cost_of(price, usage_),
                    "created_at": now - timedelta(seconds=rng.randint(0, (DAYS - 1) * 86400)),
                }
            )
        db.session.execute(insert(Message), rows)
        db.session.commit()
        done += len(rows)
    # A tool call for every fourth reply, on it.
    ids = db.session.execute(
        select(Message.id, Message.conversation_id, Message.created_at).where(Message.id % 4 == 0)
    ).all()
    for start in range(0, len(ids), BATCH):
        calls = [
            {
                "org_id": org_id,
                "conversation_id": c,
                "message_id": m,
                "position": 0,
                "provider_call_id": f"call_{m}",
                "name": rng.choice(TOOLS),
                "input": {},
                "mutates": False,
                "status": rng.choice(STATUSES),
                "created_at": at,
            }
            for m, c, at in ids[start : start + BATCH]
        ]
        db.session.execute(insert(ToolCall), calls)
        db.session.commit()


def build_day_rows() -> None:
    """The day rows of the stored replies, as the app's reply-by-reply upserts leave them."""
    dialect = db.session.get_bind().dialect.name
    day = "date(m.created_at)" if dialect == "sqlite" else "CAST(m.created_at AS DATE)"
    tokens = "m.input_tokens + m.output_tokens + m.cache_read_tokens + m.cache_creation_tokens"
    db.session.execute(
        text(
            f"""
            INSERT INTO chat_usage_days (org_id, day, user_id, provider, model, replies,
                input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost,
                unpriced_tokens, unpriced_replies)
            SELECT m.org_id, {day}, c.creator_id, m.provider, m.model, COUNT(*),
                SUM(m.input_tokens), SUM(m.output_tokens), SUM(m.cache_read_tokens),
                SUM(m.cache_creation_tokens), COALESCE(SUM(m.cost), 0),
                SUM(CASE WHEN m.cost IS NULL THEN {tokens} ELSE 0 END),
                SUM(CASE WHEN m.cost IS NULL THEN 1 ELSE 0 END)
            FROM chat_messages m JOIN chat_conversations c ON c.id = m.conversation_id
            GROUP BY m.org_id, {day}, c.creator_id, m.provider, m.model
            """
        )
    )
    db.session.commit()
    if dialect == "sqlite":
        db.session.execute(text("ANALYZE"))
    else:
        db.session.execute(text("ANALYZE chat_usage_days"))
        db.session.execute(text("ANALYZE chat_tool_calls"))
    db.session.commit()


def fill_month(org_id: int, users: list[int]) -> date:
    """A day row for each member and model on each of the month's days still to come (the
    seeded replies end today); the month's last day."""
    today = datetime.now(UTC).date()
    last = (today.replace(day=1) + timedelta(days=32)).replace(day=1) - timedelta(days=1)
    rows = [
        {
            "org_id": org_id,
            "day": today + timedelta(days=n),
            "user_id": user,
            "provider": provider,
            "model": model,
            "replies": 3,
            "input_tokens": 900,
            "output_tokens": 300,
            "cost": Decimal("0.012"),
        }
        for n in range(1, (last - today).days + 1)
        for user in users
        for provider, model in MODELS
    ]
    if rows:
        db.session.execute(insert(UsageDay), rows)
    db.session.commit()
    db.session.execute(
        text(
            "ANALYZE"
            if db.session.get_bind().dialect.name == "sqlite"
            else "ANALYZE chat_usage_days"
        )
    )
    db.session.commit()
    return last


def timed(fn, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def row(name: str, times: list[float]) -> tuple[str, float, float]:
    ordered = sorted(times)
    return (
        name,
        statistics.median(times),
        ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
    )


def bench_page(app: Flask, total: int, runs: int) -> tuple[list[tuple[str, float, float]], bool]:
    with app.app_context():
        owner, _users, conversations = seed_org()
        t0 = time.perf_counter()
        seed_replies(owner.org_id, conversations, total)
        build_day_rows()
        print(f"seeded {total:,} replies in {time.perf_counter() - t0:.1f} s")
        day_rows = db.session.scalar(select(func.count()).select_from(UsageDay))
        calls = db.session.scalar(select(func.count()).select_from(ToolCall))
        print(f"  {day_rows:,} day rows, {calls:,} tool calls")
        stored = db.session.execute(
            select(func.count(), func.sum(Message.output_tokens), func.sum(Message.cost))
        ).one()
        t0 = time.perf_counter()
        report = usage.report(owner, 90)  # the first keeps the settled days' tool calls
        first_ms = (time.perf_counter() - t0) * 1000
        print(f"  the first report (keeping settled days' tool calls once): {first_ms:.0f} ms")
        same = (report.totals.replies, report.totals.output_tokens, report.totals.cost) == (
            stored[0],
            stored[1],
            stored[2],
        )
        print(f"  day rows equal the replies' sums: {same} (cost {report.totals.cost})")
        results = [
            row("report(), 30 days", timed(lambda: usage.report(owner, 30), runs)),
            row("report(), 90 days", timed(lambda: usage.report(owner, 90), runs)),
            row(
                "for comparison: SUM over chat_messages",
                timed(
                    lambda: db.session.execute(
                        select(
                            Message.model, func.sum(Message.output_tokens), func.sum(Message.cost)
                        )
                        .where(Message.org_id == owner.org_id)
                        .group_by(Message.model)
                    ).all(),
                    max(3, runs // 5),
                ),
            ),
        ]
    client = app.test_client()
    app.config["WTF_CSRF_ENABLED"] = False  # the bench signs in with a plain form post
    client.post("/login", data={"email": "u0@bench.test", "password": "x" * 12})
    page = client.get("/settings/usage?days=90")
    if page.status_code != 200:
        print(f"  the page answered {page.status_code}: sign-in in the bench needs a look")
    else:
        results.append(
            row(
                "GET /settings/usage?days=90 (whole page)",
                timed(lambda: client.get("/settings/usage?days=90"), runs),
            )
        )
        results.append(
            row(
                "GET /settings/usage.csv (daily)",
                timed(lambda: client.get("/settings/usage.csv?days=90"), runs),
            )
        )
    return results, same


def bench_accounting(
    app: Flask, steps: int, log: QueryLog
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Per step: the meter as the loop runs it + commit (on), with the org's budget set and
    without one, against the token counts + commit (off), in alternating blocks; and the
    SQL statements of one step in each mode (the commit's own included)."""
    price = price_table().get("anthropic", "claude-sonnet-4-5")
    modes = ("off", "on, budget set", "on, no budget")
    times: dict[str, list[float]] = {m: [] for m in modes}
    times |= {f"{m}, before commit": [] for m in modes}
    with app.app_context():
        conversation = db.session.scalars(select(Conversation)).first()
        users = list(db.session.scalars(select(Membership.user_id)))
        last = fill_month(conversation.org_id, users)
        month = db.session.scalar(
            select(func.count()).where(UsageDay.day >= last.replace(day=1)).select_from(UsageDay)
        )
        print(f"accounting on {last} (budgets' clock), the month's day rows: {month:,}")
        budgets.current_day = lambda: last  # the bench's clock: the month's last day
        message = Message(
            created_at=datetime.combine(last, clock_time(12)),
            org_id=conversation.org_id,
            conversation_id=conversation.id,
            seq=10**9,
            author_kind="agent",
            role="assistant",
            provider="anthropic",
            model="claude-sonnet-4-5",
        )
        db.session.add(message)
        db.session.commit()
        member = Principal.for_user(conversation.creator_id, conversation.org_id, "owner")
        # Budgets far above the spend: the check reads both sums and lets the turn go on.
        budgets.set_budget(member, {"monthly_cost": "1000000", "user_daily_cost": "100000"})
        # What the turn's resolver read (once a turn): the org's budget, or none.
        budget = {"on, budget set": resolve(member.org_id).budget, "on, no budget": NO_BUDGET}

        def step(mode: str, usage_: UsageReport) -> float:
            """One step's accounting in ``mode``; the ms before the commit."""
            t0 = time.perf_counter()
            if mode == "off":
                count_tokens(message, usage_)
            elif charge(Charge(message, usage_, member, price, budget[mode])):
                raise SystemExit("the budget paused the bench")
            return (time.perf_counter() - t0) * 1000

        # Short blocks, the modes' order rotating: a busy machine's slow spells fall on
        # every mode alike.
        turn_steps = 0
        for block in range(steps // BLOCK):
            for mode in modes[block % 3 :] + modes[: block % 3]:
                for i in range(BLOCK):
                    if mode == "on, budget set":
                        if turn_steps % TURN == 0:  # a new turn, set up as the loop's is:
                            # the resolver reads the budget, the spend check as it starts
                            # reads the month's settled days (kept on the turn's budget).
                            budget[mode] = resolve(member.org_id).budget
                            if budgets.spend_check(member, budget[mode]):
                                raise SystemExit("the budget paused the bench")
                            # Before a turn's replies exist: the reply stays loaded, as
                            # each step's own reply is in the loop.
                            store.end_transaction(message)
                        turn_steps += 1
                    t0 = time.perf_counter()
                    before_commit = step(mode, UsageReport(120 + i, 40 + block % 500, 900, 30))
                    store.end_transaction(message)  # the loop's commit, the reply kept loaded
                    times[mode].append((time.perf_counter() - t0) * 1000)
                    times[f"{mode}, before commit"].append(before_commit)
        statements = {}
        for i, mode in enumerate(modes):
            with log.capture():
                step(mode, UsageReport(7 + i, 7, 7, 7))
                store.end_transaction(message)
            statements[mode] = log.count
    return times, statements


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_database_argument(parser)
    parser.add_argument("--replies", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args(argv)
    with throwaway_database(args.database_url, build_app) as (app, log):
        results, same = bench_page(app, args.replies, args.runs)
        steps, statements = bench_accounting(app, args.steps, log)
    print()
    print(f"{'case':<46} {'median ms':>10} {'p95 ms':>10}")
    for name, median, p95 in results:
        print(f"{name:<46} {median:>10.2f} {p95:>10.2f}")
    print()
    print(f"{'per model step (store + commit)':<46} {'median ms':>10} {'p95 ms':>10} statements")
    for mode in steps:
        name, median, p95 = row(f"accounting {mode}", steps[mode])
        count = f"{statements[mode]:>11}" if mode in statements else ""
        print(f"{name:<46} {median:>10.3f} {p95:>10.3f}{count}")
    added = {}
    for mode in ("on, budget set", "on, no budget"):
        with_commit = statistics.median(steps[mode]) - statistics.median(steps["off"])
        alone = statistics.median(steps[f"{mode}, before commit"]) - statistics.median(
            steps["off, before commit"]
        )
        added[mode] = (with_commit, alone)
        print(f"{f'accounting adds, {mode[4:]} (with the commit)':<46} {with_commit:>10.3f}")
        print(f"{f'accounting adds, {mode[4:]} (its own statements)':<46} {alone:>10.3f}")
    page = next((m for n, m, _ in results if n.startswith("GET /settings/usage?")), None)
    checks = [
        ("the day rows equal the stored replies' sums", same),
        (
            f"the usage page over {args.replies:,} replies under 300 ms (median)",
            page is not None and page < 300,
        ),
    ]
    for mode, (with_commit, alone) in added.items():
        checks.append(
            (f"accounting adds under 1 ms per model step, {mode[4:]} (median)", with_commit < 1)
        )
        checks.append(("  its own statements under 1 ms before the commit too", alone < 1))
    return verdict(checks)


if __name__ == "__main__":
    sys.exit(main())
