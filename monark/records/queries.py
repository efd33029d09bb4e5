"""Reading records: what a principal may see, the list with its search, typed filters, sort
and keyset pages (``filters.py`` builds those), and the counts. Plain functions over a
Principal, no request access."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from sqlalchemy import ColumnElement, Select, bindparam, func, or_, select, true

from monark.core.errors import ValidationFailed
from monark.core.ids import parse_id
from monark.core.models import MAX_ID, Membership, User, utcnow
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records.filters import (
    DEFAULT_SORT,
    MAX_FILTERS,
    Filter,
    Sort,
    after,
    apply_filter,
    decode_cursor,
    encode_cursor,
    ordered,
    parse_filter,
    parse_sort,
    sort_column,
)
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


@dataclass(frozen=True)
class ListParams:
    """What narrows and orders a list: search text, typed filters, a sort."""

    q: str | None = None
    filters: tuple[Filter, ...] = ()
    sort: Sort = DEFAULT_SORT

    @classmethod
    def parse(
        cls, model: RecordModel, q: str | None, filters: Sequence[str] = (), sort: str | None = None
    ) -> ListParams:
        """From their text (``ValidationFailed`` naming ``filter`` or ``sort``)."""
        if len(filters) > MAX_FILTERS:
            raise ValidationFailed(
                "Too many filters.",
                [{"field": "filter", "message": f"Give at most {MAX_FILTERS} filters."}],
            )
        parsed = tuple(parse_filter(raw) for raw in filters if raw.strip())
        return cls(q=(q or "").strip() or None, filters=parsed, sort=parse_sort(model, sort))

    def filter_texts(self) -> list[str]:
        """The filters as written (``field:op:value``), in order."""
        return [
            f"{f.field}:{f.op}:{f.value}" if f.value else f"{f.field}:{f.op}" for f in self.filters
        ]

    def arguments(self) -> dict[str, Any]:
        """The list tool's arguments for these (``q``, ``filter``, ``sort``; none empty)."""
        arguments: dict[str, Any] = {}
        if self.q:
            arguments["q"] = self.q
        if self.filters:
            arguments["filter"] = self.filter_texts()
        if self.sort != DEFAULT_SORT:
            arguments["sort"] = self.sort.text
        return arguments


def _narrowed(stmt: Select[Any], model: RecordModel, params: ListParams) -> Select[Any]:
    if params.q:
        stmt = stmt.where(Record.search_text.contains(params.q.lower(), autoescape=True))
    if params.filters:
        people = members(model.org_id) if any(f.type == "user" for f in model.fields) else []
        today = utcnow().date()
        for flt in params.filters:
            stmt = apply_filter(stmt, model, flt, people, today)
    return stmt


@dataclass
class RecordPage:
    items: list[Record]
    next_cursor: str | None


def _first_after(cursor: str | None) -> int:
    """The highest id a newest-first page may show, from its cursor (an id)."""
    if not cursor:
        return MAX_ID
    try:
        before = parse_id(cursor, "cursor", "query")
    except ValidationFailed:
        before = None
    if before is None:
        raise ValidationFailed(
            "Invalid cursor.", [{"field": "cursor", "message": "Use the next_cursor given."}]
        )
    return before - 1


def list_records(
    principal: Principal,
    model: RecordModel,
    params: ListParams | None = None,
    *,
    limit: int = 25,
    cursor: str | None = None,
) -> RecordPage:
    """Records visible to the principal, one keyset page at a time (newest first unless
    ``params`` sorts otherwise)."""
    principal.require("records.view")
    params = params or ListParams()
    limit = max(1, min(limit, MAX_PAGE))
    sees, values = _sees(principal)
    values |= {"org_id": principal.org_id, "model_id": model.id, "limit": limit + 1}
    if params.sort == DEFAULT_SORT:  # the id index walks it: cursors are ids
        values["last"] = _first_after(cursor)
        stmt = _narrowed(_page_of(sees), model, params)
        rows = list(db.session.scalars(stmt, values))
        next_cursor = str(rows[limit - 1].id) if len(rows) > limit else None
        return RecordPage(items=rows[:limit], next_cursor=next_cursor)
    # The page's ids first (the sort then moves ids and keys, not whole rows), then its rows.
    ids = _visible_rows(sees).with_only_columns(Record.id)
    stmt, column = sort_column(ids, model, params.sort)
    stmt = _narrowed(stmt, model, params)
    if cursor:
        on_field = any(f.key == params.sort.key for f in model.fields)
        stmt = stmt.where(after(column, params.sort, *decode_cursor(cursor, params.sort, on_field)))
    stmt = ordered(stmt.add_columns(column), column, params.sort).limit(bindparam("limit"))
    keys = list(db.session.execute(stmt, values))[: limit + 1]
    found = (
        {
            r.id: r
            for r in db.session.scalars(
                select(Record).where(Record.id.in_([k[0] for k in keys[:limit]]))
            )
        }
        if keys
        else {}
    )
    next_cursor = None
    if len(keys) > limit:
        record_id, value = keys[limit - 1]
        next_cursor = encode_cursor(params.sort, value, record_id)
    return RecordPage(items=[found[k[0]] for k in keys[:limit]], next_cursor=next_cursor)


def count_records(
    principal: Principal, model: RecordModel, params: ListParams | None = None
) -> int:
    """How many records the list would show in all."""
    sees, values = _sees(principal)
    stmt = _narrowed(_visible_rows(sees), model, params or ListParams())
    values |= {"org_id": principal.org_id, "model_id": model.id}
    return db.session.scalar(stmt.with_only_columns(func.count()), values) or 0
