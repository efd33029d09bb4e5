"""Budgets close the assistant's gate: a turn paused mid-conversation, the gate and the
header, audited trips and changes, a new month fresh, bad input refused by name."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import delete, func, select, update

from monark.assistant.gates import check_gates
from monark.chat.models import Message
from monark.chat.runtime import set_llm_provider
from monark.chat.turn.start import SendInput, send_message
from monark.core.errors import Forbidden, ValidationFailed
from monark.core.models import Event
from monark.extensions import db
from monark.settings import budgets
from monark.settings.models import OrgDay, UsageDay
from tests.llm_script import Call, Say
from tests.tuning import configure

STEP = Decimal("0.000624")  # the scripted step's usage (100 in, 20 out, 80 cached) at Sonnet 4.5


@pytest.fixture
def priced(app, monkeypatch):
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")


def _events(org_id: int, kind: str) -> list[Event]:
    return list(db.session.scalars(select(Event).where(Event.org_id == org_id, Event.type == kind)))


def test_a_budget_tripping_mid_conversation_pauses_after_its_step(world, scripted, priced):
    admin, member = world.a.principal("admin"), world.a.principal("member")
    budgets.set_budget(admin, {"monthly_cost": "0.001"})
    scripted.script.add(
        [Say("Looking."), Call("records_list", {"model": "tasks", "limit": 2})],
        [Call("records_list", {"model": "tasks", "limit": 3})],
        [Say("Never said: the budget ran out before this step.")],
    )
    result = send_message(member, SendInput(text="List them twice"))
    assert result.status == "paused"
    rows = list(
        db.session.scalars(
            select(Message)
            .where(Message.conversation_id == result.conversation_id)
            .order_by(Message.seq)
        )
    )
    roles = [m.role for m in rows]
    assert roles == ["user", "assistant", "assistant", "note"]
    # The step that used the budget up finished: its read ran.
    assert [c.status for c in rows[2].tool_calls] == ["SUCCEEDED"]
    note = rows[-1].text
    assert "monthly budget for the assistant is used up" in note
    assert "Acme Admin" in note and "Settings → Usage" in note
    assert scripted.script.remaining == 1  # the third step was never asked for
    # The gate is closed for everyone in the org, and says why and who can lift it.
    gate = check_gates(member)
    assert not gate.open and gate.code == "budget" and "Acme Owner" in gate.reason
    with pytest.raises(Forbidden, match="budget"):
        send_message(member, SendInput(text="Again?"))
    # Crossing 80% and 100% was audited once each; the other org is not affected.
    assert len(_events(world.a.org.id, "budget.warned")) == 1
    tripped = _events(world.a.org.id, "budget.tripped")
    assert len(tripped) == 1 and tripped[0].payload["period"] == date.today().strftime("%Y-%m")
    assert check_gates(world.b.principal("member")).open
    # Raising the budget lifts the pause at once (audited).
    assert budgets.set_budget(admin, {"monthly_cost": "5"}) == ["monthly_cost"]
    assert check_gates(member).open
    assert [e.payload["fields"] for e in _events(world.a.org.id, "budget.updated")][-1] == [
        "monthly_cost"
    ]


def test_another_instances_spend_pauses_a_running_turn_after_its_step(world, scripted, priced):
    # The budget is far above what this turn spends; while its second step streams, another
    # instance's replies use it up (a day row committed on a connection of its own). The
    # step ends, its read runs, and the turn pauses before a third: the spend is read from
    # the database after each reply, not kept by the process that runs the turn.
    admin, member = world.a.principal("admin"), world.a.principal("member")
    budgets.set_budget(admin, {"monthly_cost": "1"})
    elsewhere = {
        "org_id": world.a.org.id,
        "day": date.today(),
        "user_id": admin.user_id,
        "provider": "anthropic",
        "model": "elsewhere",
        "replies": 3,
        "cost": Decimal("1.5"),
    }
    engine = db.engine  # the provider streams on a thread of its own, outside the app

    class SpentElsewhere(type(scripted)):
        def stream(self, request):
            if len(self.requests) == 1:  # the second step: another instance spends meanwhile
                _spend_elsewhere(engine, elsewhere)
            yield from super().stream(request)

    provider = SpentElsewhere(scripted.script)
    set_llm_provider(provider)
    scripted.script.add(
        [Call("records_list", {"model": "tasks", "limit": 2})],
        [Call("records_list", {"model": "tasks", "limit": 3})],
        [Say("Never said: the budget ran out before this step.")],
    )
    result = send_message(member, SendInput(text="List them twice"))
    assert result.error is None, result.error
    assert result.status == "paused"
    rows = list(
        db.session.scalars(
            select(Message)
            .where(Message.conversation_id == result.conversation_id)
            .order_by(Message.seq)
        )
    )
    assert [m.role for m in rows] == ["user", "assistant", "assistant", "note"]
    assert [c.status for c in rows[2].tool_calls] == ["SUCCEEDED"]
    assert "monthly budget for the assistant is used up" in rows[-1].text
    assert scripted.script.remaining == 1
    assert len(_events(world.a.org.id, "budget.tripped")) == 1


def _spent_on(org_id: int, day: date, user_id: int, cost: str) -> dict:
    """A day row as another instance's replies leave it."""
    return {
        "org_id": org_id,
        "day": day,
        "user_id": user_id,
        "provider": "anthropic",
        "model": "elsewhere",
        "replies": 1,
        "cost": Decimal(cost),
    }


