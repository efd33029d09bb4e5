"""Record and model services: plain functions over a Principal, no request access.

Models and their fields; one record to read, create, update or delete. Lists of records,
their search and filter, are in ``monark.records.queries``."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from sqlalchemy import Select, bindparam, event, inspect, select
from sqlalchemy.orm import Session, joinedload

from monark.core.errors import Forbidden, NotFound, ValidationFailed
from monark.core.events import record_event, save_new
from monark.core.models import MAX_ID
from monark.core.rbac import Principal
from monark.core.uow import for_update, writing_unit
from monark.extensions import db
from monark.records.index import private_to
from monark.records.models import FIELD_TYPES, ModelField, Record, RecordModel, RecordValue
from monark.records.queries import member_ids, models_with_fields, visible_to
from monark.records.values import display_title, search_text, validate_values

KEY_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


# ---- models ---------------------------------------------------------------------------


def list_models(principal: Principal) -> list[RecordModel]:
    """The org's models with their fields, by name."""
    principal.require("records.view")
    return models_with_fields(principal.org_id)


@cache
def _model_by_key() -> Select[tuple[RecordModel]]:
    """One query for a model and its fields, built once: every record view and tool call
    starts here, and a second (selectin) round trip cost more than the join, as building
    the statement each time did (bench/chat_bench.py)."""
    return (
        select(RecordModel)
        .where(RecordModel.org_id == bindparam("org_id"), RecordModel.key == bindparam("key"))
        .options(joinedload(RecordModel.fields))
    )


def get_model(principal: Principal, key: str) -> RecordModel:
    """One model of the org by key, with fields; ``NotFound`` otherwise."""
    principal.require("records.view")
    session = db.session()
    known = session.info.setdefault(_MODELS, {})
    model = known.get((principal.org_id, key))
    if model is not None and _still_loaded(session, model):
        return model
    params = {"org_id": principal.org_id, "key": key}
    model = db.session.execute(_model_by_key(), params).unique().scalar_one_or_none()
    if model is None:
        raise NotFound(f"No model '{key}' in this organization.")
    known[(principal.org_id, key)] = model
    return model


# The models a session looked up by key: a card, its undo and its write each name the
# model, and the query would hand back this very object (from the identity map) anyway.
_MODELS = "records.models_by_key"


def _still_loaded(session: Any, model: RecordModel) -> bool:
    """Whether ``model`` is what the query would give: in this session, not expired,
    its fields loaded (a commit, a rollback or ``expire_all`` since: read it again)."""
    state = inspect(model)
    loaded = not state.expired_attributes and "fields" not in state.unloaded
    return state.session is session and loaded


@event.listens_for(Session, "after_flush")
def _forget_changed_models(session: Session, _context: Any) -> None:
    """A flush that adds, changes or deletes a model or a field: look models up again."""
    rows = (*session.new, *session.dirty, *session.deleted)
    if any(isinstance(r, RecordModel | ModelField) for r in rows):
        session.info.pop(_MODELS, None)


def _check_key(key: str, field: str) -> None:
    if not KEY_RE.fullmatch(key or ""):
        raise ValidationFailed(
            "Invalid key.",
            [
                {
                    "field": field,
                    "message": "Use 1-40 lowercase letters, digits or _, starting with a letter.",
                }
            ],
        )


def _check_name(name: str, field: str, limit: int = 80) -> str:
    name = (name or "").strip()
    if not name or len(name) > limit:
        raise ValidationFailed(
            "Invalid name.", [{"field": field, "message": f"Give 1-{limit} characters."}]
        )
    return name


def create_model(principal: Principal, key: str, name: str, description: str = "") -> RecordModel:
    """Create a model; its key must be unique in the org."""
    principal.require("models.manage")
    _check_key(key, "key")
    name = _check_name(name, "name")
    exists = db.session.scalar(
        select(RecordModel.id).where(RecordModel.org_id == principal.org_id, RecordModel.key == key)
    )
    if exists:
        raise ValidationFailed(
            "Key taken.", [{"field": "key", "message": f"A model with key '{key}' exists."}]
        )
    model = RecordModel(
        org_id=principal.org_id, key=key, name=name, description=description.strip()[:500]
    )
    return save_new(principal, model, "model.created", "model", id_key="model_id")


def update_model(principal: Principal, model: RecordModel, name: str, description: str) -> None:
    """Rename a model or change its description."""
    principal.require("models.manage")
    model.name = _check_name(name, "name")
    model.description = (description or "").strip()[:500]
    record_event(principal, "model.updated", "model", model.id, {"model_id": model.id})
    db.session.commit()


