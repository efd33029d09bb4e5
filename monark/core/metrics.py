"""``/metrics`` for operators, in Prometheus' format, with the official ``prometheus-client``.

Off unless ``METRICS_TOKEN`` is set (then ``GET /metrics`` with ``Authorization: Bearer
<token>``); under gunicorn, ``monark.gunicorn_conf`` can serve it on a bind of its own
(``METRICS_BIND``, no token: keep that address private). Under several gunicorn workers
the counts are kept in files (``PROMETHEUS_MULTIPROC_DIR``, the client's multiprocess mode;
``gunicorn_conf`` sets one up and drops a dead worker's live gauges), so any worker's
answer adds up every worker's counts.

Counters and histograms are updated where things happen (the loop, the tool calls, the
webhooks, every request); what is a state rather than an event (approvals waiting, jobs in
the queue) is read at scrape time, from the database and the queue, whichever process asks.
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any

from flask import Flask, Response, abort, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from monark.core.auth import in_process
from monark.core.settings import settings

# Seconds: a first token within 0.1 s to 30 s; a turn within 0.25 s to 10 min.
_FIRST_TOKEN_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30)
_TURN_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

TURNS = Counter("monark_turns", "Assistant turns ended, by outcome.", ["outcome"])
FIRST_TOKEN = Histogram(
    "monark_first_token_seconds",
    "Seconds from a model step's request to its first text.",
    ["provider", "model"],
    buckets=_FIRST_TOKEN_BUCKETS,
)
TURN_SECONDS = Histogram(
    "monark_turn_duration_seconds",
    "Seconds one turn of the assistant ran (its model steps and reads).",
    ["provider", "model"],
    buckets=_TURN_BUCKETS,
)
TOKENS = Counter(
    "monark_tokens",
    "Model tokens, by provider, model and kind (input, output, cache_read, cache_write).",
    ["provider", "model", "kind"],
)
COST = Counter(
    "monark_cost_usd",
    "Cost of the model's replies in US dollars, by provider and model (priced replies only;"
    " the stored cost is exact, this sum a float).",
    ["provider", "model"],
)
UNPRICED = Counter(
    "monark_unpriced_replies",
    "Replies whose cost is unknown (a model without a price, or no usage reported).",
    ["provider", "model"],
)
TOOL_CALLS = Counter(
    "monark_tool_calls",
    "Tool calls reaching a status (proposed, succeeded, failed, rejected), by tool.",
    ["tool", "status"],
)
WEBHOOKS = Counter(
    "monark_webhook_attempts",
    "Webhook delivery attempts, by outcome (delivered, retry, failed).",
    ["outcome"],
)
HTTP_SECONDS = Histogram(
    "monark_http_request_duration_seconds",
    "Seconds to answer a request (to its headers, for a stream), by endpoint.",
    ["endpoint", "method", "status"],
    buckets=_HTTP_BUCKETS,
)

_STARTED = "monark.metrics.started"

# A label holds the app's own names, never free text: a tool name the model made up, or a
# model name an org admin typed, would carry their words to the operators' monitoring and
# open new series on every scrape. A value not named here is counted as "other".
OTHER = "other"
_NAMED: dict[str, set[str]] = {"tool": set(), "model": set()}


def name_values(label: str, values: Iterable[str]) -> None:
    """Let ``values`` stand as themselves in ``label`` ("tool": the tools registered;
    "model": the models the deployment prices; its own model, ``CHAT_LLM_MODEL``, too)."""
    _NAMED[label].update(v for v in values if v)


def _named(label: str, value: str) -> str:
    if value in _NAMED[label] or (label == "model" and value == settings().chat.llm_model):
        return value
    return OTHER


def turn_ended(provider: str, model: str, outcome: str, seconds: float) -> None:
    """A turn ended with ``outcome`` after ``seconds``."""
    TURNS.labels(outcome).inc()
    TURN_SECONDS.labels(provider, _named("model", model)).observe(seconds)


def first_token(provider: str, model: str, seconds: float) -> None:
    """A model step's first text came ``seconds`` after its request."""
    FIRST_TOKEN.labels(provider, _named("model", model)).observe(seconds)