def _spend_elsewhere(engine, *rows: dict) -> None:
    """Day rows as another instance writes them: on a connection of its own, committed."""
    with engine.begin() as other:
        other.execute(UsageDay.__table__.insert(), list(rows))


def _counting_settled_reads(monkeypatch) -> list[date]:
    """The days on which the month's settled spend was read from the database."""
    reads: list[date] = []
    read = budgets.settled

    def counted(budget, org_id, day):
        before = dict(getattr(budget, "past", {}))
        found = read(budget, org_id, day)
        if isinstance(budget, budgets.Limits) and day not in before:
            reads.append(day)
        return found

    monkeypatch.setattr(budgets, "settled", counted)
    return reads


def test_a_past_days_spend_and_another_instances_today_trip_the_budget_together(
    world, scripted, priced, monkeypatch
):
    # Mid-month: the 10th's spend is settled (read once this turn), the 15th is today.
    # Neither alone uses the budget up; once another instance's reply today is committed
    # (while this turn's second step streams), the two together do, and the turn pauses
    # after that step. (This turn's own replies count on the real date: a few cents' tenths.)
    today = date.today().replace(day=15)
    monkeypatch.setattr(budgets, "current_day", lambda: today)
    reads = _counting_settled_reads(monkeypatch)
    admin, member = world.a.principal("admin"), world.a.principal("member")
    budgets.set_budget(admin, {"monthly_cost": "1"})
    engine, org_id = db.engine, world.a.org.id  # the provider streams outside the app
    # An instance's replies on the 10th.
    _spend_elsewhere(engine, _spent_on(world.a.org.id, today.replace(day=10), admin.user_id, "0.6"))

    class SpentToday(type(scripted)):
        def stream(self, request):
            if len(self.requests) == 1:  # another instance (a connection of its own) spends
                _spend_elsewhere(engine, _spent_on(org_id, today, admin.user_id, "0.5"))
            yield from super().stream(request)

    set_llm_provider(SpentToday(scripted.script))
    scripted.script.add(
        [Call("records_list", {"model": "tasks", "limit": 2})],
        [Call("records_list", {"model": "tasks", "limit": 3})],
        [Say("Never said: the budget ran out before this step.")],
    )
    result = send_message(member, SendInput(text="List them twice"))
    assert result.error is None, result.error
    assert result.status == "paused"
    rows = list(
        db.session.scalars(
            select(Message)
            .where(Message.conversation_id == result.conversation_id)
            .order_by(Message.seq)
        )
    )
    assert [m.role for m in rows] == ["user", "assistant", "assistant", "note"]
    assert "monthly budget for the assistant is used up" in rows[-1].text
    assert scripted.script.remaining == 1
    assert len(_events(world.a.org.id, "budget.tripped")) == 1
    assert reads == [today]  # the settled days once a turn, not after every reply