def delete_model(principal: Principal, model: RecordModel) -> None:
    """Delete a model and all its records."""
    principal.require("models.manage")
    model_id = model.id
    # Bulk deletes skip the ORM's flush (and SQLite enforces no cascades): the value
    # index goes first, explicitly.
    records = Record.__table__
    db.session.execute(db.delete(RecordValue).where(RecordValue.model_id == model_id))
    db.session.execute(db.delete(records).where(records.c.model_id == model_id))
    db.session.delete(model)
    record_event(principal, "model.deleted", "model", model_id, {"model_id": model_id})
    db.session.commit()


def _clean_options(field_type: str, options: list[str]) -> list[str]:
    if field_type != "select":
        return []
    clean = []
    for option in options:
        option = option.strip()
        if option and option not in clean:
            clean.append(option[:60])
    if not clean:
        raise ValidationFailed(
            "A select field needs options.",
            [{"field": "options", "message": "Give at least one option (one per line)."}],
        )
    return clean


def add_field(
    principal: Principal,
    model: RecordModel,
    *,
    key: str,
    label: str,
    type: str,
    required: bool = False,
    options: list[str] | None = None,
) -> ModelField:
    """Add a typed field to a model."""
    principal.require("models.manage")
    _check_key(key, "key")
    label = _check_name(label, "label")
    if type not in FIELD_TYPES:
        raise ValidationFailed(
            "Unknown type.",
            [{"field": "type", "message": f"Choose one of: {', '.join(FIELD_TYPES)}."}],
        )
    if any(f.key == key for f in model.fields):
        raise ValidationFailed(
            "Key taken.", [{"field": "key", "message": f"The model has a field '{key}'."}]
        )
    field = ModelField(
        key=key,
        label=label,
        type=type,
        required=required,
        options=_clean_options(type, options or []),
        position=max((f.position for f in model.fields), default=-1) + 1,
    )
    model.fields.append(field)
    db.session.flush()
    record_event(
        principal, "field.created", "model", model.id, {"model_id": model.id, "field": key}
    )
    db.session.commit()
    return field


def update_field(
    principal: Principal,
    field: ModelField,
    *,
    label: str,
    required: bool,
    options: list[str] | None = None,
) -> None:
    """Change a field's label, required flag or select options (its type is fixed)."""
    principal.require("models.manage")
    field.label = _check_name(label, "label")
    field.required = required
    field.options = _clean_options(field.type, options or [])
    record_event(
        principal,
        "field.updated",
        "model",
        field.model_id,
        {"model_id": field.model_id, "field": field.key},
    )
    db.session.commit()


def delete_field(principal: Principal, field: ModelField) -> None:
    """Remove a field and its values from every record of the model."""
    principal.require("models.manage")
    model_id, key = field.model_id, field.key
    remaining = [f for f in field.model.fields if f.key != key]
    for record in db.session.scalars(select(Record).where(Record.model_id == model_id)):
        if key in record.values:
            record.values = {k: v for k, v in record.values.items() if k != key}
            # The title and search text must not keep the removed values either.
            record.title = display_title(remaining, record.values)
            record.search_text = search_text(remaining, record.values)
    db.session.delete(field)
    record_event(
        principal, "field.deleted", "model", model_id, {"model_id": model_id, "field": key}
    )
    db.session.commit()


def get_field(model: RecordModel, field_id: int) -> ModelField:
    """A field of ``model`` by id; ``NotFound`` otherwise."""
    for field in model.fields:
        if field.id == field_id:
            return field
    raise NotFound("No such field.")


# ---- records --------------------------------------------------------------------------


def _member_ids_for(model: RecordModel, org_id: int) -> set[int]:
    return member_ids(org_id) if any(f.type == "user" for f in model.fields) else set()


def get_record(
    principal: Principal, model: RecordModel, record_id: int, *, lock: bool = False
) -> Record:
    """A record the principal may see; ``NotFound`` for anything else, never Forbidden.

    ``lock`` holds the row until commit (see ``for_update``), so two partial
    updates merge one after the other instead of one overwriting the other's fields.
    """
    principal.require("records.view")
    if not 0 < record_id <= MAX_ID:  # no row has it (and PostgreSQL could not even bind it)
        raise NotFound(f"No record {record_id} in {model.name}.")
    held = _held_rows() if lock else None
    key = (principal, model.id, record_id)
    if held is not None and key in held:
        return held[key]
    stmt = select(Record).where(
        Record.id == record_id,
        Record.org_id == principal.org_id,
        Record.model_id == model.id,
        visible_to(principal),
    )
    record = db.session.scalar(for_update(stmt) if lock else stmt)
    if record is None:
        raise NotFound(f"No record {record_id} in {model.name}.")
    if held is not None:
        held[key] = record
    return record


# Records a writing unit of work read locked (its undo's before-state, say): nobody else
# may change them until it ends, so the write that follows reads each once. Forgotten at
# any flush or rollback of the session, after which its own writes may have moved them.
_HELD = "records.held_rows"


