"""What people do with webhooks and see of them: the signing secret (made or rotated, shown
once), the delivery log of a run, Redeliver, where a run stands and the org's queue health.
Plain functions over a Principal, scoped to its org, like ``services``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from monark.automations import services, signing, webhooks
from monark.automations.models import AutomationRun, WebhookDelivery
from monark.core.events import record_event
from monark.core.models import as_utc
from monark.core.rbac import Principal
from monark.extensions import db


@dataclass(frozen=True)
class NewSecret:
    """A Create/Rotate's answer: the secret to show, and whether the form was a repeat (the
    same form sent again: nothing rotated, the same secret shown)."""

    secret: str
    repeated: bool = False


def rotate_secret(principal: Principal, automation_id: int, token: str | None = None) -> NewSecret:
    """Make or rotate the automation's signing secret; the new one in clear, to be shown
    once (it is kept encrypted). Those rotated out in the last 24 hours still sign; a repeat
    of the same form (``token``) rotates nothing (``signing``)."""
    principal.require("automation.manage")
    # Locked: two sends of one form (a double click) run one after the other, and the
    # second sees the first's token.
    automation = services.get_automation(principal, automation_id, lock=True)
    if signing.is_repeat(automation, token):
        secret = signing.current_secret(automation)
        db.session.commit()
        return NewSecret(secret, repeated=True)
    rotated = automation.webhook_secret is not None
    secret = signing.rotate(automation, token)
    record_event(
        principal,
        "automation.webhook_secret_rotated" if rotated else "automation.webhook_secret_created",
        "automation",
        automation.id,
        {"automation_id": automation.id},
    )
    db.session.commit()
    return NewSecret(secret)


def redeliver(
    principal: Principal, automation_id: int, run_id: int, delivery_id: int
) -> WebhookDelivery:
    """Send an ended webhook of a run the principal may read once more (managers only)."""
    principal.require("automation.manage")
    run = services.get_run(principal, run_id, automation_id=automation_id)
    return webhooks.redeliver(principal, run, delivery_id)


@dataclass(frozen=True)
class TryShown:
    """One try of a delivery, as its log shows it."""

    number: int
    attempted_at: datetime
    status_code: int | None
    duration_ms: float
    error: str | None
    excerpt: str | None
    outcome: str
    redelivered: bool


@dataclass(frozen=True)
class DeliveryShown:
    """A delivery of a run with its tries, URLs redacted below managers."""

    id: int
    node_id: str
    message_id: str
    url: str
    status: str
    attempts: int
    max_attempts: int
    next_try_at: datetime | None
    error: str | None
    tries: tuple[TryShown, ...]

    @property
    def ended(self) -> bool:
        """Whether it ended (delivered or failed): then it may be redelivered."""
        return self.status in webhooks.FINAL

    @property
    def redelivered(self) -> bool:
        """Whether an admin redelivered it: its count is then the redelivery's own."""
        return any(t.redelivered for t in self.tries)

    @property
    def count_text(self) -> str:
        """ "tried 2 of 4 times", or "redelivered: tried 1 of 4 times": the tries of the
        current round (the first sending, or the last redelivery) against its maximum."""
        said = f"tried {self.attempts} of {self.max_attempts} time"
        said += "" if self.max_attempts == 1 else "s"
        return f"redelivered: {said}" if self.redelivered else said


def shown_deliveries(principal: Principal, run: AutomationRun) -> list[DeliveryShown]:
    """The deliveries of a run the principal may read (``services.get_run``)."""
    whole = principal.can("automation.manage")
    shown = []
    for delivery in webhooks.deliveries_of(run.id):
        url = delivery.url if whole else services.redact_url(delivery.url)

        def hide(text: str | None, raw: str = delivery.url, hidden: str = url) -> str | None:
            return text.replace(raw, hidden) if text and not whole else text

        shown.append(
            DeliveryShown(
                id=delivery.id,
                node_id=delivery.node_id,
                message_id=delivery.message_id,
                url=url,
                status=delivery.status,
                attempts=delivery.attempts,
                max_attempts=delivery.max_attempts,
                next_try_at=webhooks.next_try_at(delivery),
                error=hide(delivery.error),
                tries=tuple(
                    TryShown(
                        number=t.number,
                        attempted_at=as_utc(t.attempted_at),
                        status_code=t.status_code,
                        duration_ms=t.duration_ms,
                        error=hide(t.error),
                        excerpt=t.response_excerpt,
                        outcome=t.outcome,
                        redelivered=t.redelivered_by_id is not None,
                    )
                    for t in delivery.tries
                ),
            )
        )
    return shown


@dataclass(frozen=True)
class RunState:
    """Where a run stands: its status and, while it retries a webhook, which try is next."""

    status: str
    attempt: int | None = None  # the try that comes next
    max_attempts: int | None = None
    next_try_at: datetime | None = None

    @property
    def text(self) -> str:
        """ "retrying (attempt 2 of 6, next try at 18:42 UTC)", or the status alone."""
        if self.status != "retrying" or self.attempt is None:
            return self.status
        at = f", next try at {self.next_try_at:%H:%M:%S} UTC" if self.next_try_at else ""
        return f"retrying (attempt {self.attempt} of {self.max_attempts}{at})"

    def as_dict(self) -> dict[str, Any]:
        """For JSON: the status, and the retry's numbers while it retries."""
        return asdict(self)


def run_states(runs: list[AutomationRun]) -> dict[int, RunState]:
    """Each run's state, in one query for the webhooks the waiting ones wait on."""
    waiting = webhooks.waiting_for([r.id for r in runs if r.status in ("queued", "retrying")])
    states = {}
    for run in runs:
        delivery = waiting.get(run.id)
        if run.status == "retrying" and delivery is not None:
            states[run.id] = RunState(
                "retrying",
                attempt=min(delivery.attempts + 1, delivery.max_attempts),
                max_attempts=delivery.max_attempts,
                next_try_at=webhooks.next_try_at(delivery),
            )
        else:
            states[run.id] = RunState(run.status)
    return states


def queue_health(principal: Principal) -> webhooks.QueueHealth | None:
    """The org's queue health for a manager of automations; None for anyone else."""
    if not principal.can("automation.manage"):
        return None
    return webhooks.queue_health(principal.org_id)