def test_a_new_month_mid_turn_starts_fresh(world, scripted, priced, monkeypatch):
    # The turn starts on the last day of a month that spent 90% of the budget (its settled
    # days kept for the turn); while its second step streams the month turns, and another
    # instance spends half the budget on the new month's first day. The new month counts
    # only its own spend: the turn goes on to its end.
    first = date.today().replace(day=1)
    clock = [first - timedelta(days=1)]
    monkeypatch.setattr(budgets, "current_day", lambda: clock[0])
    reads = _counting_settled_reads(monkeypatch)
    admin, member = world.a.principal("admin"), world.a.principal("member")
    budgets.set_budget(admin, {"monthly_cost": "1"})
    engine, org_id = db.engine, world.a.org.id  # the provider streams outside the app
    _spend_elsewhere(
        engine, _spent_on(world.a.org.id, clock[0] - timedelta(days=3), admin.user_id, "0.9")
    )

    class NewMonth(type(scripted)):
        def stream(self, request):
            if len(self.requests) == 1:
                clock[0] = first
                _spend_elsewhere(engine, _spent_on(org_id, first, admin.user_id, "0.5"))
            yield from super().stream(request)

    set_llm_provider(NewMonth(scripted.script))
    scripted.script.add(
        [Call("records_list", {"model": "tasks", "limit": 2})],
        [Call("records_list", {"model": "tasks", "limit": 3})],
        [Say("Done.")],
    )
    result = send_message(member, SendInput(text="List them twice"))
    assert result.error is None, result.error
    assert result.status == "done"
    assert scripted.script.remaining == 0
    assert reads == [first - timedelta(days=1), first]  # read again on the new day
    # The old month's 80% was audited once, in its period; nothing tripped.
    warned = _events(world.a.org.id, "budget.warned")
    assert [e.payload["period"] for e in warned] == [(first - timedelta(days=1)).strftime("%Y-%m")]
    assert _events(world.a.org.id, "budget.tripped") == []
    # The new month's own spend still closes the gate.
    _spend_elsewhere(engine, _spent_on(world.a.org.id, first, member.user_id, "0.6"))
    assert check_gates(member).code == "budget"


def _org_days() -> tuple[list[tuple], list[tuple]]:
    """The orgs' day totals, and the same sums of their day rows, by org and day."""
    totals = db.session.execute(
        select(OrgDay.org_id, OrgDay.day, OrgDay.cost, OrgDay.unpriced_tokens)
        .where((OrgDay.cost != 0) | (OrgDay.unpriced_tokens != 0))
        .order_by(OrgDay.org_id, OrgDay.day)
    ).all()
    sums = db.session.execute(
        select(
            UsageDay.org_id,
            UsageDay.day,
            func.sum(UsageDay.cost),
            func.sum(UsageDay.unpriced_tokens),
        )
        .group_by(UsageDay.org_id, UsageDay.day)
        .having((func.sum(UsageDay.cost) != 0) | (func.sum(UsageDay.unpriced_tokens) != 0))
        .order_by(UsageDay.org_id, UsageDay.day)
    ).all()
    return [tuple(r) for r in totals], [tuple(r) for r in sums]


def test_an_orgs_day_totals_follow_its_day_rows_whoever_writes_them(world, scripted, priced):
    # The budget check reads the org's day totals: the database keeps them from the day
    # rows, written by this instance's meter, by another's connection, changed or removed.
    a, b, today = world.a.org.id, world.b.org.id, date.today()
    yesterday = today - timedelta(days=1)
    admin = world.a.principal("admin")
    _spend_elsewhere(
        db.engine,
        _spent_on(a, today, admin.user_id, "0.25") | {"unpriced_tokens": 0},
        _spent_on(a, yesterday, admin.user_id, "0.125") | {"unpriced_tokens": 40},
        _spent_on(b, today, world.b.principal("admin").user_id, "2") | {"unpriced_tokens": 0},
    )
    scripted.script.add([Say("Counted.")])
    send_message(world.a.principal("member"), SendInput(text="Count me"))  # the meter's upsert
    totals, sums = _org_days()
    assert totals == sums
    assert totals == [
        (a, yesterday, Decimal("0.125"), 40),
        (a, today, Decimal("0.25") + STEP, 0),
        (b, today, Decimal(2), 0),
    ]
    # A row changed, moved to another day and org, and removed.
    db.session.execute(
        update(UsageDay).where(UsageDay.org_id == b).values(cost=UsageDay.cost + Decimal("0.5"))
    )
    db.session.execute(
        update(UsageDay)
        .where(UsageDay.day == yesterday)
        .values(org_id=b, day=today - timedelta(days=2))
    )
    db.session.execute(delete(UsageDay).where(UsageDay.model == "elsewhere", UsageDay.org_id == a))
    db.session.commit()
    totals, sums = _org_days()
    assert totals == sums
    assert totals == [
        (a, today, STEP, 0),
        (b, today - timedelta(days=2), Decimal("0.125"), 40),
        (b, today, Decimal("2.5"), 0),
    ]


