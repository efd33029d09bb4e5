"""Reading records: what a principal may see, the list with its search, typed filters, sort
and keyset pages (``filters.py`` builds those), and the counts. Plain functions over a
Principal, no request access."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cache
from typing import Any, Literal

from sqlalchemy import ColumnElement, Select, bindparam, func, or_, select, true
from sqlalchemy.orm import joinedload

from monark.core import zones
from monark.core.errors import ValidationFailed
from monark.core.ids import parse_id
from monark.core.models import MAX_ID, Membership, User
from monark.core.rbac import Principal
from monark.core.settings import settings
from monark.extensions import db
from monark.records.filters import (
    DEFAULT_SORT,
    MAX_FILTERS,
    NEGATIVE_OPS,
    Filter,
    Sort,
    after,
    apply_filter,
    decode_cursor,
    encode_cursor,
    filter_condition,
    ordered,
    parse_filter,
    parse_sort,
    reads_whole_value,
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


def reads(principal: Principal, private_to: int | None) -> bool:
    """Whether the principal may read a record whose ``index.private_to`` is ``private_to``
    (``visible_to``'s rule for one record): the org's records (None) are everyone's; a private
    one is its creator's and that of roles with records.view_private (0: no creator)."""
    if private_to is None or principal.can("records.view_private"):
        return True
    return principal.user_id is not None and private_to == principal.user_id


def readable_by(principal: Principal, private_to: Any) -> ColumnElement[bool]:
    """``reads`` as SQL, over a column holding ``index.private_to`` of a record (a copy of a
    record's readers kept beside something derived from it)."""
    if principal.can("records.view_private"):
        return true()
    if principal.user_id is None:
        return private_to.is_(None)
    return or_(private_to.is_(None), private_to == principal.user_id)


def models_with_fields(org_id: int, order_by: Any = RecordModel.name) -> list[RecordModel]:
    """The org's models, each with its fields loaded, in ``order_by`` (one query: a turn's
    tool specs start here, and a second, selectin, round trip cost more than the join)."""
    stmt = (
        select(RecordModel)
        .where(RecordModel.org_id == org_id)
        .options(joinedload(RecordModel.fields))
        .order_by(order_by)
    )
    return list(db.session.scalars(stmt).unique())


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
    # The instant "today" is read at, on the reader's clock (None: now). Fixed by a test, or
    # by a caller that must read two lists at one instant.
    now: datetime | None = field(default=None, compare=False)

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

    def arguments(self) -> dict[str, Any]:
        """The list tool's arguments for these (``q``, ``filter``, ``sort``; none empty)."""
        arguments: dict[str, Any] = {}
        if self.q:
            arguments["q"] = self.q
        if self.filters:
            arguments["filter"] = [f.text for f in self.filters]
        if self.sort != DEFAULT_SORT:
            arguments["sort"] = self.sort.text
        return arguments


def check_filter(model: RecordModel, raw: str) -> None:
    """``ValidationFailed`` when ``raw`` is a filter ``model``'s list cannot take."""
    filter_condition(model, parse_filter(raw), *_filter_context(None, model), None)


def _filter_context(
    principal: Principal | None, model: RecordModel, now: datetime | None = None
) -> tuple[list[User], date]:
    """What filters are read against: the org's members (for user fields), and today as
    the reader means it (their own date, in their time zone: ``core.zones``)."""
    people = members(model.org_id) if any(f.type == "user" for f in model.fields) else []
    return people, zones.local_today(principal, now)


def _joined_filters(
    stmt: Select[Any],
    model: RecordModel,
    filters: Sequence[Filter],
    context: tuple[list[User], date],
    rid: Any = Record.id,
    checked: bool = False,
) -> tuple[Select[Any], dict[str, Any]]:
    """``stmt`` narrowed by ``filters``, and the index rows they joined by field (a sort on
    one of those fields reads them instead of joining again); with ``checked``, each
    filter is checked per row instead of joined (``apply_filter``)."""
    joined: dict[str, Any] = {}
    for flt in filters:
        stmt, entry = apply_filter(stmt, model, flt, *context, rid, checked)
        if entry is not None:
            joined.setdefault(flt.field, entry)
    return stmt, joined


def _narrowed(
    principal: Principal, stmt: Select[Any], model: RecordModel, params: ListParams
) -> tuple[Select[Any], dict[str, Any]]:
    """``stmt`` narrowed by the search and the filters (see ``_joined_filters``)."""
    if params.q:
        stmt = stmt.where(Record.search_text.contains(params.q.lower(), autoescape=True))
    if not params.filters:
        return stmt, {}
    context = _filter_context(principal, model, params.now)
    return _joined_filters(stmt, model, params.filters, context)


@dataclass
class RecordPage:
    items: list[Record]
    next_cursor: str | None
    total: int | None = None  # counted by the page's own query (a first page from the index)
    total_is_lower_bound: bool = False  # more match: counting stopped at ``total``


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


def _index_only(model: RecordModel, params: ListParams) -> bool:
    """Whether the value index alone answers the list: a filter with a value to start from,
    no search, a sort the index holds, no text compared past the index's prefix."""
    record_columns = {"title", "created_at", "updated_at"} - {f.key for f in model.fields}
    return (
        any(f.op not in NEGATIVE_OPS for f in params.filters)
        and not params.q
        and params.sort.key not in record_columns
        and not any(reads_whole_value(f) for f in params.filters)
    )


def _walked(model: RecordModel, params: ListParams) -> Filter | None:
    """The filter whose index rows the list can walk in the sort's own order: one with a
    value on the field sorted by (not a member field, which sorts by the member's name)."""
    field = next((f for f in model.fields if f.key == params.sort.key), None)
    if field is None or field.type == "user":
        return None
    return next(
        (f for f in params.filters if f.field == field.key and f.op not in NEGATIVE_OPS), None
    )


@dataclass(frozen=True)
class IndexQuery:
    """The ids of a list's matches read from ``record_values`` alone (``_from_index``)."""

    stmt: Select[Any]
    joined: dict[str, Any]  # index rows joined, by field
    rid: Any  # the id column
    values: dict[str, Any]  # to bind
    walks: bool  # starts from the sorted field's rows: the sort is their index's order


def _from_index(principal: Principal, model: RecordModel, params: ListParams) -> IndexQuery:
    """The ids of the matching records the principal may see, read from ``record_values``
    only. The rows to start from (with who may see each, ``private_to``) are those of a
    filter on the sorted field when there is one: the page is then the first rows of that
    field's index that pass the other filters, each checked as the walk reaches it (no
    sort, no reading every match). Else the first filter with a value starts and the
    others join or exclude by record id. The model is the principal's org's
    (``get_model``), so its id keeps the query inside the org."""
    sees, values = _sees(principal)
    context = _filter_context(principal, model, params.now)
    walk = _walked(model, params)
    start = walk or next(f for f in params.filters if f.op not in NEGATIVE_OPS)
    first, on = filter_condition(model, start, *context, None)
    rid = first.record_id
    visible = {
        "all": true(),
        "org": first.private_to.is_(None),
        "own": or_(first.private_to.is_(None), first.private_to == bindparam("viewer_id")),
    }[sees]
    rest = [f for f in params.filters if f is not start]
    checked = walk is not None
    stmt, joined = _joined_filters(
        select(rid).where(*on, visible), model, rest, context, rid, checked
    )
    return IndexQuery(stmt, {start.field: first, **joined}, rid, values, checked)


def _sorted_page(
    stmt: Select[Any],
    values: dict[str, Any],
    column: Any,
    rid: Any,
    params: ListParams,
    limit: int,
    cursor: str | None,
    on_field: bool,
    walks: bool = False,
) -> RecordPage:
    """One page of ids in the sort's order (with the total when it is a first page that
    sorts every match anyway), then their rows: the sort moves ids and keys, never whole
    records. A page that ``walks`` its sort's index (never empty there) reads only the
    rows up to its end, and leaves the total to a count of its own."""
    sort = params.sort
    stmt = stmt.add_columns(column)
    if cursor and sort == DEFAULT_SORT:
        stmt = stmt.where(rid <= _first_after(cursor))
    elif cursor:
        mark = decode_cursor(cursor, sort, on_field)
        stmt = stmt.where(after(column, sort, *mark, rid, nullable=not walks))
    elif not walks:
        stmt = stmt.add_columns(func.count().over())  # all matches, before the limit
    page_stmt = ordered(stmt, column, sort, rid, nullable=not walks).limit(limit + 1)
    keys = list(db.session.execute(page_stmt, values))
    page = [k[0] for k in keys[:limit]]
    found = {r.id: r for r in db.session.scalars(select(Record).where(Record.id.in_(page)))}
    next_cursor = None
    if len(keys) > limit:
        last = keys[limit - 1]
        next_cursor = (
            str(last[0]) if sort == DEFAULT_SORT else encode_cursor(sort, last[1], last[0])
        )
    total = None if cursor or walks else (keys[0][2] if keys else 0)
    return RecordPage([found[i] for i in page if i in found], next_cursor, total)


def list_records(
    principal: Principal,
    model: RecordModel,
    params: ListParams | None = None,
    *,
    limit: int = 25,
    cursor: str | None = None,
    count: bool = False,
) -> RecordPage:
    """Records visible to the principal, one keyset page at a time (newest first unless
    ``params`` sorts otherwise); with ``count``, the page's ``total`` is always set (exact,
    unless counting would pass the deployment's cap: then the cap, with
    ``total_is_lower_bound``)."""
    params = params or ListParams()
    page = _list_page(principal, model, params, limit, cursor, count)
    if count and page.total is None and not cursor and not page.next_cursor:
        page.total = len(page.items)  # one page holds every match
    elif count and page.total is None:
        page.total, page.total_is_lower_bound = capped_total(principal, model, params)
    return page


def _list_page(
    principal: Principal,
    model: RecordModel,
    params: ListParams,
    limit: int,
    cursor: str | None,
    count: bool = False,
) -> RecordPage:
    """One page: from the value index when it answers alone (with ``count``, its total
    counted by the same statement), else over the records."""
    principal.require("records.view")
    limit = max(1, min(limit, MAX_PAGE))
    on_field = any(f.key == params.sort.key for f in model.fields)
    if _index_only(model, params):
        found = _from_index(principal, model, params)
        stmt, column = sort_column(found.stmt, model, params.sort, found.joined, found.rid)
        page = _sorted_page(
            stmt, found.values, column, found.rid, params, limit, cursor, on_field, found.walks
        )
        if count and page.total is None and page.next_cursor:
            page.total, page.total_is_lower_bound = _capped(found.stmt, found.values)
        return page
    sees, values = _sees(principal)
    values |= {"org_id": principal.org_id, "model_id": model.id}
    if params.sort == DEFAULT_SORT:  # the id index walks it: cursors are ids
        values |= {"last": _first_after(cursor), "limit": limit + 1}
        stmt, _ = _narrowed(principal, _page_of(sees), model, params)
        rows = list(db.session.scalars(stmt, values))
        next_cursor = str(rows[limit - 1].id) if len(rows) > limit else None
        return RecordPage(items=rows[:limit], next_cursor=next_cursor)
    ids = _visible_rows(sees).with_only_columns(Record.id)
    stmt, joined = _narrowed(principal, ids, model, params)
    stmt, column = sort_column(stmt, model, params.sort, joined)
    return _sorted_page(stmt, values, column, Record.id, params, limit, cursor, on_field)


def _matching(
    principal: Principal, model: RecordModel, params: ListParams
) -> tuple[Select[Any], dict[str, Any]]:
    """The ids of every record the list would show, and the values to bind."""
    if _index_only(model, params):
        found = _from_index(principal, model, params)
        return found.stmt, found.values
    sees, values = _sees(principal)
    stmt, _ = _narrowed(principal, _visible_rows(sees), model, params)
    values |= {"org_id": principal.org_id, "model_id": model.id}
    return stmt.with_only_columns(Record.id, maintain_column_froms=True), values


def count_records(
    principal: Principal, model: RecordModel, params: ListParams | None = None
) -> int:
    """How many records the list would show in all."""
    stmt, values = _matching(principal, model, params or ListParams())
    count = stmt.with_only_columns(func.count(), maintain_column_froms=True)
    return db.session.scalar(count, values) or 0


def capped_total(
    principal: Principal,
    model: RecordModel,
    params: ListParams | None = None,
    cap: int | None = None,
) -> tuple[int, bool]:
    """How many records the list would show, counted no further than ``cap`` (by default
    the deployment's ``list_total_cap``): the count and False, or ``cap`` and True when
    more match."""
    stmt, values = _matching(principal, model, params or ListParams())
    return _capped(stmt, values, cap)


def _capped(stmt: Select[Any], values: dict[str, Any], cap: int | None = None) -> tuple[int, bool]:
    """``capped_total`` of the ids ``stmt`` selects."""
    cap = cap or settings().list_total_cap
    counted = select(func.count()).select_from(stmt.limit(cap + 1).subquery())
    found = db.session.scalar(counted, values) or 0
    return (cap, True) if found > cap else (found, False)
