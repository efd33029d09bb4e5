"""The typed value index: ``record_values`` rows kept in step with ``Record.values``.

One listener on every session's flush writes the rows of each record inserted, rewrites
in place those of one whose ``values`` changed, and takes those of one deleted away, so
no write path (services, seeding, automations) can forget it. Bulk statements that
bypass the ORM call ``reindex`` after themselves. (Each model's ``data_version`` is the
database's own: its triggers on ``records`` set it, ``records/models.py``.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import and_, delete, event, insert, inspect, or_, select
from sqlalchemy.orm import Session

from monark.core.text import storable
from monark.core.upsert import upsert
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


# An index row's key: a record's field.
_KEY = ("record_id", "field")


def _before(record: Record) -> Mapping[str, Any] | None:
    """A changed record's values before this flush, when the session knows them: a new
    dict assigned (as every writer does: a JSON column sees no change made in place), or
    none; None when they were changed in place and marked (``flag_modified``)."""
    history = inspect(record).attrs["values"].history
    if not history.has_changes():
        return record.values or {}
    return (history.deleted[0] or {}) if history.deleted else None


def _sync(session: Session, _flush_context: Any) -> None:
    """Rewrite the index rows of the records this flush inserted, changed or deleted.

    A new record has no rows to take away (ids are never reused); a changed one's rows are
    rewritten in place (an upsert), and those of fields it no longer has are taken away."""
    new = [r for r in session.new if isinstance(r, Record)]
    dirty = [r for r in session.dirty if isinstance(r, Record)]
    changed = [r for r in dirty if _changed(r)]
    deleted = [r for r in session.deleted if isinstance(r, Record)]
    gone = [r.id for r in deleted]
    if not (new or changed or gone):
        return
    conn = session.connection()
    rows = [row for r in new for row in _rows_of(r)]
    stale = [RecordValue.record_id.in_(gone)] if gone else []
    for record in changed:
        now = _rows_of(record)
        rows += now
        kept = {row["field"] for row in now}
        before = _before(record)
        if before is None:  # what it had is unknown: every field without a row now
            stale.append(and_(RecordValue.record_id == record.id, RecordValue.field.not_in(kept)))
        elif dropped := {r["field"] for r in index_rows(record.id, 0, before)} - kept:
            stale.append(and_(RecordValue.record_id == record.id, RecordValue.field.in_(dropped)))
    if stale:
        conn.execute(delete(RecordValue).where(or_(*stale)))
    if rows:
        conn.execute(upsert(conn, RecordValue.__table__, _KEY), rows)


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
