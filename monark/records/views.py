"""Web views of the records workspace (full pages, htmx partials)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

from flask import Blueprint, flash, make_response, redirect, render_template, request, url_for
from sqlalchemy import select

from monark.core.auth import guard, require_principal
from monark.core.errors import ValidationFailed
from monark.core.htmx import is_htmx, push_url, redirect_full, render_swap, vary
from monark.core.rbac import Principal
from monark.core.web import page_principal, see_other
from monark.extensions import db
from monark.records import queries, services
from monark.records.filters import NO_VALUE_OPS, OPS, OPS_BY_TYPE, Filter, unknown_operator
from monark.records.models import FIELD_TYPE_LABELS, FIELD_TYPES, ModelField, RecordModel
from monark.records.values import parse_form_values

bp = Blueprint("records", __name__)


@bp.app_context_processor
def _nav_models() -> dict[str, Any]:
    """Every page's navigation lists the org's models by name."""
    principal = page_principal()
    if principal is None:
        return {}
    stmt = (
        select(RecordModel).where(RecordModel.org_id == principal.org_id).order_by(RecordModel.name)
    )
    return {"nav_models": db.session.scalars(stmt).all()}


PAGE_SIZE = 25


def _focus(model: RecordModel, record_id: int | None = None) -> dict:
    """Template variables for the page-context data attributes."""
    return {"focus_model": model.key, "focus_record": record_id}


def _model(key: str) -> tuple[Principal, RecordModel]:
    """The signed-in principal, and the model ``key`` of its org (404 for any other)."""
    principal = require_principal()
    return principal, services.get_model(principal, key)


@bp.get("/")
@guard()
def home():
    """The signed-in start page: the model list."""
    return redirect(url_for("records.models"))


@bp.get("/models")
@guard("records.view")
def models():
    """All models of the org."""
    principal = require_principal()
    return render_template("records/models.html", models=services.list_models(principal))


@bp.route("/models/new", methods=["GET", "POST"])
@guard("models.manage")
def model_new():
    """Create a model (admins)."""
    principal = require_principal()
    errors: dict[str, str] = {}
    form = request.form
    if request.method == "POST":
        try:
            model = services.create_model(
                principal,
                form.get("key", "").strip(),
                form.get("name", ""),
                form.get("description", ""),
            )
        except ValidationFailed as err:
            errors = err.field_errors()
        else:
            flash(f"Model {model.name} created. Add its fields below.", "info")
            # The nav lists the models: a full page load shows the new one there.
            return redirect_full(url_for("records.model_settings", key=model.key))
    status = 422 if errors else 200
    return render_template("records/model_new.html", errors=errors, form=form), status


OP_LABELS = {
    "eq": "is",
    "ne": "is not",
    "lt": "less than / before",
    "lte": "at most / on or before",
    "gt": "more than / after",
    "gte": "at least / on or after",
    "contains": "contains",
    "in": "is any of (a, b)",
    "empty": "is empty",
    "not_empty": "is not empty",
}


def _sent_rows() -> list[tuple[str, str, str]]:
    """The toolbar's rows as sent: a field, an op and a value each."""
    args = request.args
    rows = zip_longest(args.getlist("ff"), args.getlist("fo"), args.getlist("fv"), fillvalue="")
    return list(rows)


def _toolbar_filters() -> list[str]:
    """The filters as written in the URL (``filter=field:op:value``), and those of the
    toolbar's rows (a field, an op, a value each; a row without a field or a needed value is
    still being filled in, and left out)."""
    filters = [f for f in request.args.getlist("filter") if f.strip()]
    # The one field=...&value=... filter of earlier links still works.
    legacy = request.args.get("field", "").strip(), request.args.get("value", "").strip()
    rows = _sent_rows() + ([(legacy[0], "eq", legacy[1])] if any(legacy) else [])
    for field, op, value in rows:
        field, op, value = field.strip(), (op.strip() or "eq"), value.strip()
        if value and not field:  # a value for "any field" would filter nothing: say so
            raise ValidationFailed(
                "No filter field.", [{"field": "filter", "message": "Choose a field to filter by."}]
            )
        if op not in OPS:
            raise unknown_operator(field, op)
        if op in NO_VALUE_OPS:  # a value left in the row's box means nothing to these
            value = ""
        if field and (value or op in NO_VALUE_OPS):
            filters.append(Filter(field, op, value).text)
    return filters


