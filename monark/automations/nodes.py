"""The node registry: every node type's key, kind, description, config schema and outputs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from monark.automations import actions, configs

NodeKind = Literal["trigger", "condition", "action"]
Executor = Callable[[Any, actions.RunContext], dict[str, Any]]


@dataclass(frozen=True)
class NodeType:
    """One kind of node a graph may use."""

    key: str
    kind: NodeKind
    description: str
    config_model: type[BaseModel]
    outputs: tuple[str, ...] = ()
    run: Executor | None = None  # triggers have none: the event is their output

    def config_schema(self) -> dict[str, Any]:
        """The config's JSON Schema (what the assistant reads to write a node)."""
        return self.config_model.model_json_schema()


Registry = Mapping[str, NodeType]

RECORD_EVENTS = ("record.created", "record.updated", "record.deleted")
SCHEDULE = "schedule"

_TYPES = (
    NodeType(
        "record.created",
        "trigger",
        "When a record of the model is created.",
        configs.RecordTriggerConfig,
        ("record_id",),
    ),
    NodeType(
        "record.updated",
        "trigger",
        "When a record of the model changes (optionally: one of the listed fields).",
        configs.RecordUpdatedConfig,
        ("record_id",),
    ),
    NodeType(
        "record.deleted",
        "trigger",
        "When a record of the model is deleted; {{record.*}} holds its last values.",
        configs.RecordTriggerConfig,
        ("record_id",),
    ),
    NodeType(
        "manual",
        "trigger",
        "Only when someone starts a test run (optionally on a record of the model).",
        configs.ManualConfig,
        ("record_id",),
    ),
    NodeType(
        "schedule",
        "trigger",
        "On a schedule (a cron expression in the organization's time zone, set in Settings): "
        "each slot runs once; a slot missed while no worker ran runs late only if it is "
        "less than one period late, else it is recorded as skipped. There is no record: "
        "{{trigger.slot}} is the slot's time.",
        configs.ScheduleConfig,
        ("slot",),
    ),
    NodeType(
        "field_matches",
        "condition",
        "Compare a field of the triggering record. Edges leaving it may say "
        'when: "true" (the default) or when: "false".',
        configs.FieldMatchesConfig,
        ("matched",),
        actions.field_matches,
    ),
    NodeType(
        "create_record",
        "action",
        "Create a record in a model; values may use {{record.<field>}} placeholders.",
        configs.CreateRecordConfig,
        ("record_id", "model"),
        actions.create_record,
    ),
    NodeType(
        "update_record",
        "action",
        "Change fields of the triggering record, or of the record record_id names.",
        configs.UpdateRecordConfig,
        ("record_id", "changed"),
        actions.update_record,
    ),
    NodeType(
        "send_webhook",
        "action",
        "POST JSON (signed) to an http(s) URL. A 2xx answer succeeds; a timeout, a lost "
        "connection, 408, 429 or 5xx is tried again with growing waits (WEBHOOK_MAX_ATTEMPTS "
        "tries in all) before the step fails; a redirect or another 4xx fails it at once.",
        configs.SendWebhookConfig,
        ("status_code",),
        actions.send_webhook,
    ),
    NodeType(
        "add_audit_note",
        "action",
        "Write a note to the organization's audit log.",
        configs.AddAuditNoteConfig,
        ("event_id",),
        actions.add_audit_note,
    ),
)

REGISTRY: Registry = {node_type.key: node_type for node_type in _TYPES}


def trigger_types(registry: Registry = REGISTRY) -> list[NodeType]:
    """The trigger node types, in registry order."""
    return [t for t in registry.values() if t.kind == "trigger"]
