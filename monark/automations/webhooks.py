"""Webhooks as jobs of their own: one delivery per webhook step, tried until it ends.

A run that reaches a webhook step stores a ``WebhookDelivery`` (its body serialized once, so
every try sends and signs the same bytes) and queues ``deliver``; the run waits for it, and
the steps after it run when it ends (``engine.resume``). Each try checks the address again
(``core.net``: a name that was public at save time may not be now), signs the body
(``signing``), connects to the addresses it checked, follows no redirect and logs itself as a
``WebhookAttempt``. The answer decides:

* 2xx: delivered.
* 408, 429, 5xx, a timeout, a reset or refused connection, a host that does not resolve:
  tried again after ``WebhookSettings.delay`` (exponential backoff with jitter, by Huey's
  own ``RetryTask``), until ``max_attempts``; then failed.
* any other answer (a 3xx redirect, another 4xx) or an address refused: failed at once.
* any other fault of a try (an exception nobody foresaw): logged as that try's error and
  tried again like a lost connection. A delivery always ends: tries never pass
  ``max_attempts``, and a last try whose worker died is ended as failed (``_end_cut_off``).

A try is claimed by one conditional update, so a duplicate job (the sweep re-queueing a
delivery whose job was lost) never sends twice at once.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from time import perf_counter
from typing import Any

import httpx2
from flask import Flask, current_app
from huey.exceptions import RetryTask
from sqlalchemy import func, or_, select, update

from monark.automations import actions, signing
from monark.automations.models import Automation, AutomationRun, WebhookAttempt, WebhookDelivery
from monark.core import jobs, metrics
from monark.core.errors import Conflict, NotFound
from monark.core.events import record_event
from monark.core.models import Event, as_utc, utcnow
from monark.core.net import Unresolvable, UnsafeAddress, public_addresses
from monark.core.rbac import Principal
from monark.core.uow import on_commit
from monark.extensions import db

log = logging.getLogger(__name__)

EXCERPT_CHARS = 500  # of an answer's body, kept per try
RETRY_STATUSES = frozenset({408, 429})
STALE_GRACE_SECONDS = 30.0  # a delivery this late for its try lost its job: queue it again
SENDING_SLACK_SECONDS = 30.0  # a try's lease: its timeout and this
PRIVATE_SETTING = "AUTOMATION_WEBHOOK_ALLOW_PRIVATE"  # private hosts allowed


class DeliveryStatus(StrEnum):
    """Where a delivery stands."""

    QUEUED = "queued"  # its first try waits in the queue
    SENDING = "sending"  # a worker is trying it now
    RETRYING = "retrying"  # a try failed; the next waits until ``next_attempt_at``
    DELIVERED = "delivered"
    FAILED = "failed"


OPEN = (DeliveryStatus.QUEUED, DeliveryStatus.SENDING, DeliveryStatus.RETRYING)
FINAL = (DeliveryStatus.DELIVERED, DeliveryStatus.FAILED)


@dataclass(frozen=True)
class WebhookSettings:
    """How webhooks are retried, read once from the app's config."""

    max_attempts: int
    retry_seconds: float  # before the second try
    factor: float  # each next wait is this many times the last
    jitter: float  # the share of a wait added or taken at random

    @classmethod
    def from_app(cls, app: Flask) -> WebhookSettings:
        """The settings of ``app``."""
        return cls(
            max_attempts=max(int(app.config["WEBHOOK_MAX_ATTEMPTS"]), 1),
            retry_seconds=max(float(app.config["WEBHOOK_RETRY_SECONDS"]), 0.0),
            factor=max(float(app.config["WEBHOOK_RETRY_FACTOR"]), 1.0),
            jitter=min(max(float(app.config["WEBHOOK_RETRY_JITTER"]), 0.0), 1.0),
        )

    def delay(self, failed_attempts: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after try number ``failed_attempts`` failed."""
        base = self.retry_seconds * self.factor ** (failed_attempts - 1)
        spread = base * self.jitter
        return max(base + (rng or random).uniform(-spread, spread), 0.0)


@dataclass(frozen=True)
class Outcome:
    """What one try decided: ``retry`` (with ``delay``), or final (delivered or not)."""

    status_code: int | None
    error: str | None
    excerpt: str | None
    retry: bool

    @property
    def delivered(self) -> bool:
        """Whether the receiver took it (a 2xx)."""
        return self.status_code is not None and 200 <= self.status_code < 300


# ---- queueing, from a run's step ------------------------------------------------------


def queue_delivery(
    run_id: int, automation_id: int, node_id: str, url: str, payload: Any, timeout: float
) -> WebhookDelivery:
    """Store a delivery for a run's webhook step and queue its first try after commit."""
    run = db.session.get(AutomationRun, run_id)
    delivery = WebhookDelivery(
        org_id=run.org_id,
        run_id=run_id,
        automation_id=automation_id,
        node_id=node_id,
        message_id=signing.message_id(),
        url=url,
        body=json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str),
        timeout_seconds=timeout,
        status=DeliveryStatus.QUEUED,
        max_attempts=WebhookSettings.from_app(current_app).max_attempts,
    )
    db.session.add(delivery)
    db.session.commit()
    return delivery


