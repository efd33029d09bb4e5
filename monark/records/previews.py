"""Plain-language previews of the records routes' tool calls, for the assistant's cards.

A preview is computed once, when the call is stored, and kept on the call, so a card
shows what the user was asked to approve (for an update: each field before → after).
Everything is read as the user, through the services' own permission checks.
"""

from __future__ import annotations

from typing import Any

from monark.core.errors import AppError
from monark.core.ids import id_or_none
from monark.core.rbac import Principal
from monark.records import services as records
from monark.records.models import RecordModel


def _model(principal: Principal, key: Any) -> RecordModel | None:
    try:
        return records.get_model(principal, str(key))
    except AppError:
        return None


def _model_name(model: RecordModel | None, key: Any) -> str:
    return model.name if model is not None else f"“{key}”"


def _label(model: RecordModel | None, key: str) -> str:
    if model is not None:
        for field in model.fields:
            if field.key == key:
                return field.label
    return key


def _record_title(principal: Principal, model: RecordModel | None, record_id: Any):
    if model is None:
        return None, f"record #{record_id}"
    wanted = id_or_none(record_id)
    try:
        record = records.get_record(principal, model, wanted) if wanted else None
    except AppError:
        record = None
    if record is None:
        return None, f"record #{record_id}"
    return record, f"“{records.record_label(model, record)}”"


def _values(model: RecordModel | None, values: Any) -> list[dict[str, Any]]:
    if not isinstance(values, dict):
        return []
    return [{"field": _label(model, k), "after": v} for k, v in values.items()]


def create(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A create: the model, and each value the record will get."""
    model = _model(principal, args.get("model"))
    private = " (private)" if args.get("visibility") == "private" else ""
    return {
        "headline": f"create a record in {_model_name(model, args.get('model'))}{private}",
        "changes": _values(model, args.get("values")),
    }


def update(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """An update: each field before → after, read as the user sees the record now."""
    model = _model(principal, args.get("model"))
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
        "headline": f"update {title} in {_model_name(model, args.get('model'))}",
        "changes": changes,
    }


def delete(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A delete: which record, by its title."""
    model = _model(principal, args.get("model"))
    _, title = _record_title(principal, model, args.get("record_id"))
    return {"headline": f"delete {title} from {_model_name(model, args.get('model'))}"}


def list_records(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A list: the model and the search."""
    model = _model(principal, args.get("model"))
    extra = f" matching “{args['q']}”" if args.get("q") else ""
    return {"headline": f"list records in {_model_name(model, args.get('model'))}{extra}"}


def get(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A read of one record."""
    model = _model(principal, args.get("model"))
    return {
        "headline": f"read record #{args.get('record_id')} in "
        f"{_model_name(model, args.get('model'))}"
    }


def model_get(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A read of a model's fields."""
    model = _model(principal, args.get("model"))
    return {"headline": f"read the fields of {_model_name(model, args.get('model'))}"}