def _rows_of(filters: list[str]) -> list[tuple[str, str, str]]:
    """The toolbar's rows for these filters (one still unreadable keeps its text)."""
    rows = []
    for raw in filters:
        try:
            flt = queries.parse_filter(raw)
        except ValidationFailed:
            rows.append(("", "eq", raw))
        else:
            rows.append((flt.field, flt.op, flt.value))
    return rows


def _raw_rows() -> list[tuple[str, str, str]]:
    """The toolbar's rows as sent (to show them again beside their error)."""
    rows = _sent_rows()
    return [(f, o or "eq", v) for f, o, v in rows if f.strip() or v.strip()]


@dataclass(frozen=True)
class RowError:
    """A refused toolbar row: which one (among those shown), which of its controls, why."""

    row: int
    part: str  # "field", "op" or "value"
    message: str


def _row_error(model: RecordModel, rows: list[tuple[str, str, str]]) -> RowError | None:
    """The first of the toolbar's rows that is refused on its own, and the control at fault
    (None: every row is fine alone, so the error is not one row's)."""
    fields = {f.key: f for f in model.fields}
    for index, (field, op, value) in enumerate(rows):
        field, op, value = field.strip(), op.strip() or "eq", value.strip()
        if op in NO_VALUE_OPS:
            value = ""
        try:
            if not field:
                raise ValidationFailed("No filter field.", [{"message": "Choose a field."}])
            if op not in OPS:
                raise unknown_operator(field, op)
            if value or op in NO_VALUE_OPS:
                queries.check_filter(model, Filter(field, op, value).text)
        except ValidationFailed as err:
            known = fields.get(field)
            if known is None:
                part = "field"
            elif op not in OPS_BY_TYPE.get(known.type, ("eq",)):
                part = "op"
            else:
                part = "value"
            return RowError(index, part, err.details[0]["message"] if err.details else err.message)
    return None


def list_url(model: RecordModel, params: queries.ListParams, **extra: Any) -> str:
    """The list's address for these filters and sort (what the URL keeps)."""
    return url_for("records.record_list", key=model.key, **params.arguments(), **extra)


@bp.get("/models/<key>/records")
@guard("records.view")
def record_list(key: str):
    """A model's records with search, typed filters, a sort and keyset pages."""
    principal, model = _model(key)
    q = request.args.get("q", "").strip()[:200]
    cursor = request.args.get("cursor") or None
    error = None
    params = queries.ListParams(q=q or None)
    filters: list[str] = []
    try:
        filters = _toolbar_filters()
        params = queries.ListParams.parse(model, q, filters, request.args.get("sort"))
        page = queries.list_records(
            principal, model, params, limit=PAGE_SIZE, cursor=cursor, count=True
        )
        total = page.total or 0
    except ValidationFailed as err:
        error = err.detail_text()
        page, total = queries.RecordPage(items=[], next_cursor=None), 0
    # A refused row shows as sent, its message beside the control at fault.
    shown_rows = _rows_of([f for f in request.args.getlist("filter") if f.strip()]) + _raw_rows()
    row_error = _row_error(model, shown_rows) if error else None
    canonical = list_url(model, params, cursor=cursor)
    if error is None and not is_htmx() and "ff" in request.args:
        return redirect(canonical, 303)  # the toolbar's rows, as the URL keeps them
    context = {
        "model": model,
        "page": page,
        "total": total,
        "params": params,
        "filter_rows": shown_rows
        if row_error
        else (_rows_of(filters) if filters or error is None else _raw_rows()),
        "sort": request.args.get("sort", ""),
        "op_labels": OP_LABELS,
        "first_url": list_url(model, params) if cursor else None,
        "next_url": list_url(model, params, cursor=page.next_cursor) if page.next_cursor else None,
        "narrowed": bool(q or filters),
        "cursor": cursor,
        "error": error,
        "row_error": row_error,
        "field_types": {f.key: f.type for f in model.fields},
        "members": {u.id: u for u in queries.members(principal.org_id)}
        if any(f.type == "user" for f in model.fields)
        else {},
        **_focus(model),
    }
    body = render_swap("records-table", "records/_table.html", "records/list.html", **context)
    response = make_response(body)
    return vary(push_url(response, canonical) if error is None else response)


