"""What a graph may refer to in its org: models, fields and placeholder paths."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from monark.automations.template import has_placeholder, placeholders
from monark.records.models import RecordModel
from monark.records.queries import member_ids, models_with_fields
from monark.records.values import validate_values

if TYPE_CHECKING:
    from monark.automations.graph import Graph, Node

TRIGGER_VALUES = ("type", "model", "event_id", "slot")
AUTOMATION_VALUES = ("id", "name")


@dataclass(frozen=True)
class FieldSpec:
    key: str
    label: str
    type: str
    required: bool
    options: tuple[str, ...]


@dataclass(frozen=True)
class ModelSpec:
    key: str
    name: str
    fields: tuple[FieldSpec, ...]

    def field(self, key: str) -> FieldSpec | None:
        """The field with ``key``, if the model has one."""
        return next((f for f in self.fields if f.key == key), None)

    def unknown(self, key: str) -> str:
        """The message for a field the model does not have."""
        known = ", ".join(f.key for f in self.fields) or "none"
        return f"{self.key} has no field {key!r} (fields: {known})."


@dataclass(frozen=True)
class OrgSchema:
    """An org's models and members, as plain data (what ``validate_graph`` checks against)."""

    models: Mapping[str, ModelSpec]
    member_ids: frozenset[int] = frozenset()

    def unknown_model(self, key: str) -> str:
        """The message for a model the org does not have."""
        known = ", ".join(self.models) or "none"
        return f"No model {key!r} in this organization (models: {known})."

    def check(self, graph: Graph) -> list[tuple[str, str]]:
        """``(field, message)`` for each model, field or placeholder it cannot resolve."""
        return check_references(graph, self)


def load_org_schema(org_id: int) -> OrgSchema:
    """Read an org's models, fields and member ids."""
    rows = models_with_fields(org_id, RecordModel.key)
    models = {
        m.key: ModelSpec(
            m.key,
            m.name,
            tuple(
                FieldSpec(f.key, f.label, f.type, f.required, tuple(f.options or ()))
                for f in m.fields
            ),
        )
        for m in rows
    }
    return OrgSchema(models, frozenset(member_ids(org_id)))


def _values(
    where: str, model: ModelSpec, values: dict[str, Any], partial: bool, org: OrgSchema
) -> Iterator[tuple[str, str]]:
    for key in values:
        if model.field(key) is None:
            yield f"{where}.values.{key}", model.unknown(key)
    literal = {
        k: v for k, v in values.items() if model.field(k) is not None and not has_placeholder(v)
    }
    members = set(org.member_ids)
    _, problems = validate_values(model.fields, literal, partial=True, member_ids=members)
    for problem in problems:
        yield f"{where}.{problem['field']}", problem["message"]
    if not partial:
        for spec in model.fields:
            if spec.required and spec.key not in values:
                yield f"{where}.values", f"{spec.label} ({spec.key}) is required by {model.key}."


@dataclass(frozen=True)
class _Trigger:
    """What nodes may read of the trigger; ``known`` is False when it is missing or invalid
    (that problem is reported once, on the trigger, not again on every node)."""

    known: bool
    model_key: str | None = None
    model: ModelSpec | None = None  # None also when the model key is unknown


def _placeholder(path: str, node: Node, graph: Graph, trigger: _Trigger) -> str | None:
    root, _, rest = path.partition(".")
    parts = rest.split(".") if rest else []
    if root == "record":
        if not trigger.known or (trigger.model_key and trigger.model is None):
            return None
        if not trigger.model_key:
            return f"{{{{{path}}}}}: the trigger has no model, so there is no record to read."
        if len(parts) != 1:
            return f"{{{{{path}}}}}: use {{{{record.<field>}}}} or {{{{record.id}}}}."
        if parts[0] != "id" and trigger.model.field(parts[0]) is None:
            return f"{{{{{path}}}}}: {trigger.model.unknown(parts[0])}"
        if node.type_key == "add_audit_note" and parts[0] != "id":
            return "Audit notes hold ids, never record values: use {{record.id}}."
        return None
    if root == "trigger":
        if parts not in ([p] for p in TRIGGER_VALUES):
            return f"{{{{{path}}}}}: use one of trigger.{', trigger.'.join(TRIGGER_VALUES)}."
        return None
    if root == "automation":
        if parts not in ([p] for p in AUTOMATION_VALUES):
            return f"{{{{{path}}}}}: use automation.id or automation.name."
        return None
    if root == "nodes":
        if len(parts) != 2:
            return f"{{{{{path}}}}}: use {{{{nodes.<node id>.<output>}}}}."
        source = graph.nodes.get(parts[0])
        if source is None:
            return f"{{{{{path}}}}}: no node has the id {parts[0]!r}."
        if source.id not in graph.ancestors(node.id):
            return f"{{{{{path}}}}}: {source.id} does not run before {node.id}."
        outputs = source.node_type.outputs if source.node_type else ()
        if parts[1] not in outputs:
            return f"{{{{{path}}}}}: {source.id} outputs {', '.join(outputs) or 'nothing'}."
        return None
    return f"{{{{{path}}}}}: placeholders start with record., trigger., automation. or nodes."


def _node_refs(node: Node, graph: Graph, org: OrgSchema, trigger: _Trigger):
    where, config = f"{node.where}.config", node.config
    if node.type_key == "field_matches" and trigger.known:
        if not trigger.model_key:
            yield f"{where}.field", "The trigger has no model, so there is no record to compare."
        elif trigger.model and config.field != "id" and trigger.model.field(config.field) is None:
            yield f"{where}.field", trigger.model.unknown(config.field)
    elif node.type_key in ("create_record", "update_record"):
        default = trigger.model_key if node.type_key == "update_record" else None
        key = config.model or default
        if not key:
            if trigger.known:
                yield f"{where}.model", "Name a model: the trigger has none."
        elif key not in org.models:
            if config.model:  # an unknown trigger model is reported on the trigger
                yield f"{where}.model", org.unknown_model(key)
        else:
            partial = node.type_key == "update_record"
            yield from _values(where, org.models[key], config.values, partial, org)
    for loc, path in placeholders(node.raw_config):
        message = _placeholder(path, node, graph, trigger)
        if message:
            yield f"{where}.{loc}", message


def check_references(graph: Graph, org: OrgSchema) -> list[tuple[str, str]]:
    """``(field, message)`` for each model, field or placeholder the org cannot resolve."""
    problems: list[tuple[str, str]] = []
    trigger = _Trigger(known=False)
    if graph.trigger is not None and graph.trigger.config is not None:
        key = getattr(graph.trigger.config, "model", None)
        where = f"{graph.trigger.where}.config"
        trigger = _Trigger(True, key, org.models.get(key) if key else None)
        if key and trigger.model is None:
            problems.append((f"{where}.model", org.unknown_model(key)))
        for index, name in enumerate(getattr(graph.trigger.config, "fields", [])):
            if trigger.model and trigger.model.field(name) is None:
                problems.append((f"{where}.fields.{index}", trigger.model.unknown(name)))
    for node in graph.nodes.values():
        if node.config is not None and node is not graph.trigger:
            problems += list(_node_refs(node, graph, org, trigger))
    return problems
