"""How the assistant's record writes are undone (``RouteDescriptor.undo``; see ``approvals.undo``).

Each hook reads, as the user and in the write's own unit of work, what putting the record
back needs; then, from the write's result, says the reverse call, how to read the record
again and what it looked like right after the write (an undo is refused once it differs).

A deleted record is created again with its values and visibility through ``records_create``:
records are hard-deleted and the create route is the user's own path, so it comes back
with a new id (ids are never reused).
"""

from __future__ import annotations

from typing import Any

from monark.core.rbac import Principal
from monark.core.routes import Undo
from monark.records import services


def _shown(value: Any) -> str:
    text = "nothing" if value in (None, "") else repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def _record(principal: Principal, args: dict[str, Any], lock: bool = False):
    model = services.get_model(principal, str(args.get("model")))
    record_id = int(args.get("record_id") or 0)
    return model, services.get_record(principal, model, record_id, lock=lock)


def _read(args: dict[str, Any], record_id: int) -> dict[str, Any]:
    return {"tool": "records_get", "arguments": {"model": args["model"], "record_id": record_id}}


def _after(result: dict[str, Any], fields: list[str]) -> list[dict[str, Any]]:
    values = result.get("values") or {}
    after = [{"path": ["values", k], "label": k, "value": values.get(k)} for k in fields]
    return after


# ---- update: back to the values before ------------------------------------------------------


def _update_before(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    # Locked, as the update that follows reads it: the before-state is what it changes.
    _, record = _record(principal, args, lock=True)
    keys = list((args.get("values") or {}).keys())
    return {"values": {k: record.values.get(k) for k in keys}, "visibility": record.visibility}


def _update_plan(
    principal: Principal, args: dict[str, Any], result: Any, before: dict[str, Any]
) -> dict[str, Any] | None:
    changed = list(result.get("changed_fields") or [])
    if not changed:
        return None  # nothing changed: nothing to put back
    fields = [k for k in changed if k != "visibility"]
    reverse: dict[str, Any] = {
        "model": args["model"],
        "record_id": result["id"],
        "values": {k: before["values"].get(k) for k in fields},
    }
    after = _after(result, fields)
    if "visibility" in changed:
        reverse["visibility"] = before["visibility"]
        after.append({"path": ["visibility"], "label": "visibility", "value": result["visibility"]})
    said = ", ".join(f"{k} back to {_shown(before['values'].get(k))}" for k in fields)
    if "visibility" in changed:
        said = ", ".join(filter(None, [said, f"visibility back to {before['visibility']!r}"]))
    return {
        "reverse": {"tool": "records_update", "arguments": reverse},
        "read": _read(args, result["id"]),
        "after": after,
        "summary": f"put record #{result['id']}'s {said}",
    }


UPDATE = Undo(before=_update_before, plan=_update_plan)


# ---- create: delete it again ----------------------------------------------------------------


def _create_before(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return {}


def _create_plan(
    principal: Principal, args: dict[str, Any], result: Any, before: dict[str, Any]
) -> dict[str, Any]:
    values = result.get("values") or {}
    return {
        "reverse": {
            "tool": "records_delete",
            "arguments": {"model": args["model"], "record_id": result["id"]},
        },
        "read": _read(args, result["id"]),
        "after": _after(result, sorted(values)),
        "summary": f"deleted the record it created, #{result['id']} {_shown(result.get('title'))}",
    }


CREATE = Undo(before=_create_before, plan=_create_plan)


# ---- delete: create it again with its values (a new id) -------------------------------------


def _delete_before(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    _, record = _record(principal, args)
    return {
        "values": dict(record.values),
        "visibility": record.visibility,
        "title": record.title,
        "id": record.id,
    }


def _delete_plan(
    principal: Principal, args: dict[str, Any], result: Any, before: dict[str, Any]
) -> dict[str, Any]:
    return {
        "reverse": {
            "tool": "records_create",
            "arguments": {
                "model": args["model"],
                "values": before["values"],
                "visibility": before["visibility"],
            },
        },
        "read": None,  # a deleted record cannot change meanwhile
        "after": [],
        "summary": f"restored the deleted record {_shown(before['title'])} with its values "
        f"(as a new record: #{before['id']} is not reused)",
    }


DELETE = Undo(before=_delete_before, plan=_delete_plan)