def test_a_new_month_starts_fresh(world, priced):
    admin = world.a.principal("admin")
    budgets.set_budget(admin, {"monthly_cost": "1"})
    last_month = date.today().replace(day=1) - timedelta(days=1)
    db.session.add(
        UsageDay(
            org_id=world.a.org.id,
            day=last_month,
            user_id=admin.user_id,
            provider="x",
            model="y",
            replies=1,
            cost=Decimal(3),
        )
    )
    db.session.commit()
    assert budgets.status(world.a.org.id, last_month).paused
    assert not budgets.status(world.a.org.id).paused
    assert check_gates(admin).open


def test_tokens_of_models_without_a_price_and_a_members_daily_cap(
    world, scripted, app, monkeypatch
):
    configure(monkeypatch, app, CHAT_LLM_MODEL="no-price-model")
    admin, member = world.a.principal("admin"), world.a.principal("member")
    budgets.set_budget(admin, {"user_daily_tokens": "150"})
    scripted.script.add([Say("One.")], [Say("Two.")])
    assert send_message(member, SendInput(text="One")).status == "done"  # 200 tokens: capped
    gate = check_gates(member)
    assert gate.code == "budget" and "daily cap" in gate.reason
    assert check_gates(admin).open  # a member's cap is theirs alone
    assert len(_events(world.a.org.id, "budget.user_capped")) == 1
    budgets.set_budget(admin, {"user_daily_tokens": "", "monthly_tokens": "100"})
    assert check_gates(admin).code == "budget"  # the org's tokens are used up


def test_a_members_daily_cap_counts_their_other_rows_today_and_each_reply_once(
    world, scripted, priced
):
    # The member's cap (0.0013) with 0.0005 already spent today on another model (another
    # instance's row), more yesterday on this one and much more by the admin today: the
    # first step (0.000624) leaves them under it, the second takes them over, and the turn
    # pauses before a third.
    admin, member = world.a.principal("admin"), world.a.principal("member")
    budgets.set_budget(admin, {"user_daily_cost": "0.0013"})
    today, org_id = date.today(), world.a.org.id
    yesterday = _spent_on(org_id, today - timedelta(days=1), member.user_id, "0.0009")
    _spend_elsewhere(
        db.engine,
        _spent_on(org_id, today, member.user_id, "0.0005"),
        yesterday | {"model": "claude-sonnet-4-5"},
        _spent_on(org_id, today, admin.user_id, "1"),
    )
    scripted.script.add(
        [Call("records_list", {"model": "tasks", "limit": 2})],
        [Call("records_list", {"model": "tasks", "limit": 3})],
        [Say("Never said: the cap was reached before this step.")],
    )
    result = send_message(member, SendInput(text="List them twice"))
    assert result.status == "paused"
    assert scripted.script.remaining == 1
    note = db.session.scalars(
        select(Message)
        .where(Message.conversation_id == result.conversation_id)
        .order_by(Message.seq.desc())
        .limit(1)
    ).one()
    assert note.role == "note" and "daily cap" in note.text
    assert check_gates(world.a.principal("owner")).open  # a member's cap is theirs alone
    assert check_gates(admin).code == "budget"  # the admin's own 1 dollar today is over it