def enqueue(delivery_id: int, *, delay: float = 0.0, redelivered_by_id: int | None = None) -> None:
    """Queue a try of ``delivery_id`` once the caller's transaction commits; a queue that is
    down leaves it to the sweep (``sweep_deliveries``)."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]

    def work() -> None:
        try:
            deliver.enqueue(delivery_id, redelivered_by_id, delay=delay, app=app)
        except Exception:
            log.warning("queue unavailable: delivery %s waits for the sweep", delivery_id)

    if not on_commit(work):
        work()


# ---- one try ---------------------------------------------------------------------------


def _claim(delivery_id: int) -> bool:
    """Take the delivery's next try: one worker wins, and only once its time has come."""
    timeout = db.session.scalar(
        select(WebhookDelivery.timeout_seconds).where(WebhookDelivery.id == delivery_id)
    )
    if timeout is None:
        db.session.rollback()
        return False
    now = utcnow()
    claimed = db.session.execute(
        update(WebhookDelivery)
        .where(
            WebhookDelivery.id == delivery_id,
            or_(
                WebhookDelivery.status.in_([DeliveryStatus.QUEUED, DeliveryStatus.RETRYING]),
                # A try whose worker died: its lease ran out.
                (WebhookDelivery.status == DeliveryStatus.SENDING)
                & (WebhookDelivery.lease_until < now),
            ),
            or_(
                WebhookDelivery.next_attempt_at.is_(None),
                WebhookDelivery.next_attempt_at <= now + timedelta(seconds=1),
            ),
            # Tries never go past the maximum: a last try cut off is ended (``_end_cut_off``).
            WebhookDelivery.attempts < WebhookDelivery.max_attempts,
        )
        .values(
            status=DeliveryStatus.SENDING,
            attempts=WebhookDelivery.attempts + 1,
            lease_until=now + timedelta(seconds=timeout + SENDING_SLACK_SECONDS),
        )
        .execution_options(synchronize_session=False)
    )
    db.session.commit()
    return claimed.rowcount == 1


