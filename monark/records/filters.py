"""Filters and sorts of a record list, typed by each field, over the value index.

A filter is written ``field:op:value`` (``field:value`` means ``eq``; ``field:empty`` and
``field:not_empty`` take no value; a word between two colons is always an operator, so a
value with a colon after a word is written ``field:eq:value``); a sort is a field or record
column, one ``-`` first for descending. Each filter joins its field's rows of
``record_values`` (its own index entries only); a sort outer-joins that field's entry,
empty values last either way, the id breaking ties in the same direction so keyset
cursors stay exact.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    exists,
    false,
    func,
    literal,
    or_,
    select,
    tuple_,
)
from sqlalchemy.orm import aliased

from monark.core.errors import ValidationFailed
from monark.core.models import MAX_ID, User
from monark.core.text import has_surrogate
from monark.records.index import text_key
from monark.records.models import TEXT_KEY, ModelField, Record, RecordModel, RecordValue
from monark.records.values import parse_date

# Every operator, in the order any list of them is written.
OPS = ("eq", "ne", "lt", "lte", "gt", "gte", "contains", "in", "empty", "not_empty")
NO_VALUE_OPS = ("empty", "not_empty")
# What can only be meant as an operator between two colons (a value with a colon after a
# word is written with ``eq``: ``title:eq:Note: call``).
_OPERATOR_LIKE = re.compile(r"[a-z_]+")
_ORDERED = ("lt", "lte", "gt", "gte")
_ANY = ("eq", "ne", "in", "empty", "not_empty")
OPS_BY_TYPE: dict[str, tuple[str, ...]] = {
    "text": (*_ANY, *_ORDERED, "contains"),
    "long_text": ("eq", "ne", "contains", "empty", "not_empty"),
    "number": (*_ANY, *_ORDERED),
    "date": (*_ANY, *_ORDERED),
    "boolean": ("eq", "ne", "empty", "not_empty"),
    "select": _ANY,
    "user": _ANY,
}
MAX_FILTERS = 10
MAX_IN = 50
MAX_CONTAINS = 100
# Sorts on a record's own columns (a field of the same key wins).
RECORD_SORTS = ("id", "title", "created_at", "updated_at")


def _error(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, [{"field": field, "message": message}])


def _listed(words: Iterable[str]) -> str:
    """Words once each, comma-separated, in the order given."""
    return ", ".join(dict.fromkeys(words))


def unknown_operator(field: str, op: str) -> ValidationFailed:
    """The refusal of an operator there is none of (in a URL's filter or the toolbar's)."""
    return _error(
        "filter", f"Unknown operator '{op}' for {field or 'a filter'} (operators: {_listed(OPS)})."
    )


@dataclass(frozen=True)
class Filter:
    field: str
    op: str
    value: str

    @property
    def text(self) -> str:
        """As written in a URL or a tool call: ``field:op:value`` (``field:op`` without one)."""
        return f"{self.field}:{self.op}:{self.value}" if self.value else f"{self.field}:{self.op}"


def parse_filter(raw: str) -> Filter:
    """``field:op:value``, ``field:value`` (eq), or ``field:empty`` / ``field:not_empty``.
    A word between two colons is an operator: one there is none of is refused, and so is
    a value after an operator that takes none."""
    field, sep, rest = raw.strip().partition(":")
    field = field.strip()
    if not sep or not field:
        raise _error("filter", f"'{raw}' is not a filter: use field:value or field:op:value.")
    head, sep, tail = rest.partition(":")
    op = head.strip().lower()
    if op in NO_VALUE_OPS:
        if sep and tail.strip():
            raise _error("filter", f"'{op}' takes no value: write {field}:{op}.")
        return Filter(field, op, "")
    if sep and op in OPS:
        return Filter(field, op, tail.strip())
    if sep and _OPERATOR_LIKE.fullmatch(op):
        raise _error(
            "filter",
            f"Unknown operator '{op}' for {field} (operators: {_listed(OPS)}; to match text "
            f"holding ':', write {field}:eq:{rest.strip()}).",
        )
    return Filter(field, "eq", rest.strip())


def _field(model: RecordModel, key: str) -> ModelField:
    found = next((f for f in model.fields if f.key == key), None)
    if found is None:
        known = ", ".join(f.key for f in model.fields) or "none"
        raise _error("filter", f"Unknown field '{key}' (known: {known}).")
    return found


# ---- one filter's values, as the index holds them ------------------------------------------


def _date(field: ModelField, raw: str, today: date) -> str:
    try:
        return parse_date(raw, today)
    except ValueError:
        message = f"'{raw}' is not a valid date for {field.label} (use YYYY-MM-DD or today)."
        raise _error("filter", message) from None


def _number(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise _error("filter", f"'{raw}' is not a valid number.")
    return value


def _member_ids(field: ModelField, raw: str, people: list[User]) -> list[float]:
    """A member by id, or by name: a whole name exactly, else any name containing it."""
    if raw.isascii() and raw.isdecimal():
        if len(raw) > 10 or int(raw) > MAX_ID:
            raise _error("filter", f"No member has the id {raw}.")
        return [float(int(raw))]
    wanted = raw.lower()
    ids = [u.id for u in people if u.name.lower() == wanted] or [
        u.id for u in people if wanted in u.name.lower()
    ]
    if not ids:
        raise _error("filter", f"No member is called '{raw}' ({field.label} takes a name or id).")
    return [float(i) for i in ids]


def _values(field: ModelField, raw: str, people: list[User], today: date) -> list[Any]:
    """The index values a filter's text means for ``field`` (several for a name or ``in``)."""
    kind = field.type
    if kind == "number":
        return [_number(raw)]
    if kind == "boolean":
        if raw.lower() not in ("true", "false"):
            raise _error("filter", f"'{raw}' is not true or false ({field.label}).")
        return [1.0 if raw.lower() == "true" else 0.0]
    if kind == "date":
        return [_date(field, raw, today)]
    if kind == "user":
        return _member_ids(field, raw, people)
    if kind == "select":
        option = next((o for o in field.options or [] if o.lower() == raw.lower()), None)
        if option is None:
            allowed = ", ".join(field.options or [])
            raise _error("filter", f"'{raw}' is not an option of {field.label} ({allowed}).")
        return [text_key(option)]
    return [raw]  # text: compared lowercased; long values checked whole below


