"""The rows ``records_query`` copies into its sandbox: one model's records the caller can
see (``queries._visible_rows``, the list's own rule), each column typed by the database
that holds them, so the sandbox only stores what it is given.

Two ways in. On SQLite with a database file, the sandbox attaches that file read-only for
the one statement that copies, ``INSERT … SELECT`` run by SQLite itself (no row passes
through Python), and detaches it before any of the caller's SQL is compiled. Anywhere
else (PostgreSQL), the rows are read on the session's connection, their fields taken out
of the JSON by the database, and inserted as they come.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Select, String, case, cast, func
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import ColumnElement

from monark.core.rbac import Principal
from monark.extensions import db
from monark.records.models import Record
from monark.records.queries import _sees, _visible_rows

# The record columns copied as they are; fields come out of the JSON ``values``.
PLAIN = frozenset({"id", "title", "created_at", "updated_at", "creator_id", "visibility"})
# Rows read from the database at a time (the PostgreSQL path).
BATCH = 20_000


class ColumnLike(Protocol):
    """What a sandbox column says about itself (``sql.Column``)."""

    @property
    def name(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def field_key(self) -> str | None: ...

    @property
    def field_type(self) -> str | None: ...


def _field(key: str, field_type: str | None, dialect: Dialect) -> ColumnElement[Any]:
    """A field's value out of ``values``, as SQLite's ``json_extract`` gives it: numbers as
    numbers, yes/no as 1/0, text as text (the sandbox's column types do the rest)."""
    if dialect.name == "sqlite":
        return func.json_extract(Record.values, f'$."{key}"')
    value = Record.values[key].as_string()
    if field_type == "boolean":
        return case((value == "true", "1"), (value == "false", "0"), else_=value)
    return value


def _input(c: ColumnLike, dialect: Dialect) -> ColumnElement[Any]:
    """What fills column ``c``: a record column, a field, or (for ``<user>_name``) the
    member's id, whose name the sandbox looks up."""
    if c.source in ("created_at", "updated_at"):
        return func.substr(cast(getattr(Record, c.source), String), 1, 19)
    if c.source in PLAIN:
        return getattr(Record, c.source)
    assert c.field_key is not None
    return _field(c.field_key, c.field_type, dialect)


def visible_select(
    principal: Principal, model_id: int, columns: Sequence[ColumnLike], dialect: Dialect
) -> tuple[Select[Any], dict[str, Any]]:
    """The caller's visible records of one model, one labelled column per sandbox column
    (``c0``, ``c1``, …), and the values to bind."""
    sees, params = _sees(principal)
    exprs = [_input(c, dialect).label(f"c{i}") for i, c in enumerate(columns)]
    stmt = _visible_rows(sees).with_only_columns(*exprs)
    return stmt, params | {"org_id": principal.org_id, "model_id": model_id}


def picks(columns: Sequence[ColumnLike], value: Any) -> str:
    """The sandbox side of an insert: each column's input as it is, a member's name looked
    up by id; ``value(i)`` writes the i-th input."""
    out = []
    for i, c in enumerate(columns):
        if c.source == "user_name":
            out.append(f"(SELECT name FROM temp.people WHERE id = {value(i)})")
        else:
            out.append(value(i))
    return ", ".join(out)


@dataclass(frozen=True)
class Compiled:
    sql: str
    args: Any  # a list for positional drivers, a dict for named ones


def compile_for(stmt: Select[Any], params: dict[str, Any], dialect: Dialect) -> Compiled:
    """``stmt`` as the driver's SQL text and its bound values."""
    compiled = stmt.compile(dialect=dialect)
    bound = compiled.construct_params(params)
    positions = compiled.positiontup
    args = [bound[name] for name in positions] if positions is not None else bound
    return Compiled(str(compiled), args)


def attached_file() -> str | None:
    """The app's SQLite database file, when it is one the sandbox may attach (not an
    in-memory database)."""
    url = db.engine.url
    if url.get_backend_name() != "sqlite":
        return None
    path = url.database or ""
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return path


_RECORDS = re.compile(r"\brecords\b")


def copy_attached(
    conn: sqlite3.Connection,
    path: str,
    target: str,
    names: str,
    principal: Principal,
    model_id: int,
    columns: Sequence[ColumnLike],
) -> None:
    """Copy the rows inside the sandbox connection: attach ``path`` read-only as ``src``,
    run one ``INSERT … SELECT`` (in the open transaction), detach. ``PRAGMA database_list``
    then proves nothing but the sandbox's own databases is left."""
    stmt, params = visible_select(principal, model_id, columns, db.engine.dialect)
    inner = compile_for(stmt, params, db.engine.dialect)
    # The statement reads one table, named bare (its values are all bound): read it from
    # the attached file.
    inner_sql = _RECORDS.sub("src.records", inner.sql)
    outer = picks(columns, lambda i: f"q.c{i}")
    sql = f'INSERT INTO main."{target}" ({names}) SELECT {outer} FROM ({inner_sql}) AS q'
    uri = "file:" + path.replace("?", "%3f").replace("#", "%23") + "?mode=ro"
    conn.execute("ATTACH DATABASE ? AS src", (uri,))
    try:
        conn.execute(sql, inner.args).close()
    finally:
        conn.execute("DETACH DATABASE src")
    left = {row[1] for row in conn.execute("PRAGMA database_list")}
    if not left <= {"main", "temp"}:
        raise RuntimeError(f"The sandbox still holds {sorted(left)}.")


def fetched(principal: Principal, model_id: int, columns: Sequence[ColumnLike]) -> Iterator[Any]:
    """The rows read on the session's connection, in the session's transaction, a batch at
    a time (the driver's rows as they are: a million Row objects would cost a second)."""
    conn = db.session.connection()
    stmt, params = visible_select(principal, model_id, columns, conn.dialect)
    compiled = compile_for(stmt, params, conn.dialect)
    cursor = conn.connection.dbapi_connection.cursor()
    try:
        cursor.execute(compiled.sql, compiled.args)
        while batch := cursor.fetchmany(BATCH):
            yield from batch
    finally:
        cursor.close()


def insert_sql(target: str, names: str, columns: Sequence[ColumnLike]) -> str:
    """The sandbox's insert of one fetched row."""
    return f'INSERT INTO main."{target}" ({names}) VALUES ({picks(columns, lambda i: f"?{i + 1}")})'
