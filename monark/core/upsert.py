"""An INSERT that rewrites the row already there: the indexes kept in step on every flush
(``records/index.py``, ``search/index.py``) write a changed row's entries in place, one
statement, rather than deleting them and inserting them again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select, Table
from sqlalchemy.dialects import postgresql, sqlite


def upsert(
    conn: Connection,
    table: Table,
    keys: Sequence[str],
    source: tuple[list[str], Select[Any]] | None = None,
) -> Any:
    """An INSERT into ``table`` that, where a row with the same ``keys`` is there already,
    rewrites its other columns instead (``ON CONFLICT DO UPDATE``, on SQLite as on
    PostgreSQL; an update trigger follows it); of ``source``'s rows (the columns it fills,
    and a SELECT) when given, else of the rows it is executed with."""
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = insert(table)
    if source is not None:
        stmt = stmt.from_select(*source)
    rewritten = {
        column.name: stmt.excluded[column.name]
        for column in table.columns
        if column.name not in keys and not column.primary_key
    }
    return stmt.on_conflict_do_update(index_elements=list(keys), set_=rewritten)