def _held_rows() -> dict[Any, Record] | None:
    """The locked records this writing unit read and has not changed since, by
    ``(principal, model id, record id)``; None outside one."""
    if writing_unit() is None:
        return None
    return db.session().info.setdefault(_HELD, {})


@event.listens_for(Session, "after_flush")
@event.listens_for(Session, "after_soft_rollback")
def _forget_held_rows(session: Session, *_: Any) -> None:
    session.info.pop(_HELD, None)


def _check_visibility(visibility: str | None) -> str:
    if visibility in (None, ""):
        return "org"
    if visibility not in ("org", "private"):
        raise ValidationFailed(
            "Invalid visibility.",
            [{"field": "visibility", "message": "Use 'org' or 'private'."}],
        )
    return visibility


def can_change_visibility(principal: Principal, record: Record) -> bool:
    """Only a record's creator, or a role that sees private records, may change its visibility.

    Anyone else making a shared record private would hide it from everyone (themselves too).
    """
    if principal.can("records.view_private"):
        return True
    return principal.user_id is not None and record.creator_id == principal.user_id


def _check_confined(principal: Principal, record: Record) -> None:
    """A principal confined to a private record's readers (``Principal.confined_to``)
    writes only records no one else may read: private to the same creator, or to none
    (read only by roles with records.view_private)."""
    if principal.confined_to is None:
        return
    if private_to(record.visibility, record.creator_id) in (0, principal.confined_to):
        return
    raise Forbidden(
        f"Not written: record {record.id} may be read by people who may not read the "
        "private record this automation run is for."
    )


def create_record(
    principal: Principal, model: RecordModel, values: dict[str, Any], visibility: str | None = None
) -> Record:
    """Validate and store a new record, with its ``record.created`` event.

    A confined principal's record is private to the same people as the record it was
    confined by: private, with that record's creator.
    """
    principal.require("records.create")
    visibility = _check_visibility(visibility)
    creator_id = principal.user_id
    if principal.confined_to is not None:
        visibility, creator_id = "private", principal.confined_to or None
    clean, problems = validate_values(
        model.fields, values, partial=False, member_ids=_member_ids_for(model, principal.org_id)
    )
    if problems:
        raise ValidationFailed("The record has invalid values.", problems)
    clean = {f.key: clean.get(f.key) for f in model.fields if clean.get(f.key) is not None}
    record = Record(
        org_id=principal.org_id,
        model_id=model.id,
        values=clean,
        title=display_title(model.fields, clean),
        search_text=search_text(model.fields, clean),
        visibility=visibility,
        creator_id=creator_id,
    )
    payload = {"model_id": model.id, "fields": sorted(clean)}
    return save_new(principal, record, "record.created", "record", payload)


def update_record(
    principal: Principal,
    model: RecordModel,
    record_id: int,
    values: dict[str, Any],
    visibility: str | None = None,
) -> tuple[Record, list[str]]:
    """Apply a partial update; returns the record and the names of the fields that changed."""
    principal.require("records.update")
    record = get_record(principal, model, record_id, lock=True)
    _check_confined(principal, record)
    clean, problems = validate_values(
        model.fields, values, partial=True, member_ids=_member_ids_for(model, principal.org_id)
    )
    if visibility is not None:
        try:
            visibility = _check_visibility(visibility)
        except ValidationFailed as err:
            problems.extend(err.details)
        else:
            if visibility != record.visibility and (
                principal.confined_to is not None or not can_change_visibility(principal, record)
            ):
                problems.append(
                    {
                        "field": "visibility",
                        "message": "Only the record's creator or an admin can change its "
                        "visibility.",
                    }
                )
    if problems:
        raise ValidationFailed("The record has invalid values.", problems)
    merged = dict(record.values)
    changed = []
    for key, value in clean.items():
        if merged.get(key) != value:
            changed.append(key)
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    if visibility is not None and visibility != record.visibility:
        record.visibility = visibility
        changed.append("visibility")
    if changed:
        record.values = merged
        record.title = display_title(model.fields, merged)
        record.search_text = search_text(model.fields, merged)
        record_event(
            principal,
            "record.updated",
            "record",
            record.id,
            {"model_id": model.id, "fields": sorted(changed)},
        )
    db.session.commit()
    return record, sorted(changed)


def delete_record(principal: Principal, model: RecordModel, record_id: int) -> None:
    """Delete a record the principal may see, with its ``record.deleted`` event."""
    principal.require("records.delete")
    record = get_record(principal, model, record_id)
    db.session.delete(record)
    record_event(principal, "record.deleted", "record", record_id, {"model_id": model.id})
    db.session.commit()


def record_label(model: RecordModel, record: Record) -> str:
    """How a record is named in the UI: its title, or the model and id."""
    return record.title or f"{model.name} #{record.id}"
