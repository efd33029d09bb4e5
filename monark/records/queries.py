"""Reading records: what a principal may see, the list with its search, field filter and
keyset pages, and the counts. Plain functions over a Principal, no request access."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from functools import cache
from typing import Any, Literal

from sqlalchemy import ColumnElement, Select, bindparam, func, or_, select, true

from monark.core.errors import ValidationFailed
from monark.core.ids import parse_id
from monark.core.models import MAX_ID, Membership, User
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records.models import Record, RecordModel

MAX_PAGE = 100


def visible_to(principal: Principal) -> ColumnElement[bool]:
    """Private records are for their creator and for roles with records.view_private."""
    if principal.can("records.view_private"):
        return true()
    if principal.user_id is None:
        return Record.visibility == "org"
    return or_(Record.visibility == "org", Record.creator_id == principal.user_id)


def member_ids(org_id: int) -> set[int]:
    """Ids of the org's members (the values a user field accepts)."""
    return set(db.session.scalars(select(Membership.user_id).where(Membership.org_id == org_id)))


def members(org_id: int) -> list[User]:
    """The org's members by name (for user-field pickers and display)."""
    stmt = select(User).join(Membership).where(Membership.org_id == org_id).order_by(User.name)
    return list(db.session.scalars(stmt))


def _filter_error(message: str) -> ValidationFailed:
    return ValidationFailed("Invalid filter value.", [{"field": "filter", "message": message}])


def _filter_clause(model: RecordModel, field_key: str, raw: str) -> ColumnElement[bool]:
    field = next((f for f in model.fields if f.key == field_key), None)
    if field is None:
        known = ", ".join(f.key for f in model.fields)
        raise ValidationFailed(
            "Unknown filter field.",
            [{"field": "filter", "message": f"Unknown field '{field_key}' (known: {known})."}],
        )
    element = Record.values[field_key]
    invalid = _filter_error(f"'{raw}' is not a valid {field.type} value.")
    if field.type == "number":
        try:
            return element.as_float() == float(raw)
        except ValueError:
            raise invalid from None
    if field.type == "boolean":
        if raw.lower() not in ("true", "false"):
            raise invalid
        return element.as_boolean() == (raw.lower() == "true")
    if field.type == "user":
        # A member's id, or their name (any case; namesakes all match).
        if raw.isascii() and raw.isdecimal():  # other scripts' digits are decimal too
            if len(raw) > 10 or int(raw) > MAX_ID:
                raise _filter_error(f"No member has the id {raw}.")
            return element.as_integer() == int(raw)
        # A whole name matches exactly; otherwise any name containing the text ("ben").
        people = members(model.org_id)
        wanted = raw.lower()
        ids = [u.id for u in people if u.name.lower() == wanted] or [
            u.id for u in people if wanted in u.name.lower()
        ]
        if not ids:
            raise _filter_error(f"No member is called '{raw}' ({field.label} takes a name or id).")
        return element.as_integer().in_(ids)
    if field.type == "select":
        # Stored values are the options as written: match "done" to "Done".
        option = next((o for o in field.options or [] if o.lower() == raw.lower()), None)
        if option is None:
            allowed = ", ".join(field.options or [])
            raise _filter_error(f"'{raw}' is not an option of {field.label} (options: {allowed}).")
        return element.as_string() == option
    if field.type == "date":
        try:
            day = date.fromisoformat(raw) if len(raw) == 10 else None
        except ValueError:
            day = None
        if day is None:
            raise _filter_error(f"'{raw}' is not a valid date (use YYYY-MM-DD).")
        return element.as_string() == day.isoformat()
    return element.as_string() == raw


def parse_filter(raw: str | None) -> tuple[str, str] | None:
    """Split ``field:value`` into its parts; ``None`` when empty."""
    if not raw:
        return None
    field, sep, value = raw.partition(":")
    if not sep or not field:
        raise ValidationFailed(
            "Invalid filter.", [{"field": "filter", "message": "Use the form field:value."}]
        )
    return field.strip(), value.strip()


Sees = Literal["all", "org", "own"]


def _sees(principal: Principal) -> tuple[Sees, dict[str, Any]]:
    """Which records the principal sees (``visible_to``'s three shapes) and its parameters."""
    if principal.can("records.view_private"):
        return "all", {}
    if principal.user_id is None:
        return "org", {}
    return "own", {"viewer_id": principal.user_id}


@cache
def _visible_rows(sees: Sees) -> Select[tuple[Record]]:
    """A model's records one kind of principal sees, built once with its values bound at
    each call: on SQLite, building a ``Select`` cost about as much as running it."""
    visible = {
        "all": true(),
        "org": Record.visibility == "org",
        "own": or_(Record.visibility == "org", Record.creator_id == bindparam("viewer_id")),
    }[sees]
    return select(Record).where(
        Record.org_id == bindparam("org_id"), Record.model_id == bindparam("model_id"), visible
    )


@cache
def _page_of(sees: Sees) -> Select[tuple[Record]]:
    """One keyset page of ``_visible_rows``, newest first, up to ``:last`` (an id)."""
    return (
        _visible_rows(sees)
        .where(Record.id <= bindparam("last"))
        .order_by(Record.model_id.desc(), Record.id.desc())
        .limit(bindparam("limit"))
    )


def _narrowed(
    stmt: Select[Any], model: RecordModel, q: str | None, filter: tuple[str, str] | None
) -> Select[Any]:
    if q and q.strip():
        stmt = stmt.where(Record.search_text.contains(q.strip().lower(), autoescape=True))
    if filter:
        stmt = stmt.where(_filter_clause(model, *filter))
    return stmt


@dataclass
class RecordPage:
    items: list[Record]
    next_cursor: str | None


def list_records(
    principal: Principal,
    model: RecordModel,
    *,
    q: str | None = None,
    filter: tuple[str, str] | None = None,
    limit: int = 25,
    cursor: str | None = None,
) -> RecordPage:
    """Records visible to the principal, newest first, one keyset page at a time."""
    principal.require("records.view")
    limit = max(1, min(limit, MAX_PAGE))
    sees, params = _sees(principal)
    last = MAX_ID
    if cursor:
        try:
            before = parse_id(cursor, "cursor", "query")
        except ValidationFailed:
            before = None
        if before is None:
            raise ValidationFailed(
                "Invalid cursor.", [{"field": "cursor", "message": "Use the next_cursor given."}]
            )
        last = before - 1
    stmt = _narrowed(_page_of(sees), model, q, filter)
    params |= {"org_id": principal.org_id, "model_id": model.id, "last": last, "limit": limit + 1}
    rows = list(db.session.scalars(stmt, params))
    next_cursor = str(rows[limit - 1].id) if len(rows) > limit else None
    return RecordPage(items=rows[:limit], next_cursor=next_cursor)


def count_records(
    principal: Principal, model: RecordModel, *, q: str | None, filter: tuple[str, str] | None
) -> int:
    """How many records the list would show in all."""
    sees, params = _sees(principal)
    stmt = _narrowed(_visible_rows(sees), model, q, filter).with_only_columns(func.count())
    params |= {"org_id": principal.org_id, "model_id": model.id}
    return db.session.scalar(stmt, params) or 0
