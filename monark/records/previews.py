"""Plain-language previews of the records routes' tool calls, for the assistant's cards.

A preview is computed once, when the call is stored, and kept on the call, so a card
shows what the user was asked to approve (for an update: each field before → after).
Everything is read as the user, through the services' own permission checks.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from monark.core.ids import id_or_none
from monark.core.rbac import Principal
from monark.core.routes import AllowScope, found_or_none
from monark.extensions import db
from monark.records import services as records
from monark.records.models import RecordModel


def _model(principal: Principal, args: dict[str, Any]) -> tuple[RecordModel | None, str]:
    """The model the call names, if the user may see it, and how the card names it."""
    key = args.get("model")
    model = found_or_none(records.get_model, principal, str(key))
    return model, model.name if model is not None else f"“{key}”"


def _label(model: RecordModel | None, key: str) -> str:
    if model is not None:
        for field in model.fields:
            if field.key == key:
                return field.label
    return key


def _record_title(principal: Principal, model: RecordModel | None, record_id: Any):
    wanted = id_or_none(record_id)
    if model is None or wanted is None:
        return None, f"record #{record_id}"
    record = found_or_none(records.get_record, principal, model, wanted)
    if record is None:
        return None, f"record #{record_id}"
    return record, f"“{records.record_label(model, record)}”"


def _values(model: RecordModel | None, values: Any) -> list[dict[str, Any]]:
    if not isinstance(values, dict):
        return []
    return [{"field": _label(model, k), "after": v} for k, v in values.items()]


def create(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A create: the model, and each value the record will get."""
    model, name = _model(principal, args)
    private = " (private)" if args.get("visibility") == "private" else ""
    return {
        "headline": f"create a record in {name}{private}",
        "changes": _values(model, args.get("values")),
    }


def update(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """An update: each field before → after, read as the user sees the record now."""
    model, name = _model(principal, args)
    record, title = _record_title(principal, model, args.get("record_id"))
    before = record.values if record is not None else {}
    values = args.get("values") if isinstance(args.get("values"), dict) else {}
    changes = [
        # A field the update would leave as it is says so, rather than "done → done".
        {"field": _label(model, k), "after": v, "unchanged": True}
        if record is not None and before.get(k) == v
        else {"field": _label(model, k), "before": before.get(k), "after": v}
        for k, v in values.items()
    ]
    if args.get("visibility"):
        changes.append(
            {
                "field": "Visibility",
                "before": record.visibility if record is not None else None,
                "after": args["visibility"],
            }
        )
    return {
        "headline": f"update {title} in {name}",
        "changes": changes,
    }


def delete(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A delete: which record, by its title, and the values it takes with it."""
    model, name = _model(principal, args)
    record, title = _record_title(principal, model, args.get("record_id"))
    values = record.values if record is not None else {}
    changes = [
        {"field": field.label, "before": values[field.key], "after": None}
        for field in (model.fields if model is not None else [])
        if values.get(field.key) not in (None, "", [])
    ]
    return {"headline": f"delete {title} from {name}", "changes": changes}


def list_records(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A list: the model, the search, the filters and the sort."""
    extra = f" matching “{args['q']}”" if args.get("q") else ""
    filters = args.get("filter") or []
    if isinstance(filters, str):
        filters = [filters]
    if filters:
        extra += " where " + ", ".join(str(f) for f in filters[:5])
    if args.get("sort"):
        extra += f" by {args['sort']}"
    return {"headline": f"list records in {_model(principal, args)[1]}{extra}"}


def get(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A read of one record."""
    _, name = _model(principal, args)
    return {"headline": f"read record #{args.get('record_id')} in {name}"}


def model_get(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A read of a model's fields."""
    return {"headline": f"read the fields of {_model(principal, args)[1]}"}


def _model_name(org_id: int, key: str) -> str:
    """How a card names the model ``key`` of an org (quoted as given when there is none)."""
    name = db.session.scalar(
        select(RecordModel.name).where(RecordModel.org_id == org_id, RecordModel.key == key)
    )
    return name or f"“{key}”"


# What "Allow … for this conversation" of a records write covers: one model, the one its
# path names (``records.services.get_record`` finds a record only in that model, so a
# record id of another model fails instead of slipping through).
NEW_RECORDS = AllowScope("model", lambda org_id, key: f"new records in {_model_name(org_id, key)}")
RECORD_UPDATES = AllowScope(
    "model", lambda org_id, key: f"updates to {_model_name(org_id, key)} records"
)