def test_the_deployments_default_and_ceiling(world, app, monkeypatch):
    configure(monkeypatch, app, BUDGET_MONTHLY_COST="10", BUDGET_COST_CEILING="50")
    admin = world.a.principal("admin")
    assert budgets.status(world.a.org.id).limits.monthly_cost == Decimal(10)
    with pytest.raises(ValidationFailed) as refused:
        budgets.set_budget(admin, {"monthly_cost": "80"})
    assert refused.value.details[0]["field"] == "monthly_cost"
    budgets.set_budget(admin, {"monthly_cost": "40"})
    assert budgets.status(world.a.org.id).limits.monthly_cost == Decimal(40)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("monthly_cost", "-5"),
        ("monthly_cost", "abc"),
        ("monthly_cost", "1e20"),
        ("monthly_tokens", "12.5"),
        ("user_daily_cost", "0"),
        ("user_daily_tokens", "NaN"),
        ("monthly_cost", "0.000000000001"),
    ],
)
def test_bad_budgets_are_refused_naming_the_field_and_nothing_is_written(world, name, raw):
    admin = world.a.principal("admin")
    budgets.set_budget(admin, {"monthly_cost": "7"})
    with pytest.raises(ValidationFailed) as refused:
        budgets.set_budget(admin, {"monthly_cost": "9", name: raw})
    assert refused.value.details[0]["field"] == name
    assert budgets.FIELDS[name] in refused.value.message
    db.session.rollback()
    assert budgets.status(world.a.org.id).limits.monthly_cost == Decimal(7)


def test_bad_deployment_budgets_stop_the_start(monkeypatch):
    from monark.factory import create_app

    monkeypatch.setenv("BUDGET_MONTHLY_COST", "-1")
    with pytest.raises(RuntimeError, match="BUDGET_MONTHLY_COST"):
        create_app({"SQLALCHEMY_DATABASE_URI": "sqlite://", "SECRET_KEY": "x"})


def test_the_page_banner_header_and_form(world, scripted, priced, login):
    admin = world.a.principal("admin")
    budgets.set_budget(admin, {"monthly_cost": "0.0007"})
    scripted.script.add([Say("Hi.")])
    send_message(world.a.principal("member"), SendInput(text="Hi"))  # 89%
    browser = login("admin@acme.test")
    soup = BeautifulSoup(browser.get("/models").get_data(as_text=True), "html.parser")
    assert "89% of this month's budget" in soup.select_one(".spend-banner").get_text()
    member = login("member@acme.test")
    soup = BeautifulSoup(member.get("/models").get_data(as_text=True), "html.parser")
    assert soup.select_one(".spend-banner") is None  # admins alone
    assert soup.select_one("#assistant-toggle").get("data-gate") is None
    # An admin's bad value is drawn by its field; the stored budget is unchanged.
    page = browser.post("/settings/usage/budget", {"monthly_cost": "-3"})
    assert page.status_code == 400
    soup = BeautifulSoup(page.get_data(as_text=True), "html.parser")
    assert "cannot" not in soup.select_one("#monthly_cost-error").get_text()
    assert "must be above 0" in soup.select_one("#monthly_cost-error").get_text()
    scripted.script.add([Say("Again.")])
    send_message(world.a.principal("member"), SendInput(text="Again"))  # 178%: paused
    soup = BeautifulSoup(member.get("/models").get_data(as_text=True), "html.parser")
    toggle = soup.select_one("#assistant-toggle")
    assert toggle["data-gate"] == "budget" and "paused" in toggle.get_text()
    assert "monthly budget" in toggle["title"]
    panel = soup.select_one("#assistant").get_text(" ", strip=True)
    assert "monthly budget for the assistant is used up" in panel and "Acme Admin" in panel
    assert "switch your own" not in panel
    assert member.post("/settings/usage/budget", {"monthly_cost": "100"}).status_code == 403
    ok = browser.post("/settings/usage/budget", {"monthly_cost": "100"})
    assert ok.status_code in (200, 303)
    assert budgets.status(world.a.org.id).limits.monthly_cost == Decimal(100)


# Arabic-Indic and full-width digits: another script's "100".
OTHER_DIGITS = ["\u0661\u0660\u0660", "\uff11\uff10\uff10"]