def tokens(provider: str, model: str, counts: dict[str, int]) -> None:
    """A step's measured usage, by kind."""
    model = _named("model", model)
    for kind, count in counts.items():
        if count:
            TOKENS.labels(provider, model, kind).inc(count)


def cost(provider: str, model: str, amount: Decimal | None) -> None:
    """A reply's cost (None: unknown, counted as an unpriced reply)."""
    model = _named("model", model)
    if amount is None:
        UNPRICED.labels(provider, model).inc()
    elif amount:
        COST.labels(provider, model).inc(float(amount))


def tool_call(tool: str, status: str) -> None:
    """A tool call reached ``status``."""
    TOOL_CALLS.labels(_named("tool", tool), str(status).lower()).inc()


def webhook_attempt(outcome: str) -> None:
    """A webhook delivery attempt ended: delivered, retry or failed."""
    WEBHOOKS.labels(outcome).inc()


_STATE_KEY = "monark.metrics.state"


def add_state(app: Flask, name: str, documentation: str, read: Callable[[Flask], float]) -> None:
    """A gauge read at scrape time by ``read(app)`` (a feature's count of what waits)."""
    app.extensions.setdefault(_STATE_KEY, []).append((name, documentation, read))


class _StateCollector(Collector):
    """What is waiting now (approvals, jobs in the queue), read at scrape time."""

    def __init__(self, app: Flask):
        self.app = app

    def collect(self) -> Iterator[Any]:
        for name, documentation, read in self.app.extensions.get(_STATE_KEY, []):
            yield GaugeMetricFamily(name, documentation, read(self.app))


class _InAppContext(Collector):
    """The state gauges, read inside an app context (for a server outside any request)."""

    def __init__(self, app: Flask):
        self.app = app

    def collect(self) -> Iterator[Any]:
        with self.app.app_context():
            yield from _StateCollector(self.app).collect()


def bind_registry(app: Flask) -> CollectorRegistry:
    """What the separate bind (``METRICS_BIND``, gunicorn's master) serves: every
    worker's counts and the state read now."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(_InAppContext(app))
    return registry


def exposition(app: Flask) -> bytes:
    """Every metric as Prometheus' text: all workers' counts (multiprocess mode) or this
    process's, then the state read now."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        counted = generate_latest(registry)
    else:
        counted = generate_latest(REGISTRY)
    state = CollectorRegistry()
    state.register(_StateCollector(app))
    return counted + generate_latest(state)


def _authorized(token: str) -> bool:
    given = request.headers.get("Authorization", "").encode()
    return hmac.compare_digest(given, f"Bearer {token}".encode())


def init_app(app: Flask) -> None:
    """Time every request, and serve ``/metrics`` (404 unless ``METRICS_TOKEN`` is set)."""

    @app.before_request
    def _start_clock() -> None:
        request.environ[_STARTED] = time.perf_counter()

    @app.after_request
    def _observe(response: Response) -> Response:
        started = request.environ.get(_STARTED)
        # The dispatcher's in-process calls are a part of their outer request, timed as it.
        if started is not None and not in_process():
            endpoint = request.endpoint or "unmatched"  # a bounded set: no raw paths
            HTTP_SECONDS.labels(endpoint, request.method, str(response.status_code)).observe(
                time.perf_counter() - started
            )
        return response

    @app.get("/metrics")
    def metrics():  # type: ignore[no-untyped-def]
        """The metrics, for a scraper holding the token."""
        token = settings().limits.metrics_token
        if not token:
            abort(404)
        if not _authorized(token):
            return Response(
                "A bearer token is needed.\n",
                401,
                {"WWW-Authenticate": 'Bearer realm="metrics"'},
                mimetype="text/plain",
            )
        return Response(exposition(app), content_type=CONTENT_TYPE_LATEST)  # its charset once
