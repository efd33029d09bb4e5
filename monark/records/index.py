"""The typed value index: ``record_values`` rows kept in step with ``Record.values``.

One listener on every session's flush rewrites the rows of each record inserted, whose
``values`` changed, or deleted, so no write path (services, seeding, automations) can
forget it. Bulk statements that bypass the ORM call ``reindex`` after themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, event, insert, inspect, select
from sqlalchemy.orm import Session

from monark.core.text import storable
from monark.records.models import TEXT_KEY, Record, RecordValue


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


def _sync(session: Session, _flush_context: Any) -> None:
    """Rewrite the index rows of the records this flush inserted, changed or deleted."""
    new = [r for r in session.new if isinstance(r, Record)]
    changed = [r for r in session.dirty if isinstance(r, Record) and _changed(r)]
    gone = [r.id for r in session.deleted if isinstance(r, Record)]
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


def reindex(session: Session, records: Iterable[Any]) -> int:
    """Index records written without the ORM (rows with ``id``, ``model_id``, ``values``,
    ``visibility``, ``creator_id``); returns how many index rows it wrote."""
    conn = session.connection()
    total = 0
    batch: list[dict[str, Any]] = []
    for r in records:
        batch += index_rows(r.id, r.model_id, r.values, private_to(r.visibility, r.creator_id))
        if len(batch) >= 5000:
            conn.execute(insert(RecordValue), batch)
            total, batch = total + len(batch), []
    if batch:
        conn.execute(insert(RecordValue), batch)
        total += len(batch)
    return total


def reindex_all(session: Session) -> int:
    """Rebuild the whole index from ``records`` (the migration's backfill uses the same)."""
    session.connection().execute(delete(RecordValue))
    columns = (Record.id, Record.model_id, Record.values, Record.visibility, Record.creator_id)
    return reindex(session, session.execute(select(*columns)).yield_per(5000))
