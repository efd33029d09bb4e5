"""Editing a proposed records write on its card: a form typed by the model's own fields,
and the same check of the values the service makes, before anything is stored.

The record a write names (``model``, ``record_id``: its path) is never part of the form.
"""

from __future__ import annotations

from typing import Any

from monark.core.rbac import Principal
from monark.core.routes import found_or_none
from monark.records import services as records
from monark.records.models import ModelField
from monark.records.queries import member_ids, members
from monark.records.values import LONG_TEXT_MAX, TEXT_MAX, validate_values


def _field_schema(field: ModelField, people: list[tuple[int, str]]) -> dict[str, Any]:
    """One field as JSON Schema, as a form draws it."""
    base: dict[str, Any] = {"title": field.label}
    kind = field.type
    if kind == "text":
        return base | {"type": "string", "maxLength": TEXT_MAX}
    if kind == "long_text":
        return base | {"type": "string", "maxLength": LONG_TEXT_MAX, "format": "textarea"}
    if kind == "number":
        return base | {"type": "number"}
    if kind == "date":
        return base | {"type": "string", "format": "date"}
    if kind == "boolean":
        return base | {"type": "boolean"}
    if kind == "select":
        return base | {"type": "string", "enum": list(field.options or [])}
    if kind == "user":
        ids, names = [p[0] for p in people], [p[1] for p in people]
        return base | {"type": "integer", "enum": ids, "x-labels": names}
    return base | {"type": "string"}


def values_schema(principal: Principal, args: dict[str, Any], *, create: bool) -> dict[str, Any]:
    """The form of a create or update card: each field of the model, typed, required ones
    marked on a create (an update leaves a blank field as it is), and the visibility."""
    model = found_or_none(records.get_model, principal, str(args.get("model")))
    fields = list(model.fields) if model is not None else []
    people = (
        [(u.id, u.name) for u in members(principal.org_id)]
        if any(f.type == "user" for f in fields)
        else []
    )
    values = {
        "type": "object",
        "title": "Values",
        "properties": {f.key: _field_schema(f, people) for f in fields},
        "required": [f.key for f in fields if f.required] if create else [],
    }
    visibility: dict[str, Any] = {
        "title": "Visibility",
        "type": "string",
        "enum": ["org", "private"],
        "x-labels": ["Everyone in the organization", "Only its creator"],
    }
    if create:
        visibility["default"] = "org"  # what the route does without one
    return {
        "type": "object",
        "properties": {"values": values, "visibility": visibility},
        "required": ["values"],
    }


def create_schema(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """The edit form of ``records_create``."""
    return values_schema(principal, args, create=True)


def update_schema(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """The edit form of ``records_update``."""
    return values_schema(principal, args, create=False)


def _check(principal: Principal, args: dict[str, Any], partial: bool) -> list[dict[str, Any]]:
    model = found_or_none(records.get_model, principal, str(args.get("model")))
    values = args.get("values")
    if model is None or not isinstance(values, dict):
        return []  # the route's models and the service say what is wrong with these
    ids = member_ids(principal.org_id) if any(f.type == "user" for f in model.fields) else set()
    _, problems = validate_values(model.fields, values, partial=partial, member_ids=ids)
    return problems


def check_create(principal: Principal, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Values a create could never store, named by field (before any card)."""
    return _check(principal, args, partial=False)


def check_update(principal: Principal, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Values an update could never store, named by field (before any card)."""
    return _check(principal, args, partial=True)
