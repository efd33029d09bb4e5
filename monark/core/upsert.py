"""An INSERT that rewrites the row already there: the indexes kept in step on every flush
(``records/index.py``, ``search/index.py``) write a changed row's entries in place, one
statement, rather than deleting them and inserting them again."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
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
    if source is None:
        return _of_rows(conn.dialect.name, table, tuple(keys))
    return _made(conn.dialect.name, table, keys, source)


@cache
def _of_rows(dialect: str, table: Table, keys: tuple[str, ...]) -> Any:
    # Made once per table: building ``excluded`` copies every column, which cost more than
    # the statement itself on every flush (a statement is immutable, so one serves all).
    return _made(dialect, table, keys, None)


def _made(
    dialect: str, table: Table, keys: Sequence[str], source: tuple[list[str], Select[Any]] | None
) -> Any:
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(table)
    if source is not None:
        stmt = stmt.from_select(*source)
    rewritten = {
        column.name: stmt.excluded[column.name]
        for column in table.columns
        if column.name not in keys and not column.primary_key
    }
    return stmt.on_conflict_do_update(index_elements=list(keys), set_=rewritten)
