"""Each reply's cost, from its measured usage and the price table (§1 of issue 23)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select

from monark.chat.llm.types import UsageReport
from monark.chat.models import Message
from monark.chat.runtime import set_llm_provider
from monark.chat.turn.start import SendInput, send_message
from monark.core.money import money_text
from monark.extensions import db
from monark.settings.ai_provider import resolve
from monark.settings.models import OrgAiSettings, UsageDay
from monark.settings.prices import PriceError, parse_price, price_table
from tests.llm_script import Say, ScriptedProvider
from tests.test_anthropic_provider import run_read_then_write_turn
from tests.tuning import configure


def _replies(conversation_id: int) -> list[Message]:
    return db.session.scalars(
        select(Message)
        .where(Message.conversation_id == conversation_id, Message.role == "assistant")
        .order_by(Message.seq)
    ).all()


def _expected(reply: Message, inp: str, out: str, write: str, read: str) -> Decimal:
    total = (
        reply.input_tokens * Decimal(inp)
        + reply.output_tokens * Decimal(out)
        + reply.cache_creation_tokens * Decimal(write)
        + reply.cache_read_tokens * Decimal(read)
    )
    return total / Decimal(1_000_000)


def test_each_reply_stores_its_cost_from_the_fake_servers_usage(
    app, world, fake_anthropic, monkeypatch
):
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")
    conversation_id = run_read_then_write_turn(world, fake_anthropic)
    replies = _replies(conversation_id)
    assert len(replies) == 3
    for reply in replies:
        assert reply.input_tokens == 120 and reply.cache_read_tokens == 90
        assert reply.cache_creation_tokens == 30 and reply.output_tokens > 0
        assert isinstance(reply.cost, Decimal)
        assert reply.cost == _expected(reply, "3", "15", "3.75", "0.30")
    # The day's row says the same, exactly.
    day = db.session.scalars(select(UsageDay).where(UsageDay.org_id == world.a.org.id)).one()
    assert day.replies == 3 and day.cost == sum(r.cost for r in replies)
    assert day.input_tokens == 360 and day.unpriced_tokens == 0
    assert day.model == "claude-sonnet-4-5" and day.provider == "anthropic"


def test_a_model_without_a_price_counts_tokens_with_cost_unknown(
    app, world, fake_anthropic, monkeypatch
):
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-not-in-the-table")
    conversation_id = run_read_then_write_turn(world, fake_anthropic)
    replies = _replies(conversation_id)
    assert all(r.cost is None and r.input_tokens == 120 for r in replies)
    day = db.session.scalars(select(UsageDay).where(UsageDay.org_id == world.a.org.id)).one()
    tokens = sum(
        r.input_tokens + r.output_tokens + r.cache_read_tokens + r.cache_creation_tokens
        for r in replies
    )
    assert day.cost == 0 and day.unpriced_replies == 3 and day.unpriced_tokens == tokens


class NoUsage(ScriptedProvider):
    """A provider that never says what a reply used."""

    def stream(self, request):
        return (e for e in super().stream(request) if not isinstance(e, UsageReport))


def test_a_provider_reporting_no_usage_is_unknown_and_the_turn_unaffected(app, world, monkeypatch):
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")
    provider = NoUsage()
    provider.script.add([Say("Hello without usage.")])
    set_llm_provider(provider)
    try:
        result = send_message(world.a.principal("member"), SendInput(text="Hi"))
    finally:
        set_llm_provider(None)
    assert result.status == "done"
    (reply,) = _replies(result.conversation_id)
    assert reply.status == "complete" and reply.text == "Hello without usage."
    assert reply.input_tokens == reply.output_tokens == 0 and reply.cost is None
    day = db.session.scalars(select(UsageDay).where(UsageDay.org_id == world.a.org.id)).one()
    assert day.unpriced_replies == 1 and day.cost == 0


def test_the_deployments_price_file_prices_a_model_the_table_lacks(
    app, world, fake_anthropic, monkeypatch, tmp_path
):
    own = tmp_path / "prices.toml"
    own.write_text(
        'read = "2026-12-01"\n[anthropic."claude-own-build"]\n'
        'input = "2"\noutput = "10"\ncache_write = "2.5"\ncache_read = "0.2"\n'
    )
    assert price_table().get("anthropic", "claude-own-build") is None
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-own-build", PRICES_FILE=str(own))
    assert price_table(str(own)).read == "2026-12-01"
    conversation_id = run_read_then_write_turn(world, fake_anthropic)
    for reply in _replies(conversation_id):
        assert reply.cost == _expected(reply, "2", "10", "2.5", "0.2")


def test_an_orgs_own_price_for_its_model_wins(app, world, monkeypatch):
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")
    org_id = world.a.org.id
    assert resolve(org_id).price == price_table().get("anthropic", "claude-sonnet-4-5")
    own = {"input": "1", "output": "2", "cache_write": "0", "cache_read": "0"}
    db.session.add(
        OrgAiSettings(
            org_id=org_id, prices={"provider": "anthropic", "model": "claude-sonnet-4-5", **own}
        )
    )
    db.session.commit()
    assert resolve(org_id).price == parse_price(own, "prices")
    # Kept for the model it was set for: another model is priced by the table.
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-haiku-4-5")
    assert resolve(org_id).price == price_table().get("anthropic", "claude-haiku-4-5")


def test_each_providers_default_model_is_priced_with_the_day_it_was_read():
    from monark.chat.llm.providers import get_provider
    from monark.config import _ASSISTANT

    table = price_table()
    assert table.read >= "2026-12-03"
    defaults = {("anthropic", str(_ASSISTANT["CHAT_LLM_MODEL"]))}
    defaults |= {(name, get_provider(name).default_model) for name in ("openai", "gemini")}
    assert ("anthropic", "claude-sonnet-5-5") in defaults
    for provider, model in sorted(defaults):
        price = table.get(provider, model)
        assert price is not None, (provider, model)
        assert price.input > 0 and price.output > price.input


def test_the_usage_page_says_why_a_cost_is_unknown(app, world, fake_anthropic, monkeypatch, login):
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-not-in-the-table")
    run_read_then_write_turn(world, fake_anthropic)
    page = login("admin@acme.test").get("/settings/usage")
    note = BeautifulSoup(page.get_data(as_text=True), "html.parser").select_one("#usage-unpriced")
    said = note.get_text(" ", strip=True)
    assert "Cost unknown for some replies" in said
    assert "anthropic · claude-not-in-the-table : 3 replies" in said
    assert "the price table has no price for this model" in said
    assert f"read {price_table().read}" in said and "PRICES_FILE" in said
    # A provider that reported no usage is said so, for its own model.
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")
    provider = NoUsage()
    provider.script.add([Say("Hello without usage.")])
    set_llm_provider(provider)
    try:
        send_message(world.a.principal("admin"), SendInput(text="Hi"))
    finally:
        set_llm_provider(None)
    page = login("admin@acme.test").get("/settings/usage")
    note = BeautifulSoup(page.get_data(as_text=True), "html.parser").select_one("#usage-unpriced")
    said = note.get_text(" ", strip=True)
    assert "claude-sonnet-4-5 : 1 reply, 0 tokens;" in said
    assert "the provider reported no usage for 1 reply" in said
    # Priced replies alone: no such note.
    db.session.execute(UsageDay.__table__.delete())
    db.session.commit()
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-5-5")
    run_read_then_write_turn(world, fake_anthropic)
    page = login("admin@acme.test").get("/settings/usage")
    assert "usage-unpriced" not in page.get_data(as_text=True)


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"input": "-1", "output": "1", "cache_write": "0", "cache_read": "0"}, "p.input"),
        ({"input": "1", "output": "99999", "cache_write": "0", "cache_read": "0"}, "p.output"),
        ({"input": "1", "output": "1", "cache_write": "abc", "cache_read": "0"}, "p.cache_write"),
        ({"input": "1", "output": "1", "cache_write": "0", "cache_read": "NaN"}, "p.cache_read"),
        ({"input": "1", "output": "1", "cache_write": "0"}, "p.cache_read"),
        ({"input": "0.000001", "output": "1", "cache_write": "0", "cache_read": "0"}, "p.input"),
    ],
)
def test_bad_prices_are_refused_naming_the_field(values, named):
    with pytest.raises(PriceError, match=named.replace(".", r"\.")):
        parse_price(values, "p")


def test_a_bad_price_file_stops_the_start(tmp_path, monkeypatch):
    from monark.factory import create_app

    bad = tmp_path / "prices.toml"
    bad.write_text(
        '[openai."gpt-x"]\ninput = "-3"\noutput = "1"\ncache_write = "0"\ncache_read = "0"\n'
    )
    monkeypatch.setenv("PRICES_FILE", str(bad))
    with pytest.raises(RuntimeError, match=r"PRICES_FILE.*openai\.gpt-x\.input"):
        create_app({"SQLALCHEMY_DATABASE_URI": "sqlite://", "SECRET_KEY": "x"})


_GOOD = 'output = "1"\ncache_write = "0"\ncache_read = "0"\n'


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[openai."gpt-x"]\ninput = "1e9"\n' + _GOOD, r"openai\.gpt-x\.input: more than"),
        ('[openai."gpt-x"]\ninptu = "1"\n' + _GOOD, r"openai\.gpt-x\.inptu: not a price"),
        ('[openai."gpt-x"]\ninput = true\n' + _GOOD, r"openai\.gpt-x\.input: a price"),
        ('[openai."gpt-x"]\ninput = "1,5"\n' + _GOOD, r"openai\.gpt-x\.input: '1,5'"),
        ('openai = "cheap"\n', r"openai: expected a table of models"),
        ("[openai\ninput = 1\n", r"cannot be read as TOML"),
    ],
)
def test_a_price_file_that_cannot_be_one_is_refused_naming_the_field(tmp_path, text, named):
    own = tmp_path / "own-prices.toml"
    own.write_text(text)
    with pytest.raises(PriceError, match=named):
        price_table(str(own))


def test_a_price_file_that_is_missing_is_refused_naming_it(tmp_path):
    with pytest.raises(PriceError, match=r"nowhere\.toml: cannot be read"):
        price_table(str(tmp_path / "nowhere.toml"))


def test_cost_of_is_exact():
    from monark.settings.prices import cost_of

    price = parse_price(
        {"input": "3", "output": "15", "cache_write": "3.75", "cache_read": "0.3"}, "p"
    )
    usage = UsageReport(1, 1, 1, 1)
    assert cost_of(price, usage) == Decimal("0.0000220500")
    assert cost_of(None, usage) is None and cost_of(price, UsageReport()) is None


def test_a_replys_details_show_its_tokens_and_cost(app, world, fake_anthropic, monkeypatch, login):
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")
    conversation_id = run_read_then_write_turn(world, fake_anthropic)
    last = _replies(conversation_id)[-1]
    page = login("member@acme.test").get(f"/chat/conversations/{conversation_id}")
    soup = BeautifulSoup(page.get_data(as_text=True), "html.parser")
    details = soup.select_one(f"#msg-{last.id} details.msg-usage")
    terms = [dt.get_text() for dt in details.select("dt")]
    figures = [dd.get_text(" ", strip=True) for dd in details.select("dd")]
    assert terms == ["Input tokens", "Output tokens", "Cached tokens", "Cost"]
    assert figures[0] == "120" and figures[2] == "90 read, 30 written"
    assert figures[3] == money_text(last.cost) and figures[3].startswith("$0.000")


def test_an_admin_sets_the_orgs_own_price_in_the_ai_settings(app, world, login, monkeypatch):
    configure(monkeypatch, app, CHAT_LLM_MODEL="claude-sonnet-4-5")
    admin = login("admin@acme.test")
    typed = {
        "price_input": "1.5",
        "price_output": "7",
        "price_cache_write": "2",
        "price_cache_read": "0.15",
    }
    assert admin.post("/settings/ai", {"model": "claude-sonnet-4-5", **typed}).status_code == 303
    db.session.rollback()
    price = resolve(world.a.org.id).price
    assert (price.input, price.output, price.cache_read) == (
        Decimal("1.5"),
        Decimal(7),
        Decimal("0.15"),
    )
    row = db.session.scalar(select(OrgAiSettings))
    assert row.prices["model"] == "claude-sonnet-4-5" and row.prices["provider"] == "anthropic"
    page = BeautifulSoup(admin.get("/settings/ai").get_data(as_text=True), "html.parser")
    assert page.select_one("#price_output")["value"] == "7"
    # A bad one is refused naming its field; the stored price is kept.
    refused = admin.post(
        "/settings/ai", {"model": "claude-sonnet-4-5", **typed, "price_output": "-2"}
    )
    assert refused.status_code == 422
    page = BeautifulSoup(refused.get_data(as_text=True), "html.parser")
    assert "cannot be negative" in page.select_one("#price_output-error").get_text()
    missing = admin.post("/settings/ai", {"model": "claude-sonnet-4-5", "price_input": "1"})
    page = BeautifulSoup(missing.get_data(as_text=True), "html.parser")
    assert page.select_one("#price_output-error") is not None
    db.session.rollback()
    assert resolve(world.a.org.id).price.output == Decimal(7)
    # Emptied, the table's price again.
    admin.post("/settings/ai", {"model": "claude-sonnet-4-5"})
    db.session.rollback()
    assert resolve(world.a.org.id).price == price_table().get("anthropic", "claude-sonnet-4-5")