def _end_cut_off(delivery_id: int) -> int | None:
    """End a delivery whose last allowed try was cut off (its worker died, its lease ran
    out) as failed, with that try logged; the run's id when it did, else None."""
    now = utcnow()
    error = "The last try was cut off (its worker stopped) and no tries are left."
    ended = db.session.execute(
        update(WebhookDelivery)
        .where(
            WebhookDelivery.id == delivery_id,
            WebhookDelivery.status == DeliveryStatus.SENDING,
            WebhookDelivery.lease_until < now,
            WebhookDelivery.attempts >= WebhookDelivery.max_attempts,
        )
        .values(
            status=DeliveryStatus.FAILED,
            error=error,
            status_code=None,
            lease_until=None,
            next_attempt_at=None,
            finished_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    if ended.rowcount != 1:
        db.session.rollback()
        return None
    delivery = db.session.get(WebhookDelivery, delivery_id)
    db.session.add(
        WebhookAttempt(
            delivery_id=delivery_id,
            number=delivery.attempts,
            attempted_at=now,
            error=error,
            outcome="failed",
        )
    )
    run_id = delivery.run_id
    db.session.commit()
    return run_id


def _error_of(err: httpx2.HTTPError) -> str:
    return f"The request failed: {type(err).__name__}: {err}"


def _post(delivery: WebhookDelivery, addresses: list[str | None], sign_with: list[str]) -> Outcome:
    """Send the delivery's body to each checked address in turn until one takes it."""
    headers = {"Content-Type": "application/json"}
    headers |= signing.headers(delivery.message_id, delivery.body, sign_with)
    try:
        with actions.webhook_client(delivery.timeout_seconds) as client:
            for n, address in enumerate(addresses, start=1):
                request = client.build_request(
                    "POST", delivery.url, content=delivery.body.encode(), headers=headers
                )
                if address is not None:
                    # The Host header (set from the URL) and the TLS server name (SNI and the
                    # certificate check) stay the URL's host.
                    hostname = request.url.host
                    request.url = request.url.copy_with(host=address)
                    request.extensions = {**request.extensions, "sni_hostname": hostname}
                try:
                    response = client.send(request, stream=True)
                except httpx2.ConnectError:
                    if n == len(addresses):
                        raise
                    continue
                try:
                    excerpt = _excerpt(response)
                finally:
                    response.close()
                return _judge(delivery.url, response.status_code, excerpt)
    except httpx2.HTTPError as err:  # timeouts, resets, refused connections: try again
        return Outcome(None, _error_of(err), None, retry=True)
    raise AssertionError("no address to send to")  # ``addresses`` is never empty


def _excerpt(response: httpx2.Response) -> str:
    """The start of the answer's body, read no further than the cap."""
    taken = b""
    for chunk in response.iter_bytes():
        taken += chunk
        if len(taken) >= EXCERPT_CHARS * 4:
            break
    return taken.decode("utf-8", "replace")[:EXCERPT_CHARS]


def _judge(url: str, code: int, excerpt: str) -> Outcome:
    """What an answer means: delivered, try again, or failed for good."""
    if 200 <= code < 300:
        return Outcome(code, None, excerpt, retry=False)
    if 300 <= code < 400:
        error = f"{url} answered HTTP {code}, a redirect: not followed (give the final address)."
        return Outcome(code, error, excerpt, retry=False)
    retry = code in RETRY_STATUSES or code >= 500
    return Outcome(code, f"{url} answered HTTP {code}.", excerpt, retry=retry)


def _try(delivery: WebhookDelivery) -> Outcome:
    """One try: the address checked now, the body signed now, sent."""
    allow_private = bool(current_app.config.get(PRIVATE_SETTING))
    try:
        addresses: list[str | None] = (
            [None] if allow_private else list(public_addresses(delivery.url, PRIVATE_SETTING))
        )
    except Unresolvable as err:  # DNS may come back
        return Outcome(None, str(err), None, retry=True)
    except UnsafeAddress as err:
        return Outcome(None, str(err), None, retry=False)
    automation = db.session.get(Automation, delivery.automation_id)
    if automation.webhook_secret is None:
        signing.ensure_secret(automation)
        db.session.commit()
    return _post(delivery, addresses, signing.signing_secrets(automation))


# Called with a run's id when one of its deliveries ended (``engine.resume``, injected by
# the engine so that this module needs no import of it).
_resume_run: list[Callable[[int], None]] = []


def on_delivery_end(resume: Callable[[int], None]) -> None:
    """Have ``resume(run_id)`` called when a run's delivery ends."""
    _resume_run[:] = [resume]


def attempt(delivery_id: int, redelivered_by_id: int | None = None) -> float | None:
    """Make the delivery's next try now if it is due and no one else makes it; the seconds
    until the next try when it is to be retried, else None."""
    if not _claim(delivery_id):
        ended = _end_cut_off(delivery_id)
        if ended is not None:
            _resumed(ended)
        return None
    delivery = db.session.get(WebhookDelivery, delivery_id)
    started, clock = utcnow(), perf_counter()
    try:
        outcome = _try(delivery)
    except Exception as err:
        # Never an unended delivery: a fault nobody foresaw (a codec, a library bug) is
        # logged as this try's error and retried like a network failure.
        log.exception("webhook delivery %s: unexpected error", delivery_id)
        db.session.rollback()
        delivery = db.session.get(WebhookDelivery, delivery_id)
        error = f"Unexpected error: {type(err).__name__}: {err}"[:EXCERPT_CHARS]
        outcome = Outcome(None, error, None, retry=True)
    duration = round((perf_counter() - clock) * 1000, 1)
    settings = WebhookSettings.from_app(current_app)
    again = outcome.retry and delivery.attempts < delivery.max_attempts
    delay = settings.delay(delivery.attempts) if again else None
    db.session.add(
        WebhookAttempt(
            delivery_id=delivery.id,
            number=delivery.attempts,
            attempted_at=started,
            status_code=outcome.status_code,
            duration_ms=duration,
            error=outcome.error,
            response_excerpt=outcome.excerpt,
            outcome="delivered" if outcome.delivered else ("retry" if again else "failed"),
            redelivered_by_id=redelivered_by_id,
        )
    )
    delivery.status_code, delivery.error, delivery.lease_until = (
        outcome.status_code,
        outcome.error,
        None,
    )
    if again:
        delivery.status = DeliveryStatus.RETRYING
        delivery.next_attempt_at = utcnow() + timedelta(seconds=delay)
        db.session.execute(
            update(AutomationRun)
            .where(AutomationRun.id == delivery.run_id, AutomationRun.status == "queued")
            .values(status="retrying")
        )
    else:
        delivery.status = DeliveryStatus.DELIVERED if outcome.delivered else DeliveryStatus.FAILED
        delivery.next_attempt_at, delivery.finished_at = None, utcnow()
    run_id = delivery.run_id
    db.session.commit()
    metrics.webhook_attempt("delivered" if outcome.delivered else ("retry" if again else "failed"))
    if not again:
        _resumed(run_id)
    return delay


def _resumed(run_id: int) -> None:
    for resume in _resume_run:
        resume(run_id)


@jobs.job("automations.deliver_webhook")
def deliver(delivery_id: int, redelivered_by_id: int | None = None) -> None:
    """The job of one delivery: a try, and Huey's own retry after the computed delay."""
    delay = attempt(delivery_id, redelivered_by_id)
    if delay is not None:
        raise RetryTask(f"delivery {delivery_id}: next try in {delay:.1f} s", delay=delay)


def attempt_inline(delivery_id: int) -> None:
    """The first try made at once (a test run, which its person waits for); any retry is
    queued with its delay."""
    delay = attempt(delivery_id)
    if delay is not None:
        enqueue(delivery_id, delay=delay)


# ---- what a run's step says -----------------------------------------------------------


def step_outcome(delivery_id: int) -> tuple[str, dict[str, Any] | None, str | None]:
    """The step of a webhook by its delivery: (status, output, error); ``waiting`` until
    the delivery ended."""
    delivery = db.session.get(WebhookDelivery, delivery_id)
    if delivery is None or delivery.status in OPEN:
        return "waiting", {"delivery_id": delivery_id}, None
    if delivery.status == DeliveryStatus.DELIVERED:
        return "succeeded", {"status_code": delivery.status_code}, None
    return "failed", None, delivery.error


def deliveries_of(run_id: int) -> list[WebhookDelivery]:
    """A run's deliveries with their tries, first first."""
    return list(
        db.session.scalars(
            select(WebhookDelivery)
            .where(WebhookDelivery.run_id == run_id)
            .order_by(WebhookDelivery.id)
        )
    )


def waiting_for(run_ids: list[int]) -> dict[int, WebhookDelivery]:
    """For each run that waits for a webhook: the open delivery it waits on (the first)."""
    if not run_ids:
        return {}
    rows = db.session.scalars(
        select(WebhookDelivery)
        .where(WebhookDelivery.run_id.in_(run_ids), WebhookDelivery.status.in_(OPEN))
        .order_by(WebhookDelivery.id)
    )
    found: dict[int, WebhookDelivery] = {}
    for row in rows:
        found.setdefault(row.run_id, row)
    return found


# ---- redeliver ------------------------------------------------------------------------


def redeliver(principal: Principal, run: AutomationRun, delivery_id: int) -> WebhookDelivery:
    """Send an ended delivery once more (same ``webhook-id``, signed anew); audited. A
    redelivery starts its own count: tried as the first time, up to ``max_attempts``.

    ``run`` is one the principal may read (``services.get_run``); managing automations is
    the right this needs.
    """
    principal.require("automation.manage")
    delivery = db.session.scalars(
        select(WebhookDelivery).where(
            WebhookDelivery.id == delivery_id,
            WebhookDelivery.run_id == run.id,
            WebhookDelivery.org_id == principal.org_id,
        )
    ).one_or_none()
    if delivery is None:
        raise NotFound("No such delivery.")
    reopened = db.session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery.id, WebhookDelivery.status.in_(FINAL))
        .values(
            status=DeliveryStatus.QUEUED,
            attempts=0,
            max_attempts=WebhookSettings.from_app(current_app).max_attempts,
            next_attempt_at=None,
            finished_at=None,
        )
        .execution_options(synchronize_session=False)
    )
    if reopened.rowcount != 1:
        db.session.rollback()
        raise Conflict("This webhook is still being delivered: wait for it to end.")
    record_event(
        principal,
        "automation.webhook_redelivered",
        "automation",
        run.automation_id,
        {"run_id": run.id, "delivery_id": delivery.id, "node_id": delivery.node_id},
    )
    db.session.commit()
    enqueue(delivery.id, redelivered_by_id=principal.user_id)
    db.session.refresh(delivery)
    return delivery


