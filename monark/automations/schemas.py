"""Pydantic models of the automations routes (``automations.routes``): bodies and answers."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from monark.core.ids import Id
from monark.core.schemas import RowOut, StrictModel, UtcTime
from monark.records.schemas import FieldOut

# ---- inputs ----------------------------------------------------------------------------------


class AutomationPath(StrictModel):
    automation_id: Id = Field(description="The automation's id (see automation_list).")


class RunPath(StrictModel):
    run_id: Id = Field(description="The run's id.")


class CreateBody(StrictModel):
    name: str = Field(description="A name unique in the organization.", max_length=1000)
    graph: Any = Field(description='{"nodes": [{"id", "type", "config"}], "edges": [...]}')
    enabled: bool = Field(False, description="Start enabled (default: off until tested).")


class UpdateBody(StrictModel):
    graph: Any = Field(description="The whole new graph.")
    name: str | None = Field(None, max_length=1000)
    version: int | None = Field(None, description="The version you read; 409 if it moved on.")


class EnabledBody(StrictModel):
    enabled: bool = True


class TestBody(StrictModel):
    record_id: Id | None = Field(None, description="Default: the newest record.")


# ---- answers ---------------------------------------------------------------------------------


class Trigger(BaseModel):
    type: str
    model: str | None = None


class RunTrigger(BaseModel):
    type: str
    event_id: int | None
    record_id: int | None
    slot_at: UtcTime | None = Field(None, description="The slot a schedule's run was for.")


class RunOut(RowOut):
    id: int
    automation_id: int
    automation_version: int
    status: str
    is_test: bool
    trigger: RunTrigger
    depth: int
    error: str | None
    started_at: UtcTime | None
    finished_at: UtcTime | None
    url: str


class TryOut(BaseModel):
    number: int
    attempted_at: UtcTime
    status_code: int | None
    duration_ms: float
    error: str | None
    excerpt: str | None
    outcome: str = Field(description="delivered, retry or failed")
    redelivered: bool


class DeliveryOut(BaseModel):
    node_id: str
    message_id: str = Field(description="The webhook-id header, the same on every try.")
    url: str
    status: str = Field(description="queued, sending, retrying, delivered or failed")
    attempts: int
    max_attempts: int
    next_try_at: UtcTime | None
    error: str | None
    tries: list[TryOut]


class RunDetail(RunOut):
    state: str = Field(
        description="The status in words: retrying says which attempt of how many comes next "
        "and when."
    )
    attempt: int | None = Field(None, description="While retrying: the webhook try next.")
    max_attempts: int | None = None
    next_try_at: UtcTime | None = None
    steps: list[dict[str, Any]]
    deliveries: list[DeliveryOut]


class RunRef(RowOut):
    id: int
    status: str


class AutomationSummary(RowOut):
    id: int
    name: str
    enabled: bool
    version: int
    trigger: Trigger
    schedule: str | None = Field(None, description="When a schedule trigger runs, in words.")
    node_count: int
    owner_id: int | None = Field(description="The member whose current rights it acts within.")
    private_records: str = Field(
        description="skip: private records trigger nothing; keep: it runs for them and what "
        "it writes stays private, no webhook is sent; send: as keep, with webhooks sent."
    )
    disabled_reason: str | None = Field(None, description="Why it was switched off, if it was.")
    created_at: UtcTime | None
    updated_at: UtcTime | None
    url: str
    last_run: RunRef | None = None


class AutomationList(BaseModel):
    automations: list[AutomationSummary]


class AutomationOut(AutomationSummary):
    graph: Any  # as the caller may read it (webhook URLs shortened for non-admins)


class AutomationDetail(AutomationOut):
    recent_runs: list[RunOut]


class NodeTypeOut(BaseModel):
    type: str
    kind: str
    description: str
    outputs: list[str]
    config_schema: dict[str, Any]


class NodeTypes(BaseModel):
    node_types: list[NodeTypeOut]
    placeholders: str


class TriggerEventOut(BaseModel):
    type: str
    description: str
    config_schema: dict[str, Any]


class ModelFields(RowOut):
    key: str
    name: str
    fields: list[FieldOut]

    @classmethod
    def of(cls, model: Any, **given: Any) -> ModelFields:
        """A model of the org's schema, with its fields."""
        return super().of(model, fields=[FieldOut.of(f) for f in model.fields], **given)


class TriggerEvents(BaseModel):
    trigger_events: list[TriggerEventOut]
    models: list[ModelFields]