# ---- clauses ---------------------------------------------------------------------------


def _text_match(entry: Any, key: str, op: str, texts: list[str]) -> ColumnElement[bool]:
    """Text values: the index's lowercased prefix decides, and the whole value too where a
    text is as long as the prefix (so a long value is never matched by its start only)."""
    column = entry.text_value
    whole = func.lower(Record.values[key].as_string())
    if op == "contains":
        needle = texts[0].lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern = f"%{needle}%"
        prefix_hit = column.like(pattern, escape="\\")
        tail_hit = and_(func.length(column) >= TEXT_KEY, whole.like(pattern, escape="\\"))
        return or_(prefix_hit, tail_hit)
    keys = [text_key(t) for t in texts]
    match = column.in_(keys)
    if any(len(k) >= TEXT_KEY for k in keys):
        match = and_(match, whole.in_([t.lower() for t in texts]))
    return match


def _match(
    entry: Any, field: ModelField, flt: Filter, people: list[User], today: date
) -> ColumnElement[bool] | None:
    """What ``entry`` (an index row of ``field``) must hold for ``flt``; ``None`` for any
    value (``empty`` and ``not_empty`` ask only whether there is one). ``ne`` gives the
    match of ``eq``, which the caller negates."""
    if flt.op in NO_VALUE_OPS:
        return None
    if not flt.value:
        raise _error("filter", f"The filter on {field.label} needs a value after '{flt.op}:'.")
    if flt.op == "contains" and len(flt.value) > MAX_CONTAINS:
        # Each row compares the whole text with the pattern: keep that cost bounded.
        raise _error("filter", f"'contains' takes at most {MAX_CONTAINS} characters.")
    raws = [r.strip() for r in flt.value.split(",")] if flt.op == "in" else [flt.value]
    raws = [r for r in raws if r]
    if not raws:
        raise _error("filter", f"The filter on {field.label} needs a value after '{flt.op}:'.")
    if len(raws) > MAX_IN:
        raise _error("filter", f"'in' takes at most {MAX_IN} values.")
    values = [v for raw in raws for v in _values(field, raw, people, today)]
    text = field.type in ("text", "long_text")
    if text and flt.op in ("eq", "ne", "in", "contains"):
        return _text_match(entry, field.key, "in" if flt.op == "ne" else flt.op, values)
    column = entry.text_value if isinstance(values[0], str) else entry.number_value
    if flt.op in ("eq", "in", "ne"):
        return column.in_(values)
    bound = text_key(values[0]) if text else values[0]
    return {
        "lt": column < bound,
        "lte": column <= bound,
        "gt": column > bound,
        "gte": column >= bound,
    }[flt.op]