# ---- the sweep and the health of the queue --------------------------------------------


@jobs.periodic("automations.sweep_deliveries")
def sweep_deliveries() -> int:
    """Queue again the deliveries whose job was lost (never queued, or died with its
    worker); how many. Their claim keeps a duplicate from sending twice."""
    now = utcnow()
    late = now - timedelta(seconds=STALE_GRACE_SECONDS)
    ids = db.session.scalars(
        select(WebhookDelivery.id).where(
            or_(
                (WebhookDelivery.status == DeliveryStatus.QUEUED)
                & (WebhookDelivery.created_at <= late)
                & WebhookDelivery.next_attempt_at.is_(None),
                (WebhookDelivery.status.in_([DeliveryStatus.QUEUED, DeliveryStatus.RETRYING]))
                & (WebhookDelivery.next_attempt_at <= late),
                (WebhookDelivery.status == DeliveryStatus.SENDING)
                & (WebhookDelivery.lease_until < now),
            )
        )
    ).all()
    db.session.commit()
    for delivery_id in ids:
        enqueue(delivery_id)
    return len(ids)


@dataclass(frozen=True)
class QueueHealth:
    """An org's work outside the request: what waits, and what failed in the last day."""

    events_waiting: int  # committed changes whose automations have not run yet (the outbox)
    runs_waiting: int  # queued, running or retrying
    deliveries_waiting: int
    runs_failed_24h: int
    deliveries_failed_24h: int


def queue_health(org_id: int, now: datetime | None = None) -> QueueHealth:
    """The org's queue health now."""
    since = (now or utcnow()) - timedelta(hours=24)

    def count(model: Any, *where: Any) -> int:
        stmt = select(func.count(model.id)).where(model.org_id == org_id, *where)
        return int(db.session.scalar(stmt) or 0)

    return QueueHealth(
        events_waiting=count(Event, Event.pending.is_(True)),
        runs_waiting=count(
            AutomationRun, AutomationRun.status.in_(["queued", "running", "retrying"])
        ),
        deliveries_waiting=count(WebhookDelivery, WebhookDelivery.status.in_(OPEN)),
        runs_failed_24h=count(
            AutomationRun, AutomationRun.status == "failed", AutomationRun.started_at >= since
        ),
        deliveries_failed_24h=count(
            WebhookDelivery,
            WebhookDelivery.status == DeliveryStatus.FAILED,
            WebhookDelivery.finished_at >= since,
        ),
    )


def next_try_at(delivery: WebhookDelivery) -> datetime | None:
    """When a retrying delivery is tried next (aware UTC)."""
    return as_utc(delivery.next_attempt_at) if delivery.status == DeliveryStatus.RETRYING else None
