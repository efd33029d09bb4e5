"""/metrics (``monark.core.metrics``): off unless configured, refused without the token, and
scraped while turns run (the real Anthropic SDK against the fake server) the counts add up."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from monark.chat.models import Message, ToolCall, ToolCallStatus
from monark.core import metrics
from monark.extensions import db
from tests.llm_script import Call, Say
from tests.test_chat_stream import post_stream
from tests.tuning import configure

TOKEN = "metrics-secret-token"


def scrape(app) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, by name and labels."""
    response = app.test_client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    assert response.headers["Content-Type"].count("charset=") == 1
    samples = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples, name: str, **labels: str) -> float:
    """The sum over every sample of ``name`` whose labels include ``labels``."""
    return sum(
        v for (n, have), v in samples.items() if n == name and set(labels.items()) <= set(have)
    )


def test_metrics_are_off_unless_a_token_is_configured(app, world):
    assert app.test_client().get("/metrics").status_code == 404


def test_metrics_are_refused_without_the_token(app, world, monkeypatch):
    configure(monkeypatch, app, METRICS_TOKEN=TOKEN)
    client = app.test_client()
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    # A session is no token either.
    assert client.get("/metrics", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
    assert "monark_turns_total" in client.get(
        "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
    ).get_data(as_text=True)


def test_scraped_while_turns_run_the_counts_add_up(app, world, login, fake_anthropic, monkeypatch):
    configure(monkeypatch, app, METRICS_TOKEN=TOKEN)
    before = scrape(app)
    fake_anthropic.script.add(
        [Call("records_list", {"model": "tasks"})],
        [Say("There are tasks.")],
        [Call("records_create", {"model": "tasks", "values": {"title": "Counted"}})],
    )
    browser = login("member@acme.test")
    assert post_stream(browser, "What is there?").status_code == 200
    # The second turn ends waiting for a decision on its write.
    conversation_id = db.session.scalar(select(Message.conversation_id))
    fake_anthropic.chunk_delay = 0.05
    browser._fresh_user()
    response = browser.client.post(
        "/chat/stream",
        data={"text": "Add one", "conversation_id": conversation_id, "csrf_token": browser.csrf},
        buffered=False,
    )
    next(iter(response.response))  # the turn runs: scraped meanwhile
    during = scrape(app)
    assert (
        value(during, "monark_turns_total", outcome="done")
        == value(before, "monark_turns_total", outcome="done") + 1
    )
    b"".join(c if isinstance(c, bytes) else c.encode() for c in response.response)
    response.close()
    after = scrape(app)

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert delta("monark_turns_total", outcome="done") == 1
    assert delta("monark_turns_total", outcome="awaiting_confirmation") == 1
    assert delta("monark_turn_duration_seconds_count", provider="anthropic") == 2
    # Three model steps, each with text or a call: a first token for those with text.
    replies = db.session.scalars(select(Message).where(Message.role == "assistant")).all()
    with_text = sum(1 for m in replies if m.text)
    assert delta("monark_first_token_seconds_count") == with_text
    # Tokens: exactly what the stored replies say.
    stored = {
        "input": sum(m.input_tokens for m in replies),
        "output": sum(m.output_tokens for m in replies),
        "cache_read": sum(m.cache_read_tokens for m in replies),
        "cache_write": sum(m.cache_creation_tokens for m in replies),
    }
    for kind, count in stored.items():
        assert delta("monark_tokens_total", kind=kind) == count, kind
    assert stored["input"] > 0
    # Cost: the stored replies' exact costs, summed as a float (the default model is priced).
    cost = sum(m.cost for m in replies)
    assert all(m.cost is not None for m in replies) and cost > 0
    assert delta("monark_cost_usd_total", provider="anthropic") == pytest.approx(float(cost))
    assert delta("monark_unpriced_replies_total") == 0
    # Tool calls by tool and status, as stored.
    assert delta("monark_tool_calls_total", tool="records_list", status="succeeded") == 1
    assert delta("monark_tool_calls_total", tool="records_create", status="proposed") == 1
    # The write waits: the gauge reads the database.
    waiting = db.session.scalar(
        select(func.count()).select_from(ToolCall).where(ToolCall.status == ToolCallStatus.PROPOSED)
    )
    assert waiting == 1
    assert value(after, "monark_approvals_waiting") == waiting
    assert ("monark_jobs_queued", ()) in after
    # HTTP latency by endpoint: the two sends, and the scrapes themselves.
    assert delta("monark_http_request_duration_seconds_count", endpoint="assistant.stream") == 2
    assert delta("monark_http_request_duration_seconds_count", endpoint="metrics") >= 2


def test_a_reply_without_a_price_is_counted_as_unpriced_with_its_tokens(
    app, world, login, fake_anthropic, monkeypatch
):
    configure(monkeypatch, app, METRICS_TOKEN=TOKEN, CHAT_LLM_MODEL="claude-not-in-the-table")
    before = scrape(app)
    fake_anthropic.script.add([Say("No price for me.")])
    assert post_stream(login("member@acme.test"), "Hello").status_code == 200
    after = scrape(app)
    labels = {"provider": "anthropic", "model": "claude-not-in-the-table"}

    def delta(name: str, **more: str) -> float:
        return total(after, name, **labels, **more) - total(before, name, **labels, **more)

    (reply,) = db.session.scalars(select(Message).where(Message.role == "assistant")).all()
    assert reply.cost is None and reply.input_tokens > 0
    assert delta("monark_unpriced_replies_total") == 1
    assert delta("monark_cost_usd_total") == 0
    assert delta("monark_tokens_total", kind="input") == reply.input_tokens


def test_labels_hold_the_apps_own_names_never_text_from_a_model_or_an_org(
    app, world, login, fake_anthropic, monkeypatch
):
    """A tool name the model made up, or a model an org typed in, would carry their words
    to the operators' monitoring and open new series on every scrape: both are "other"."""
    configure(monkeypatch, app, METRICS_TOKEN=TOKEN)
    before = scrape(app)
    fake_anthropic.script.add(
        [Call("leak ben@acme.test Renew the office lease", {})],
        [Say("That tool does not exist.")],
    )
    assert post_stream(login("member@acme.test"), "Go").status_code == 200
    with app.app_context():
        metrics.tokens("anthropic", "Acme secret ada@acme.test", {"input": 7})
    after = scrape(app)
    names = {value for (_n, labels) in after for _k, value in labels}
    assert not any("@acme.test" in name for name in names)
    delta = total(after, "monark_tool_calls_total", tool="other", status="failed") - total(
        before, "monark_tool_calls_total", tool="other", status="failed"
    )
    assert delta == 1
    assert (
        total(after, "monark_tokens_total", model="other", kind="input")
        - total(before, "monark_tokens_total", model="other", kind="input")
        == 7
    )
    # The tools the app has, and the models it prices, keep their names.
    assert total(after, "monark_tokens_total", model=app.config["CHAT_LLM_MODEL"]) > 0