NEGATIVE_OPS = ("ne", "empty")


def reads_whole_value(flt: Filter) -> bool:
    """True when ``flt`` may need a text's whole value, beyond what the index keeps."""
    if flt.op == "contains":
        return True
    parts = flt.value.split(",") if flt.op == "in" else [flt.value]
    return flt.op in ("eq", "ne", "in") and any(len(p.strip()) >= TEXT_KEY for p in parts)


def filter_condition(
    model: RecordModel, flt: Filter, people: list[User], today: date, rid: Any
) -> tuple[Any, list[ColumnElement[bool]]]:
    """The index rows ``flt`` reads (an alias of ``record_values``) and what they must
    hold; ``rid`` is the record id they belong to (``None``: the rows are the query's own
    start). ``ValidationFailed`` naming ``filter`` for a filter the field cannot take."""
    field = _field(model, flt.field)
    allowed = OPS_BY_TYPE.get(field.type, ("eq",))
    if flt.op not in allowed:
        ops = _listed(op for op in OPS if op in allowed)
        raise _error(
            "filter",
            f"{field.label} ({field.type}) cannot be filtered with '{flt.op}': use one of {ops}.",
        )
    entry = aliased(RecordValue)
    on = [entry.field == field.key, entry.model_id == model.id]
    if rid is not None:
        on.insert(0, entry.record_id == rid)
    match = _match(entry, field, flt, people, today)
    if match is not None:
        on.append(match)
    return entry, on


def apply_filter(
    stmt: Select[Any],
    model: RecordModel,
    flt: Filter,
    people: list[User],
    today: date,
    rid: Any = Record.id,
    checked: bool = False,
) -> tuple[Select[Any], Any]:
    """``stmt`` narrowed by ``flt``, and the index rows it joined (``None`` if none).

    A filter that needs a value joins that field's index rows (the database can start
    from the most selective one), or with ``checked`` asks that one exists (each row the
    query walks is checked as it comes, so the walk's order stays the query's);
    ``ne`` and ``empty``, which hold for records without a value too, ask that no
    matching index row exists.
    """
    entry, on = filter_condition(model, flt, people, today, rid)
    if flt.op in NEGATIVE_OPS:
        return stmt.where(~exists().where(*on)), None
    if checked:
        # A sub-select with an OFFSET is never flattened into a join (PostgreSQL's planner
        # would hash every match of both fields when it misjudges how many match): it
        # stays a check of one index entry per row walked, on either database.
        return stmt.where(exists(select(entry.record_id).where(*on).offset(0))), None
    return stmt.join(entry, and_(*on)), entry


# ---- sorting and its cursors -----------------------------------------------------------


@dataclass(frozen=True)
class Sort:
    key: str  # a field's key, or a record column
    descending: bool

    @property
    def text(self) -> str:
        return ("-" if self.descending else "") + self.key


DEFAULT_SORT = Sort("id", descending=True)


