"""What /metrics reads at scrape time of the assistant and the queue (``core.metrics``)."""

from __future__ import annotations

from flask import Flask
from sqlalchemy import func, select

from monark.chat.models import ToolCall, ToolCallStatus
from monark.core import jobs, metrics
from monark.extensions import db


def approvals_waiting(app: Flask) -> float:
    """Proposed writes waiting for a decision, in every org (the panel's and the inbox's)."""
    count = db.session.scalar(
        select(func.count()).select_from(ToolCall).where(ToolCall.status == ToolCallStatus.PROPOSED)
    )
    db.session.rollback()  # a read: nothing left open
    return float(count or 0)


def jobs_queued(app: Flask) -> float:
    """Jobs waiting in the queue (automations, webhooks, upkeep)."""
    return float(jobs.queue(app).huey.pending_count())


def install(app: Flask) -> None:
    """Give /metrics its gauges of what waits."""
    metrics.add_state(
        app, "monark_approvals_waiting", "Proposed writes waiting.", approvals_waiting
    )
    metrics.add_state(app, "monark_jobs_queued", "Jobs waiting in the queue.", jobs_queued)