@pytest.mark.parametrize("raw", ["1,0,0", "1E+5", "1_000", *OTHER_DIGITS, "1.", "$5", "5 000"])
def test_a_budget_is_digits_as_typed_on_a_keyboard(world, raw):
    """Decimal would read each of these as some number nobody meant to type."""
    with pytest.raises(ValidationFailed, match="is not a number"):
        budgets.parse_limit(raw, "monthly_cost")


def test_thousands_and_small_amounts_read_and_show_as_typed(world, login):
    admin = world.a.principal("admin")
    assert budgets.parse_limit("1,000.50", "monthly_cost") == Decimal("1000.50")
    budgets.set_budget(admin, {"monthly_cost": "0.0000001", "monthly_tokens": "12,000"})
    soup = BeautifulSoup(
        login("admin@acme.test").get("/settings/usage").get_data(as_text=True), "html.parser"
    )
    assert soup.select_one("#monthly_cost")["value"] == "0.0000001"
    assert soup.select_one("#monthly_tokens")["value"] == "12000"


def test_every_bad_field_is_named_at_once_and_nothing_is_written(world, login):
    admin = world.a.principal("admin")
    budgets.set_budget(admin, {"monthly_cost": "7"})
    form = {"monthly_cost": "abc", "user_daily_cost": "-1", "user_daily_tokens": "x"}
    with pytest.raises(ValidationFailed) as refused:
        budgets.set_budget(admin, form)
    fields = [d["field"] for d in refused.value.details]
    assert fields == ["monthly_cost", "user_daily_cost", "user_daily_tokens"]
    db.session.rollback()
    assert budgets.status(world.a.org.id).limits.monthly_cost == Decimal(7)
    # On the page: each field's own error, and the period's links still go to the page.
    page = login("admin@acme.test").post("/settings/usage/budget", form)
    assert page.status_code == 400
    soup = BeautifulSoup(page.get_data(as_text=True), "html.parser")
    for name in fields:
        assert soup.select_one(f"#{name}-error").get_text(strip=True)
    periods = [a["href"] for a in soup.select(".usage-periods a")]
    assert periods and all(href.startswith("/settings/usage?days=") for href in periods)


def test_a_budget_lowered_below_the_spend_is_a_crossing_told_once(world, scripted, priced):
    admin = world.a.principal("admin")
    scripted.script.add([Say("Hi.")])
    send_message(world.a.principal("member"), SendInput(text="Hi"))  # STEP spent
    budgets.set_budget(admin, {"monthly_cost": "0.0005"})  # below the spend: paused now
    tripped = _events(world.a.org.id, "budget.tripped")
    assert len(tripped) == 1 and tripped[0].actor_id == world.a.users["admin"].id
    assert len(_events(world.a.org.id, "budget.warned")) == 1
    assert not check_gates(world.a.principal("member")).open
    # Saved again, still over: the month's crossings are not told again.
    budgets.set_budget(admin, {"monthly_cost": "0.0006"})
    assert len(_events(world.a.org.id, "budget.tripped")) == 1
    assert len(_events(world.a.org.id, "budget.warned")) == 1
    # Raised above it, then lowered again: back under, a new crossing is told.
    budgets.set_budget(admin, {"monthly_cost": "5"})
    assert check_gates(world.a.principal("member")).open
    budgets.set_budget(admin, {"monthly_cost": "0.0005"})
    assert len(_events(world.a.org.id, "budget.tripped")) == 2


def test_saving_the_budget_loads_the_page_anew(world, login):
    browser = login("admin@acme.test")
    saved = browser.post(
        "/settings/usage/budget", {"monthly_cost": "12"}, headers={"HX-Request": "true"}
    )
    # A redirect to this very page with only "#budget" added would load nothing.
    assert saved.headers["HX-Redirect"] == "/settings/usage"


def test_an_admin_paused_is_told_they_may_lift_it_themselves(world, scripted, priced):
    admin = world.a.principal("admin")
    budgets.set_budget(admin, {"monthly_cost": "0.0001"})
    scripted.script.add([Say("Hi.")])
    send_message(world.a.principal("member"), SendInput(text="Hi"))
    mine, theirs = check_gates(admin).reason, check_gates(world.a.principal("member")).reason
    assert "unless you raise the budget in Settings → Usage" in mine
    assert "Acme Admin" not in mine
    assert "unless an admin (" in theirs and "Acme Admin" in theirs