def _field_key(name: str) -> str:
    """The model field an error names: ``values.<key>`` (a service's) or ``v_<key>`` (the
    form's own input, as a refusal of the request names it)."""
    if name.startswith("values."):
        return name.removeprefix("values.")
    return name.removeprefix("v_")


def _record_form(model: RecordModel, record=None):
    principal = require_principal()
    errors: dict[str, str] = {}
    values = dict(record.values) if record else {}
    visibility = record.visibility if record else "org"
    # Editing someone else's record: its visibility is shown, not offered (see the service).
    may_set_visibility = record is None or services.can_change_visibility(principal, record)
    if request.method == "POST":
        parsed = parse_form_values(model.fields, request.form)
        # Without radios in the form, the record keeps its visibility.
        visibility = request.form.get("visibility", visibility)
        values = {**values, **parsed}
        try:
            if record is None:
                record = services.create_record(principal, model, parsed, visibility)
                flash(f"{services.record_label(model, record)} created.", "info")
            else:
                services.update_record(principal, model, record.id, parsed, visibility)
                flash(f"{services.record_label(model, record)} saved.", "info")
        except ValidationFailed as err:
            errors = {_field_key(k): v for k, v in err.field_errors().items()}
        else:
            return see_other("records.record_detail", key=model.key, record_id=record.id)
    return render_template(
        "records/form.html",
        model=model,
        record=record,
        values=values,
        visibility=visibility,
        may_set_visibility=may_set_visibility,
        errors=errors,
        members=queries.members(principal.org_id),
        **_focus(model, record.id if record else None),
    ), (422 if errors else 200)


@bp.route("/models/<key>/records/new", methods=["GET", "POST"])
@guard("records.create")
def record_new(key: str):
    """Create a record; field errors are shown inline."""
    return _record_form(_model(key)[1])


@bp.get("/models/<key>/records/<int:record_id>")
@guard("records.view")
def record_detail(key: str, record_id: int):
    """One record."""
    principal, model = _model(key)
    record = services.get_record(principal, model, record_id)
    return render_template(
        "records/detail.html",
        model=model,
        record=record,
        members={u.id: u for u in queries.members(principal.org_id)},
        **_focus(model, record.id),
    )


@bp.route("/models/<key>/records/<int:record_id>/edit", methods=["GET", "POST"])
@guard("records.update")
def record_edit(key: str, record_id: int):
    """Edit a record; field errors are shown inline."""
    principal, model = _model(key)
    return _record_form(model, services.get_record(principal, model, record_id))


@bp.route("/models/<key>/records/<int:record_id>/delete", methods=["GET", "POST"])
@guard("records.delete")
def record_delete(key: str, record_id: int):
    """Ask, then delete a record."""
    principal, model = _model(key)
    record = services.get_record(principal, model, record_id)
    if request.method == "POST":
        label = services.record_label(model, record)
        services.delete_record(principal, model, record_id)
        flash(f"{label} deleted.", "info")
        return see_other("records.record_list", key=model.key)
    return render_template(
        "records/delete.html", model=model, record=record, **_focus(model, record.id)
    )


# ---- model settings (admins) -----------------------------------------------------------