def parse_sort(model: RecordModel, raw: str | None) -> Sort:
    """``field`` or ``-field`` (a field of the model, or id, title, created_at, updated_at)."""
    text = (raw or "").strip()
    if not text:
        return DEFAULT_SORT
    descending = text.startswith("-")
    key = text.removeprefix("-")
    if key not in RECORD_SORTS and all(f.key != key for f in model.fields):
        known = _listed([*(f.key for f in model.fields), *RECORD_SORTS])
        raise _error("sort", f"Cannot sort by '{text}' (use one of: {known}; '-' first for Z→A).")
    return Sort(key, descending)


def sort_column(
    stmt: Select[Any],
    model: RecordModel,
    sort: Sort,
    joined: dict[str, Any] | None = None,
    rid: Any = Record.id,
) -> tuple[Select[Any], Any]:
    """``stmt`` joined to what ``sort`` orders by, and that expression. A field a filter
    already joined (``joined``: field key to its index rows) is sorted on those rows."""
    field = next((f for f in model.fields if f.key == sort.key), None)
    if field is None:
        column = {
            "id": rid,
            "title": func.lower(Record.title),
            "created_at": Record.created_at,
            "updated_at": Record.updated_at,
        }[sort.key]
        return stmt, column
    entry = (joined or {}).get(field.key)
    if entry is None:
        entry = aliased(RecordValue, name="sort_entry")
        stmt = stmt.outerjoin(entry, and_(entry.record_id == rid, entry.field == field.key))
    if field.type == "user":  # by the member's name, not their id
        person = aliased(User, name="sort_person")
        stmt = stmt.outerjoin(person, person.id == entry.number_value)
        return stmt, func.lower(person.name)
    numeric = field.type in ("number", "boolean")
    return stmt, entry.number_value if numeric else entry.text_value


def ordered(
    stmt: Select[Any], column: Any, sort: Sort, rid: Any = Record.id, nullable: bool = True
) -> Select[Any]:
    """Empty values last either way; the id breaks ties in the sort's direction. A column
    that is never empty (``nullable`` false) is ordered by itself, as its index holds it,
    so the database can walk that index instead of sorting."""
    first = [column.is_(None)] if nullable else []
    if sort.descending:
        return stmt.order_by(*first, column.desc(), rid.desc())
    return stmt.order_by(*first, column.asc(), rid.asc())


def after(
    column: Any,
    sort: Sort,
    value: Any,
    record_id: int,
    rid: Any = Record.id,
    nullable: bool = True,
) -> ColumnElement[bool]:
    """Rows after ``(value, record_id)`` in ``ordered``'s order: the keyset condition (over
    a column never empty, one comparison of the pair, which an index range answers)."""
    if not nullable:
        if value is None:  # past every value: nothing is after it
            return false()
        pair = tuple_(column, rid)
        mark = tuple_(literal(value, column.type), literal(record_id, rid.type))
        return pair < mark if sort.descending else pair > mark
    beyond = rid < record_id if sort.descending else rid > record_id
    if value is None:
        return and_(column.is_(None), beyond)
    past = column < value if sort.descending else column > value
    return or_(past, and_(column == value, beyond), column.is_(None))


def encode_cursor(sort: Sort, value: Any, record_id: int) -> str:
    if isinstance(value, datetime):
        value = value.isoformat()
    raw = json.dumps([sort.text, value, record_id], ensure_ascii=False, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, sort: Sort, on_field: bool) -> tuple[Any, int]:
    """The ``(value, id)`` a cursor of this sort carries; ``ValidationFailed`` otherwise."""
    bad = _error("cursor", "Invalid cursor: use the next_cursor given, with the same sort.")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key, value, record_id = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        raise bad from None
    scalar = isinstance(value, str | int | float) and not isinstance(value, bool)
    ok_value = value is None or scalar
    ok_id = isinstance(record_id, int) and not isinstance(record_id, bool)
    if key != sort.text or not ok_value or not ok_id or not 0 < record_id <= MAX_ID:
        raise bad
    if isinstance(value, str) and (has_surrogate(value) or "\x00" in value):
        raise bad  # no database can compare it (a cursor the app made never holds one)
    if not on_field and sort.key in ("created_at", "updated_at"):
        try:
            value = datetime.fromisoformat(value)
        except (TypeError, ValueError):
            raise bad from None
    return value, record_id
