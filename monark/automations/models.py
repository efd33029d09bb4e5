"""Tables of automations and their runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from monark.core.models import CreatedAt, IntPk, OrgId, UpdatedAt, User, UserRef, utcnow
from monark.extensions import db


class Automation(db.Model):
    """One automation: a graph written whole, with a version bumped on every change."""

    __tablename__ = "automations"
    __table_args__ = (
        UniqueConstraint("org_id", "name"),
        # The engine's lookup after each commit: enabled automations of one trigger.
        Index("ix_automations_org_id_trigger_type", "org_id", "trigger_type", "enabled"),
    )

    id: Mapped[IntPk]
    org_id: Mapped[OrgId]
    name: Mapped[str] = mapped_column(String(120))
    enabled: Mapped[bool] = mapped_column(default=False)
    version: Mapped[int] = mapped_column(default=1)
    graph: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Copied from the graph's trigger node when it is saved, so the engine can query them.
    trigger_type: Mapped[str] = mapped_column(String(40))
    trigger_model: Mapped[str | None] = mapped_column(String(40), default=None)
    created_by_id: Mapped[UserRef]
    # Whose rights it acts within, checked at every run (the author, until an admin takes
    # ownership): when the owner leaves or loses automation.manage it is switched off, and
    # ``disabled_reason`` says why until someone enables it again.
    owner_id: Mapped[UserRef]
    disabled_reason: Mapped[str | None] = mapped_column(Text, default=None)
    # What a private record's events do (``privacy.PrivateRecords``): nothing by default.
    private_records: Mapped[str] = mapped_column(String(8), default="skip")
    # Its webhooks' signing secret (``whsec_…``, encrypted at rest: ``core.crypto``), and
    # the one it replaced, still signed with until ``webhook_secret_previous_until``.
    webhook_secret: Mapped[str | None] = mapped_column(Text, default=None)
    webhook_secret_previous: Mapped[str | None] = mapped_column(Text, default=None)
    webhook_secret_previous_until: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[CreatedAt]
    updated_at: Mapped[UpdatedAt]

    created_by: Mapped[User | None] = relationship(foreign_keys="Automation.created_by_id")
    owner: Mapped[User | None] = relationship(foreign_keys="Automation.owner_id")


class AutomationRun(db.Model):
    """One execution: its trigger, its status and one step per node of the graph."""

    __tablename__ = "automation_runs"
    __table_args__ = (
        Index("ix_automation_runs_automation_id_id", "automation_id", "id"),
        # The claim: one run per automation and event, whatever the redeliveries or workers.
        Index(
            "uq_automation_runs_automation_id_trigger_event_id",
            "automation_id",
            "trigger_event_id",
            unique=True,
        ),
        Index("ix_automation_runs_cascade_event_id", "cascade_event_id"),
        # The claim of a schedule's slot: one run (or skip) per automation and slot time.
        Index("uq_automation_runs_automation_id_slot_at", "automation_id", "slot_at", unique=True),
        Index("ix_automation_runs_started_at", "started_at"),  # pruning past retention
    )

    id: Mapped[IntPk]
    org_id: Mapped[OrgId] = mapped_column(index=True)
    automation_id: Mapped[int] = mapped_column(ForeignKey("automations.id", ondelete="CASCADE"))
    automation_version: Mapped[int] = mapped_column()
    status: Mapped[str] = mapped_column(String(12), default="running")
    trigger_type: Mapped[str] = mapped_column(String(40))
    trigger_event_id: Mapped[int | None] = mapped_column(default=None)
    record_id: Mapped[int | None] = mapped_column(default=None)
    # A run for a private record is for that record's readers alone (its list entry, its
    # steps): ``records.index.private_to`` of the record as the run saw it; None: the org's.
    private_to: Mapped[int | None] = mapped_column(default=None)
    depth: Mapped[int] = mapped_column(default=1)
    # The first event of the change whose chain this run belongs to (its budget's name).
    cascade_event_id: Mapped[int | None] = mapped_column(default=None)
    # The slot of a schedule's run (UTC): the time it was due, not when it ran.
    slot_at: Mapped[datetime | None] = mapped_column(default=None)
    is_test: Mapped[bool] = mapped_column(default=False)
    started_by_id: Mapped[UserRef]
    # [{"node_id", "type", "status", "input", "output", "error", "started_at", "duration_ms"}]
    steps: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    # While ``running``: until when its worker holds it (renewed at each step); a run whose
    # lease ran out was cut off, and ``leases.settle`` decides what becomes of it.
    lease_until: Mapped[datetime | None] = mapped_column(default=None)
    # 2 once a cut-off run that had begun no action was taken up again (never more).
    attempt: Mapped[int] = mapped_column(default=1)
    # While it waits for a webhook (``queued``/``retrying``): what its later steps read.
    context: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)

    @property
    def record_private(self) -> bool:
        """Whether the run was for a private record."""
        return self.private_to is not None


class WebhookDelivery(db.Model):
    """One webhook message of a run's step: its exact body, and where its tries stand."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_run_id", "run_id"),
        # The queue health of an org: what waits, what failed lately.
        Index("ix_webhook_deliveries_org_id_status", "org_id", "status"),
    )

    id: Mapped[IntPk]
    org_id: Mapped[OrgId]
    run_id: Mapped[int] = mapped_column(ForeignKey("automation_runs.id", ondelete="CASCADE"))
    automation_id: Mapped[int] = mapped_column(ForeignKey("automations.id", ondelete="CASCADE"))
    node_id: Mapped[str] = mapped_column(String(64))
    # ``webhook-id``: the same for every try, so a receiver can drop a repeat.
    message_id: Mapped[str] = mapped_column(String(40), unique=True)
    url: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)  # the JSON exactly as sent (and signed)
    timeout_seconds: Mapped[float] = mapped_column()
    # queued | sending | retrying | delivered | failed (``webhooks.DeliveryStatus``)
    status: Mapped[str] = mapped_column(String(12), default="queued")
    attempts: Mapped[int] = mapped_column(default=0)
    max_attempts: Mapped[int] = mapped_column()
    next_attempt_at: Mapped[datetime | None] = mapped_column(default=None)
    # While ``sending``: until when the worker trying it holds it.
    lease_until: Mapped[datetime | None] = mapped_column(default=None)
    status_code: Mapped[int | None] = mapped_column(default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[CreatedAt]
    finished_at: Mapped[datetime | None] = mapped_column(default=None)

    tries: Mapped[list[WebhookAttempt]] = relationship(
        order_by="WebhookAttempt.id", cascade="all, delete-orphan", passive_deletes=True
    )


class WebhookAttempt(db.Model):
    """One try of a delivery: when, what answered (capped), how long it took."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (Index("ix_webhook_attempts_delivery_id", "delivery_id"),)

    id: Mapped[IntPk]
    delivery_id: Mapped[int] = mapped_column(
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE")
    )
    number: Mapped[int] = mapped_column()
    attempted_at: Mapped[datetime] = mapped_column(default=utcnow)
    status_code: Mapped[int | None] = mapped_column(default=None)
    duration_ms: Mapped[float] = mapped_column(default=0.0)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    response_excerpt: Mapped[str | None] = mapped_column(Text, default=None)
    # delivered | failed | retry: what this try decided.
    outcome: Mapped[str] = mapped_column(String(12))
    # An admin's Redeliver (None for the queue's own tries).
    redelivered_by_id: Mapped[UserRef]