def _settings_page(
    model: RecordModel, errors: dict[str, str] | None = None, status: int = 200, prefix: str = ""
):
    """The model settings page; ``errors`` are those of the form whose fields start with
    ``prefix`` (the page holds one form per field)."""
    return render_template(
        "records/model_settings.html",
        model=model,
        field_types=FIELD_TYPES,
        field_type_labels=FIELD_TYPE_LABELS,
        errors={f"{prefix}{k}": v for k, v in (errors or {}).items()},
        form=request.form,
        **_focus(model),
    ), status


def _field(key: str, field_id: int) -> tuple[Principal, RecordModel, ModelField]:
    """The principal, the model ``key`` and its field ``field_id`` (404 for any other)."""
    principal, model = _model(key)
    return principal, model, services.get_field(model, field_id)


def _to_settings(model: RecordModel):
    return see_other("records.model_settings", key=model.key)


def _field_form() -> dict[str, Any]:
    """What a field's form says of its label, required flag and (select) options."""
    form = request.form
    options = form.get("options", "").replace(",", "\n").splitlines()
    return {
        "label": form.get("label", ""),
        "required": form.get("required") == "on",
        "options": [line.strip() for line in options if line.strip()],
    }


@bp.route("/models/<key>/settings", methods=["GET", "POST"])
@guard("models.manage")
def model_settings(key: str):
    """Rename a model and manage its fields."""
    principal, model = _model(key)
    if request.method == "POST":
        try:
            services.update_model(
                principal, model, request.form.get("name", ""), request.form.get("description", "")
            )
        except ValidationFailed as err:
            return _settings_page(model, err.field_errors(), 422)
        flash("Model saved.", "info")
        return redirect_full(url_for("records.model_settings", key=model.key))
    return _settings_page(model)


@bp.post("/models/<key>/fields")
@guard("models.manage")
def field_add(key: str):
    """Add a field to a model."""
    principal, model = _model(key)
    new_key, new_type = request.form.get("key", "").strip(), request.form.get("type", "")
    try:
        services.add_field(principal, model, key=new_key, type=new_type, **_field_form())
    except ValidationFailed as err:
        return _settings_page(model, err.field_errors(), 422, prefix="new_")
    flash("Field added.", "info")
    return _to_settings(model)


@bp.post("/models/<key>/fields/<int:field_id>")
@guard("models.manage")
def field_update(key: str, field_id: int):
    """Change a field's label, required flag or options."""
    principal, model, field = _field(key, field_id)
    try:
        services.update_field(principal, field, **_field_form())
    except ValidationFailed as err:
        return _settings_page(model, err.field_errors(), 422, prefix=f"f{field_id}_")
    flash(f"Field {field.label} saved.", "info")
    return _to_settings(model)


@bp.post("/models/<key>/fields/<int:field_id>/delete")
@guard("models.manage")
def field_delete(key: str, field_id: int):
    """Remove a field and its values."""
    principal, model, field = _field(key, field_id)
    services.delete_field(principal, field)
    flash(f"Field {field.label} deleted.", "info")
    return _to_settings(model)


@bp.post("/models/<key>/delete")
@guard("models.manage")
def model_delete(key: str):
    """Delete a model and its records, after typing its key to confirm."""
    principal, model = _model(key)
    if request.form.get("confirm_key") != model.key:
        return _settings_page(model, {"confirm_key": f"Type {model.key} to confirm."}, 422)
    name = model.name
    services.delete_model(principal, model)
    flash(f"Model {name} and its records deleted.", "info")
    return redirect_full(url_for("records.models"))


@bp.app_template_global()
def field_value(field, values: dict, members: dict | None = None) -> str:
    """A record value as text for display."""
    value = values.get(field.key)
    if value is None or value == "":
        return ""
    if field.type == "boolean":
        return "Yes" if value else "No"
    if field.type == "user":
        user = (members or {}).get(value)
        return user.name if user else f"User {value}"
    return str(value)
