"""The typed value index: ``record_values`` rows kept in step with ``Record.values``.

One listener on every session's flush rewrites the rows of each record inserted, whose
``values`` changed, or deleted, so no write path (services, seeding, automations) can
forget it. Bulk statements that bypass the ORM call ``reindex`` after themselves. The same
listener gives each model whose records the flush wrote a new ``data_version`` (in the
writing transaction, so it commits or rolls back with the write).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, event, insert, inspect, select, update
from sqlalchemy.orm import ORMExecuteState, Session

from monark.core.text import storable
from monark.records.models import TEXT_KEY, Record, RecordModel, RecordValue, new_data_version


def text_key(value: str) -> str:
    """How a text value is indexed (and how a filter's text is compared to it): lowercased,
    cut to the index's width, a lone surrogate or NUL (no database holds them) as U+FFFD."""
    return storable(value.lower()[:TEXT_KEY])


def private_to(visibility: str, creator_id: int | None) -> int | None:
    """Who alone may see a record (besides roles that see all): NULL for the org's records,
    the creator for a private one (0, nobody, when it has none)."""
    return (creator_id or 0) if visibility == "private" else None


def index_rows(
    record_id: int, model_id: int, values: Mapping[str, Any], private: int | None = None
) -> list[dict[str, Any]]:
    """The ``record_values`` rows of one record's values (empty values have none)."""
    rows = []
    for field, value in values.items():
        text: str | None = None
        number: float | None = None
        if isinstance(value, bool | int | float):
            number = float(value)
        elif isinstance(value, str) and value:
            text = text_key(value)
        else:
            continue
        rows.append(
            {
                "record_id": record_id,
                "field": field,
                "model_id": model_id,
                "text_value": text,
                "number_value": number,
                "private_to": private,
            }
        )
    return rows


def _changed(record: Record) -> bool:
    attrs = inspect(record).attrs
    return attrs["values"].history.has_changes() or attrs["visibility"].history.has_changes()


def _rows_of(record: Record) -> list[dict[str, Any]]:
    private = private_to(record.visibility or "org", record.creator_id)
    return index_rows(record.id, record.model_id, record.values or {}, private)


def bump_versions(session: Session, model_ids: Iterable[int]) -> None:
    """Give each model a new ``data_version``: its records changed in this transaction, so
    no copy of them taken before is current (lowest id first, one order for every writer)."""
    ids = sorted(set(model_ids))
    if ids:
        session.connection().execute(
            update(RecordModel.__table__)
            .where(RecordModel.__table__.c.id.in_(ids))
            .values(data_version=new_data_version())
        )


def _sync(session: Session, _flush_context: Any) -> None:
    """Rewrite the index rows of the records this flush inserted, changed or deleted, and
    bump the data version of every model whose records it wrote at all."""
    new = [r for r in session.new if isinstance(r, Record)]
    dirty = [r for r in session.dirty if isinstance(r, Record)]
    changed = [r for r in dirty if _changed(r)]
    deleted = [r for r in session.deleted if isinstance(r, Record)]
    gone = [r.id for r in deleted]
    # Any column written counts (a title, a creator), not only what the index keeps.
    touched = [r for r in dirty if session.is_modified(r, include_collections=False)]
    # A record moved to another model leaves the one it was in changed too.
    moved = [m for r in touched for m in inspect(r).attrs["model_id"].history.deleted]
    bump_versions(session, [*(r.model_id for r in new + touched + deleted), *moved])
    if not (new or changed or gone):
        return
    conn = session.connection()
    stale = gone + [r.id for r in changed]
    if stale:
        conn.execute(delete(RecordValue).where(RecordValue.record_id.in_(stale)))
    rows = [row for r in new + changed for row in _rows_of(r)]
    if rows:
        conn.execute(insert(RecordValue), rows)


event.listen(Session, "after_flush", _sync)


def _bulk(state: ORMExecuteState) -> None:
    """An UPDATE or DELETE of records run as a statement (not through objects) may touch
    any model's rows: every model gets a new data version (such statements are rare)."""
    if (state.is_update or state.is_delete) and state.bind_mapper is inspect(Record).mapper:
        state.session.connection().execute(
            update(RecordModel.__table__).values(data_version=new_data_version())
        )


event.listen(Session, "do_orm_execute", _bulk)


def reindex(session: Session, records: Iterable[Any]) -> int:
    """Index records written without the ORM (rows with ``id``, ``model_id``, ``values``,
    ``visibility``, ``creator_id``); returns how many index rows it wrote."""
    conn = session.connection()
    total = 0
    batch: list[dict[str, Any]] = []
    models: set[int] = set()
    for r in records:
        models.add(r.model_id)
        batch += index_rows(r.id, r.model_id, r.values, private_to(r.visibility, r.creator_id))
        if len(batch) >= 5000:
            conn.execute(insert(RecordValue), batch)
            total, batch = total + len(batch), []
    if batch:
        conn.execute(insert(RecordValue), batch)
        total += len(batch)
    bump_versions(session, models)
    return total


def reindex_all(session: Session) -> int:
    """Rebuild the whole index from ``records`` (the migration's backfill uses the same)."""
    session.connection().execute(delete(RecordValue))
    columns = (Record.id, Record.model_id, Record.values, Record.visibility, Record.creator_id)
    return reindex(session, session.execute(select(*columns)).yield_per(5000))
