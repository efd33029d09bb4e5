"""What condition and action nodes do when a run reaches them.

Each executor takes its node's parsed config and the run's context and returns the node's
output (a small dict later nodes can read as ``{{nodes.<id>.<key>}}``). A failure raises
``StepFailed`` or a domain error; the engine records it on the step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2

from monark.automations import configs
from monark.automations.privacy import WITHHELD_WEBHOOK
from monark.automations.template import render
from monark.core.errors import ValidationFailed
from monark.core.events import record_event
from monark.core.ids import parse_id
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records import services as records


class StepFailed(Exception):
    """An action could not do its job; the message is shown in the run history."""


class StepWithheld(Exception):
    """An action the privacy rule keeps from running (``privacy``): the step is skipped and
    the message says why."""


class StepWaiting(Exception):
    """A webhook handed to its delivery (``webhooks``): the step waits for it to end."""

    def __init__(self, delivery_id: int):
        super().__init__(f"waiting for delivery {delivery_id}")
        self.delivery_id = delivery_id


@dataclass
class RunContext:
    """What a run's nodes may read: the principal to act as and the placeholder values."""

    principal: Principal
    automation_id: int
    trigger_model: str | None
    values: dict[str, Any] = field(default_factory=dict)  # record, trigger, automation, nodes
    allow_private_webhooks: bool = False
    # For a run confined to a private record's readers: whether webhooks still go out.
    sends_private: bool = False
    run_id: int | None = None
    node_id: str = ""  # the node running now
    # The engine's: hand a webhook to its delivery, (url, payload, timeout, ctx) -> the
    # step's (status, output, error); renew the run's lease with the steps so far.
    send_webhook: Callable[..., tuple[str, Any, str | None]] | None = None
    heartbeat: Callable[[list[dict[str, Any]]], None] | None = None


# ---- condition ------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _compare(actual: Any, operator: str, expected: Any) -> bool:
    if operator == "is_empty":
        return actual is None or actual == ""
    if operator == "is_not_empty":
        return not (actual is None or actual == "")
    if operator in ("contains", "not_contains"):
        found = _text(expected).lower() in _text(actual).lower() if actual is not None else False
        return found if operator == "contains" else not found
    a, b = _number(actual), _number(expected)
    numeric = a is not None and b is not None
    if operator in ("equals", "not_equals"):
        same = a == b if numeric else _text(actual) == _text(expected)
        return same if operator == "equals" else not same
    if actual is None:
        return False
    if numeric:
        return a > b if operator == "greater_than" else a < b
    # Dates (YYYY-MM-DD) and other text compare as text.
    if operator == "greater_than":
        return _text(actual) > _text(expected)
    return _text(actual) < _text(expected)


def field_matches(config: configs.FieldMatchesConfig, ctx: RunContext) -> dict[str, Any]:
    """Compare a field of the triggering record; ``matched`` picks the outgoing edges."""
    record = ctx.values.get("record") or {}
    expected = render(config.value, ctx.values)
    return {"matched": _compare(record.get(config.field), config.operator, expected)}


# ---- actions --------------------------------------------------------------------------


def create_record(config: configs.CreateRecordConfig, ctx: RunContext) -> dict[str, Any]:
    """Create a record in the org, with the rendered values."""
    model = records.get_model(ctx.principal, config.model)
    record = records.create_record(ctx.principal, model, render(config.values, ctx.values))
    return {"record_id": record.id, "model": model.key}


def update_record(config: configs.UpdateRecordConfig, ctx: RunContext) -> dict[str, Any]:
    """Change fields of the triggering record (or of the record ``record_id`` names)."""
    key = config.model or ctx.trigger_model
    if not key:
        raise StepFailed("No model to update: the trigger has none and the node names none.")
    raw_id = render(config.record_id, ctx.values)
    try:
        record_id = None if isinstance(raw_id, bool) else parse_id(str(raw_id), "record_id")
    except ValidationFailed:
        record_id = None
    if record_id is None:
        raise StepFailed(f"record_id resolved to {raw_id!r}, not a record id.")
    model = records.get_model(ctx.principal, key)
    values = render(config.values, ctx.values)
    record, changed = records.update_record(ctx.principal, model, record_id, values)
    return {"record_id": record.id, "changed": changed}


def webhook_client(timeout: float) -> httpx2.Client:
    """The HTTP client webhooks are sent with (a seam for tests)."""
    return httpx2.Client(
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,  # no proxies from the environment
        headers={"User-Agent": "Monark-Automations/1"},
    )


def send_webhook(config: configs.SendWebhookConfig, ctx: RunContext) -> dict[str, Any]:
    """POST JSON to the URL, as a delivery of its own (``webhooks``: signed, retried, its
    address checked at every try); the step ends with it: a 2xx succeeds, anything else
    in the end fails.

    A run for a private record sends nothing unless the automation was opted in to it.
    """
    if ctx.principal.confined_to is not None and not ctx.sends_private:
        raise StepWithheld(WITHHELD_WEBHOOK)
    if config.payload is not None:
        payload = render(config.payload, ctx.values)
    else:
        payload = {k: ctx.values.get(k) for k in ("automation", "trigger", "record")}
    if ctx.send_webhook is None:
        raise StepFailed("Webhooks are sent by a run of the engine only.")
    status, output, error = ctx.send_webhook(config.url, payload, config.timeout_seconds, ctx)
    if status == "failed":
        raise StepFailed(error or "The webhook was not delivered.")
    if status == "succeeded":
        return output
    raise StepWaiting(output["delivery_id"])


def add_audit_note(config: configs.AddAuditNoteConfig, ctx: RunContext) -> dict[str, Any]:
    """Write an ``automation.note`` event to the audit log."""
    note = str(render(config.note, ctx.values))[:500]
    record_id = (ctx.values.get("record") or {}).get("id")
    subject = ("record", record_id) if record_id else ("automation", ctx.automation_id)
    event = record_event(
        ctx.principal,
        "automation.note",
        subject[0],
        subject[1],
        {"automation_id": ctx.automation_id, "note": note},
    )
    db.session.commit()
    return {"event_id": event.id}
