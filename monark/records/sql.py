"""Read-only SQL over the records a caller can see (the ``records_query`` tool).

The query never runs against the app's database. A call uses a private in-memory SQLite
database with one table per model of the caller's org, fills the tables the query reads
with exactly the rows ``records_list`` would show this caller (and only the columns it
reads; ``query_rows`` copies them), and runs the SQL there. Whatever the SQL says, nothing
else exists to be read: no other org, no ``users`` or ``api_keys``, no catalogue of the
real database, no files. An authorizer then allows reading those tables and calling an
allow-list of functions and nothing more (no ``ATTACH``, ``PRAGMA``, writes or
extensions), a progress handler stops a statement past its time, and SQLite's own limits
cap string, row, column and SQL sizes and the database's pages, so one query's memory is
bounded whatever it computes.

The sandbox is kept for the caller's next call (``query_cache``, within
``RECORDS_QUERY_CACHE_MB``): a table is copied again when its model's ``data_version``
is no longer the one it was copied at, and a repeated statement is answered as before
while what it read, and each 'now' it read, is the same.

An answer is bounded whatever its rows: at most ``max_columns`` columns, each value cut at
``max_value`` characters, and rows while the whole answer's JSON fits ``max_bytes`` (as the
API sends it and as a tool result stores it); a first row that alone would not fit has its
longest values cut until it does. Each cut is marked in the value, and the answer's note
says what was left out. A value that grows past ``max_length`` while the query runs is an
error, ``printf()``'s included (SQLite's own gives NULL there).

The SQL is SQLite's whatever database Monark runs on, so a question is asked one way.
``check_sql`` (a guard on the text: one read statement, no write keyword) runs first, as a
fast and clear refusal of what the tables could never allow anyway.
"""

from __future__ import annotations

import copy
import json
import math
import re
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from flask import current_app
from pydantic_core import to_json
from sqlalchemy import select

from monark.core import zones
from monark.core.bounds import clip
from monark.core.errors import ValidationFailed
from monark.core.rbac import Principal
from monark.core.settings import QuerySettings, settings
from monark.core.text import scrub
from monark.core.uow import deadline
from monark.extensions import db
from monark.records import query_rows
from monark.records.models import RecordModel
from monark.records.queries import members, models_with_fields
from monark.records.query_cache import CallerKey, SandboxCache

SQL_TYPES = {
    "text": "TEXT",
    "long_text": "TEXT",
    "number": "REAL",
    "date": "TEXT",
    "boolean": "INTEGER",
    "select": "TEXT",
    "user": "INTEGER",
}
# Record columns no field may take; a field keyed like one is named ``<key>_field``.
RESERVED = ("id", "created_at", "updated_at", "creator_id", "visibility")

# Every function the query may call (SQLite's core, date, aggregate, window and math
# functions that only compute). Not here, so refused: load_extension, randomblob,
# zeroblob, sqlite_*, and anything an extension would add.
FUNCTIONS = frozenset(
    """abs avg ceil ceiling char coalesce concat concat_ws count cume_dist date
    datetime dense_rank exp first_value floor format glob group_concat hex ifnull
    iif instr julianday lag last_value lead length like ln log log10 log2 lower
    ltrim max min mod nth_value ntile nullif percent_rank pi pow power printf quote
    rank replace round row_number rtrim sign sqrt string_agg strftime substr
    substring sum time timediff today total trim trunc typeof unhex unicode unixepoch
    upper""".split()  # noqa: SIM905 (words read better as words)
)
FIRST_WORDS = ("select", "with", "values")
# Statement words no read needs (a column named like one is written in double quotes).
WRITE_WORDS = frozenset(
    """insert update delete drop alter create attach detach pragma vacuum reindex
    truncate""".split()  # noqa: SIM905
)
SIDE_EFFECTS = re.compile(
    r"\b(load_extension|readfile|writefile|edit|fts3_tokenizer|pg_\w+|lo_import|lo_export"
    r"|dblink\w*|set_config|randomblob|zeroblob)\s*\(",
    re.IGNORECASE,
)
# Comments, quoted strings and quoted names: blanked before the keyword guard looks.
_QUOTED = re.compile(
    r"--[^\n]*|/\*.*?(\*/|$)|'(?:[^']|'')*'?|\"(?:[^\"]|\"\")*\"?|\[[^\]]*\]?|`(?:[^`]|``)*`?",
    re.DOTALL,
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class QueryLimits:
    """How much one query may take and give back (the settings: ``of``)."""

    seconds: float
    max_rows: int
    max_bytes: int  # of the answer's JSON; what the model reads of a result is about this
    max_value: int  # characters of one value shown
    max_columns: int
    max_sql: int = 10_000
    count_cap: int = 1_000_000  # rows past ``max_rows`` counted at most
    # Bytes one value (or one sorted row) may grow to while the query runs: past a long
    # text field's 80 KB, and with ``max_columns`` what one row can hold in memory.
    max_length: int = 250_000
    max_memory: int = 256 * 2**20  # bytes of the sandbox's database: the rows read

    @classmethod
    def of(cls, limits: QuerySettings) -> QueryLimits:
        """The limits the deployment set (``RECORDS_QUERY_*``), each by its own name."""
        values = asdict(limits)
        values.pop("cache_mb")
        return cls(**values)


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str
    source: str  # "id", "title", "created_at", ..., "field" or "user_name"
    field_key: str | None = None
    field_type: str | None = None


@dataclass(frozen=True)
class Table:
    name: str
    model_id: int
    model_name: str
    columns: tuple[Column, ...]

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def describe(self) -> str:
        """``tasks(id, title, status, due date, ...)``: names, with types where useful."""
        parts = []
        for c in self.columns:
            kind = c.field_type if c.source == "field" else None
            if kind in ("long_text", "select", "text"):
                kind = None
            parts.append(f"{c.name} {kind}" if kind else c.name)
        return f"{self.name}({', '.join(parts)})"


@dataclass
class QueryResult:
    """An answer, with the fields (and so the size) of the API's ``QueryOut``."""

    columns: list[str]
    rows: list[list[Any]]
    row_count: int
    truncated: bool
    note: str | None = None


def _invalid(message: str) -> ValidationFailed:
    return ValidationFailed("Invalid query.", [{"field": "sql", "message": message}])


# ---- the tables --------------------------------------------------------------------------


def _columns(model: RecordModel) -> tuple[Column, ...]:
    taken = set(RESERVED)

    def claim(name: str) -> str:
        while name in taken:
            name += "_field"
        taken.add(name)
        return name

    fields: list[Column] = []
    for f in model.fields:
        fields.append(Column(claim(f.key), SQL_TYPES.get(f.type, "TEXT"), "field", f.key, f.type))
        if f.type == "user":
            fields.append(Column(claim(f.key + "_name"), "TEXT", "user_name", f.key, f.type))
    title = [] if "title" in taken else [Column("title", "TEXT", "title")]
    return (
        Column("id", "INTEGER", "id"),
        *title,
        *fields,
        Column("created_at", "TEXT", "created_at"),
        Column("updated_at", "TEXT", "updated_at"),
        Column("creator_id", "INTEGER", "creator_id"),
        Column("visibility", "TEXT", "visibility"),
    )


def catalogue(principal: Principal) -> list[Table]:
    """The tables the caller's SQL may read: one per model of their org, by key."""
    principal.require("records.view")
    return [
        Table(
            # SQLite keeps names starting "sqlite_" for itself.
            ("model_" + m.key) if m.key.startswith("sqlite_") else m.key,
            m.id,
            m.name,
            _columns(m),
        )
        for m in models_with_fields(principal.org_id, RecordModel.key)
    ]


def describe_tables(tables: Iterable[Table]) -> str:
    """The tables for a tool description: one line each, stable while the models are."""
    lines = [t.describe() for t in tables]
    return "\n".join(lines) if lines else "(no models yet)"


# ---- the guard ---------------------------------------------------------------------------


def check_sql(sql: str, limits: QueryLimits) -> str:
    """A read-only guard on the text: one statement starting SELECT, WITH or VALUES, with no
    write keyword and no side-effecting function. A fast, clear refusal; what makes the
    query safe is where it runs (``run_query``). Returns the SQL without a final ``;``."""
    sql = (sql or "").strip()
    if not sql:
        raise _invalid("Write one SELECT statement.")
    if len(sql) > limits.max_sql:
        raise _invalid(f"The query is {len(sql):,} characters; the limit is {limits.max_sql:,}.")
    bare = _QUOTED.sub(lambda m: " " if m.group(0)[:2] in ("--", "/*") else "''", sql)
    bare = bare.rstrip().removesuffix(";")
    if ";" in bare:
        raise _invalid("One statement only: remove the ';' between statements.")
    words = [w.lower() for w in _WORD.findall(bare)]
    if not words or words[0] not in FIRST_WORDS:
        raise _invalid("Only reading is allowed: start with SELECT, WITH or VALUES.")
    writes = sorted(WRITE_WORDS.intersection(words))
    if writes:
        raise _invalid(
            f"Only reading is allowed: {writes[0].upper()} is not (a column of that name "
            f'goes in double quotes: "{writes[0]}").'
        )
    if match := SIDE_EFFECTS.search(bare):
        raise _invalid(f"The function {match.group(1).lower()}() is not allowed.")
    return sql.rstrip().removesuffix(";")


# ---- the sandbox -------------------------------------------------------------------------


@dataclass
class _Authorizer:
    """Reads of the model tables and the allowed functions; nothing else. It notes which
    columns each table is read for, and why it refused what it refused."""

    tables: dict[str, Table]
    reads: dict[str, set[str]] = field(default_factory=dict)
    functions: set[str] = field(default_factory=set)
    refusal: str | None = None

    def __call__(self, action: int, arg1: Any, arg2: Any, dbname: Any, source: Any) -> int:
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            # Columns are read from "main"; count(*) reads a table with no column, and
            # reading a CTE or subquery comes with no database name.
            if dbname in ("main", None) and arg1 in self.tables:
                self.reads.setdefault(arg1, set()).add(arg2 or "id")
                return sqlite3.SQLITE_OK
            if dbname is None and not str(arg1).startswith("sqlite_"):
                return sqlite3.SQLITE_OK
            return self._refuse(f"There is no table {arg1!r}. {self._known()}")
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() in FUNCTIONS:
                self.functions.add(arg2.lower())
                return sqlite3.SQLITE_OK
            return self._refuse(f"The function {arg2}() is not allowed.")
        return self._refuse("Only reading the model tables is allowed.")

    def _refuse(self, reason: str) -> int:
        self.refusal = self.refusal or reason
        return sqlite3.SQLITE_DENY

    def _known(self) -> str:
        names = ", ".join(self.tables) or "none yet"
        return f"The tables are the org's models: {names}."


class _Head(str):
    """The start of a text value too long to show whole, and how long it was."""

    length: int


def _text(raw: bytes, limit: int) -> str:
    """Text as read from the sandbox: stored text can hold anything, so a read never fails
    on it; past ``limit`` characters only the start is kept (the row is held at once)."""
    text = raw.decode("utf-8", "replace")
    if len(text) <= limit:
        return text
    head = _Head(text[:limit])
    head.length = len(text)
    return head


class _Printf:
    """SQLite's ``printf()`` (and its alias ``format()``), run on a connection of its own,
    that fails where SQLite's gives NULL: past the length limit SQLite's printf stops and
    answers NULL without an error (``||``, ``group_concat`` and ``replace`` raise "too
    big"), which would make an answer wrong without a word."""

    def __init__(self, max_length: int):
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_length)
        # A precision cuts %s by bytes, so a result may end inside a character.
        self.conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
        self.too_long = False

    def __call__(self, *args: Any) -> Any:
        marks = "".join(f", ?{i}" for i in range(2, len(args) + 1))
        value = self.conn.execute(f"SELECT printf(?1{marks})", args).fetchone()[0]
        if value is None and args and args[0] is not None:
            # NULL for a format: too long, or nothing written (printf('') is NULL too).
            # The same format after one plain character is NULL only when too long.
            probe = self.conn.execute(f"SELECT printf('x' || ?1{marks})", args).fetchone()[0]
            if probe is None:
                self.too_long = True
                raise OverflowError("printf() result too big")
        return value

    def close(self) -> None:
        self.conn.close()


def _is_now(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == "now"


class _LocalDate:
    """SQLite's ``date()`` with ``'now'`` (and no argument) on the caller's clock, so that
    ``date('now')`` is their today, as a date field means it (``due < date('now')``). Run
    by SQLite's own ``date`` on a connection of its own, modifiers and all; other times
    (``datetime('now')``, the ``created_at`` columns) stay UTC."""

    def __init__(self, now: datetime):
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        # A call per row (``date(due, '+7 days')``) repeats its arguments: a date field
        # holds few distinct days, so most calls are answered without SQLite.
        self._dates = lru_cache(maxsize=10_000)(self._date)
        self.at(now)

    def at(self, now: datetime) -> None:
        """Read 'now' as ``now`` (a kept sandbox answers each call at its own instant)."""
        self.wall = now.strftime("%Y-%m-%d %H:%M:%S.%f")[:23]  # the caller's wall clock
        self.today = now.date().isoformat()
        # The calls that read 'now' since, with what they gave (a kept answer holds while
        # each would give the same again).
        self.read: list[tuple[tuple[Any, ...], Any]] = []

    def __call__(self, *args: Any) -> Any:
        if not args or _is_now(args[0]):
            result = self.again(args)
            self.read.append((args, result))
            return result
        return self._dates(*args)

    def again(self, args: tuple[Any, ...]) -> Any:
        """What a call that reads 'now' (``today()``, ``date('now', …)``) gives at the
        instant set last, without noting it."""
        if not args:
            return self.today
        return self._dates(self.wall, *args[1:])

    def _date(self, *args: Any) -> Any:
        marks = ", ".join(f"?{i}" for i in range(1, len(args) + 1))
        return self.conn.execute(f"SELECT date({marks})", args).fetchone()[0]

    def close(self) -> None:
        self.conn.close()


# SQLite's own date and time functions, which may read its clock ('now', in UTC): an answer
# that calls one is never kept (``date`` and ``today`` are the caller's, ``_LocalDate``).
CLOCK_FUNCTIONS = frozenset({"datetime", "julianday", "time", "strftime", "unixepoch", "timediff"})
# Answers one sandbox keeps for repeats (each within ``max_bytes``).
MAX_ANSWERS = 16


@dataclass(frozen=True)
class _Answer:
    result: QueryResult
    tables: dict[str, _Copied]  # what each table read held (compared by identity)
    read_now: tuple[tuple[tuple[Any, ...], Any], ...]


@dataclass(frozen=True, eq=False)
class _Copied:
    """What a sandbox table holds: its model's rows at ``version``, these columns."""

    version: int
    columns: frozenset[str]


class _Sandbox:
    """A private in-memory database with the model tables, empty until ``fill``; its
    ``date('now')`` and ``today()`` are the caller's date at ``now`` (``_LocalDate``).
    Kept between calls (``query_cache``): ``start`` readies it for each one."""

    def __init__(self, tables: list[Table], limits: QueryLimits, now: datetime | None = None):
        self.limits = limits
        self.tables = {t.name: t for t in tables}
        self.copied: dict[str, _Copied] = {}
        self.people: dict[int, str] | None = None
        self.answers: OrderedDict[str, _Answer] = OrderedDict()
        self.keepable = False
        # A URI name, so that the one statement that copies may attach the app's SQLite
        # file read-only (``query_rows.copy_attached``); nothing else can attach anything.
        self.conn = sqlite3.connect(
            "file::memory:", uri=True, isolation_level=None, check_same_thread=False
        )
        self.conn.text_factory = lambda raw: _text(raw, limits.max_value)
        for limit, value in (
            (sqlite3.SQLITE_LIMIT_LENGTH, 1_000_000),  # while filling: a record's values JSON
            (sqlite3.SQLITE_LIMIT_SQL_LENGTH, max(limits.max_sql * 4, 100_000)),
            (sqlite3.SQLITE_LIMIT_ATTACHED, 0),
            (sqlite3.SQLITE_LIMIT_EXPR_DEPTH, 200),
            (sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 50),
            (sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 1_000),
            (sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH, 0),
        ):
            self.conn.setlimit(limit, value)
        # Sorting spills to a temporary file, and the page cache stays small.
        self.conn.execute("PRAGMA temp_store = FILE")
        self.conn.execute("PRAGMA cache_size = -16000")
        # The rows copied in are held in memory: so much and no more.
        page = self.conn.execute("PRAGMA page_size").fetchone()[0]
        self.conn.execute(f"PRAGMA max_page_count = {limits.max_memory // page}")
        for table in tables:
            cols = ", ".join(f'"{c.name}" {c.sql_type}' for c in table.columns)
            self.conn.execute(f'CREATE TABLE "{table.name}" ({cols})')
        self.conn.execute("PRAGMA query_only = ON")
        self.printf = _Printf(limits.max_length)
        for name in ("printf", "format"):
            self.conn.create_function(name, -1, self.printf, deterministic=True)
        self.local_date = _LocalDate(now or datetime.now(UTC))
        # Deterministic within the statement, as SQLite's own 'now' is: a constant call
        # (``date('now')`` in a WHERE) is computed once, not once a row.
        self.conn.create_function("date", -1, self.local_date, deterministic=True)
        self.conn.create_function("today", 0, lambda: self.local_date(), deterministic=True)
        self.start(now or datetime.now(UTC))

    def start(self, now: datetime) -> None:
        """Ready for one call: 'now' is ``now`` (the statement's clock starts in ``run``)."""
        self.local_date.at(now)
        self.printf.too_long = False
        self.deadline = math.inf

    def size(self) -> int:
        """Bytes of memory the copied rows take (the pages of both databases)."""
        total = 0
        for schema in ("main", "temp"):
            pages = self.conn.execute(f"PRAGMA {schema}.page_count").fetchone()[0]
            page = self.conn.execute(f"PRAGMA {schema}.page_size").fetchone()[0]
            total += pages * page
        return total + len(self.answers) * self.limits.max_bytes

    def close(self) -> None:
        """Close its connections (the copied rows go with them)."""
        self.conn.close()
        self.printf.close()
        self.local_date.close()

    @contextmanager
    def guarded(self) -> Iterator[_Authorizer]:
        """The authorizer, the deadline and the limits of what a query computes (how many
        columns, how long a value or a sorted row), in force for the block."""
        authorizer = _Authorizer(self.tables)
        self.conn.set_authorizer(authorizer)
        self.conn.set_progress_handler(lambda: int(time.monotonic() > self.deadline), 2_000)
        columns = self.conn.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, self.limits.max_columns)
        length = self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.limits.max_length)
        try:
            yield authorizer
        except sqlite3.Error as err:
            raise self._error(err, authorizer) from None
        finally:
            self.conn.set_authorizer(None)
            self.conn.set_progress_handler(None, 0)
            self.conn.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, columns)
            self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, length)

    def _error(self, err: sqlite3.Error, authorizer: _Authorizer) -> ValidationFailed:
        text = str(err)
        if authorizer.refusal:  # "not authorized", "access to … is prohibited"
            return _invalid(authorizer.refusal)
        if text == "interrupted":
            return _invalid(
                f"The query ran longer than {self.limits.seconds:g} s and was stopped: "
                "filter or aggregate more, or add LIMIT."
            )
        if text.startswith("no such table"):
            return _invalid(f"{text}. {authorizer._known()}")
        if "too big" in text or self.printf.too_long:
            return _invalid(
                f"A value grew past {self.limits.max_length // 1000} KB: the query builds "
                "too much text (or sorts rows too wide: select fewer columns)."
            )
        if text.startswith("too many columns"):
            return _invalid(
                f"The query asks for more than {self.limits.max_columns} columns: name the "
                "columns you need."
            )
        return _invalid(f"SQL error: {text}.")

    def plan(self, sql: str) -> dict[str, set[str]]:
        """Which columns of which tables the statement reads (it is compiled, not run), and
        whether its answer may be kept: not when it reads SQLite's own clock."""
        self.conn.execute("PRAGMA query_only = ON")
        with self.guarded() as authorizer:
            self.conn.execute("EXPLAIN " + sql).fetchall()
        self.keepable = not authorizer.functions & CLOCK_FUNCTIONS
        return authorizer.reads

    def answered(self, sql: str) -> QueryResult | None:
        """The kept answer of ``sql``, when it still holds: the tables it read hold what they
        held (not copied since) and each call it made that read 'now' gives the same now."""
        answer = self.answers.pop(sql, None)
        if answer is None:
            return None
        if any(self.copied.get(name) is not copied for name, copied in answer.tables.items()):
            return None
        if any(self.local_date.again(args) != value for args, value in answer.read_now):
            return None
        self.answers[sql] = answer  # the most recently used
        return copy.deepcopy(answer.result)

    def set_people(self, people: dict[int, str]) -> None:
        """The org's members, for ``<user>_name`` columns (a table no query can read);
        tables copied with other names are copied again when next read."""
        if people == self.people:
            return
        self.conn.execute("PRAGMA query_only = OFF")
        self.conn.execute("DROP TABLE IF EXISTS temp.people")
        self.conn.execute("CREATE TEMP TABLE people (id INTEGER PRIMARY KEY, name TEXT)")
        self.conn.executemany("INSERT INTO temp.people VALUES (?, ?)", people.items())
        self.conn.execute("PRAGMA query_only = ON")
        if self.people is not None:
            for name in list(self.copied):
                if any(c.source == "user_name" for c in self.tables[name].columns):
                    del self.copied[name]
        self.people = people

    def holds(self, table: Table, version: int, columns: Iterable[Column]) -> bool:
        """Whether ``table`` holds its model's rows at ``version`` with ``columns``."""
        copied = self.copied.get(table.name)
        return (
            copied is not None
            and copied.version == version
            and {c.name for c in columns} <= copied.columns
        )

    def fill(self, principal: Principal, table: Table, columns: list[Column], version: int) -> None:
        """Copy the caller's visible rows of ``table``'s model in (``query_rows``), replacing
        what it held: ``columns`` and, at the same version, the columns it held already."""
        copied = self.copied.pop(table.name, None)
        if copied is not None and copied.version == version:
            wanted = {c.name for c in columns} | copied.columns
            columns = [c for c in table.columns if c.name in wanted]
        names = ", ".join(f'"{c.name}"' for c in columns)
        self.conn.execute("PRAGMA query_only = OFF")
        # Copying stops where the tool call's time does.
        limit = deadline() or math.inf
        self.conn.set_progress_handler(lambda: int(time.monotonic() > limit), 10_000)
        try:
            # Whatever it held goes (rows copied with other names, too: ``set_people``).
            self.conn.execute(f'DELETE FROM main."{table.name}"')
            self._copy(principal, table, columns, names)
        except sqlite3.OperationalError as err:
            if str(err) == "interrupted":
                raise _invalid(
                    "Copying the rows this query reads took longer than the call may take: "
                    "read fewer models."
                ) from err
            if "full" not in str(err):
                raise
            # Past ``max_memory`` (and rolled back by SQLite).
            held = f"{self.limits.max_memory / 2**20:g} MB"
            raise _invalid(
                f"The rows this query reads take more than {held}: read fewer columns "
                "(long text above all) or fewer models."
            ) from err
        finally:
            self.conn.set_progress_handler(None, 0)
            self.conn.execute("PRAGMA query_only = ON")
        self.copied[table.name] = _Copied(version, frozenset(c.name for c in columns))

    def _copy(self, principal: Principal, table: Table, columns: list[Column], names: str) -> None:
        path = query_rows.attached_file()
        if path is not None:
            # One statement, its own transaction; the file is detached before it returns.
            self.conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 1)
            try:
                query_rows.copy_attached(
                    self.conn, path, table.name, names, principal, table.model_id, columns
                )
            finally:
                self.conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            return
        rows = query_rows.fetched(principal, table.model_id, columns)
        self.conn.execute("BEGIN")
        try:
            self.conn.executemany(query_rows.insert_sql(table.name, names, columns), rows)
        except BaseException:
            if self.conn.in_transaction:  # SQLite rolls back a full database itself
                self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def run(self, sql: str, reads: Iterable[str] = ()) -> QueryResult:
        """Run the statement (``plan`` first); its answer is kept for a repeat."""
        self.local_date.read = []
        # The statement's own limit from now (the rows are in), or the tool call's when
        # that ends first.
        self.deadline = min(time.monotonic() + self.limits.seconds, deadline() or math.inf)
        with self.guarded():
            cursor = self.conn.execute(sql)
            columns = [d[0] for d in cursor.description or ()]
            result = _collect(cursor, columns, self.limits)
        if self.keepable:
            tables = {name: self.copied[name] for name in reads}
            read_now = tuple(self.local_date.read)
            self.answers[sql] = _Answer(copy.deepcopy(result), tables, read_now)
            while len(self.answers) > MAX_ANSWERS:
                self.answers.popitem(last=False)
        return result


def _value(value: Any, limit: int) -> tuple[Any, bool]:
    """A result value as JSON can hold it, a text within ``limit`` characters (a cut one
    says how many more it had); and whether it was cut."""
    if isinstance(value, str):
        length = getattr(value, "length", len(value))
        return scrub(clip(value, limit, length)), length > limit
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>", False
    if isinstance(value, float) and not math.isfinite(value):
        return str(value), False
    return value, False


def _row(row: tuple[Any, ...], limit: int) -> tuple[list[Any], int]:
    """A row's values as the answer shows them, and how many of them were cut."""
    shown = [_value(v, limit) for v in row]
    return [v for v, _ in shown], sum(cut for _, cut in shown)


def _size(value: Any) -> int:
    """The bytes ``value`` takes in the answer's JSON, whichever way it is written: as the
    API sends it (pydantic: compact UTF-8, ``0.00001``) or as a stored result or the API's
    fallback writes it (``json.dumps``: ``", "`` between items, ``\\u`` escapes, ``1e-05``)."""
    return max(len(to_json(value)), len(json.dumps(value, default=str)))


# Between two rows of the answer: "," as sent, ", " as stored.
_SEPARATOR = 2


def _note(
    shown: int, more: int, cut_for: str | None, cut_values: int, squeezed: bool, limits: QueryLimits
) -> str | None:
    """What an answer says it left out: rows (past the row or byte limit), and the end of
    long values (past ``max_value``, or to fit the answer)."""
    notes = []
    if more:
        why = (
            f"only the first {shown} rows are shown"
            if cut_for == "rows"
            else f"the rows shown fill the {limits.max_bytes // 1000} KB answer"
        )
        counted = f"{more:,}" + ("+" if more > limits.count_cap else "")
        notes.append(
            f"…and {counted} more rows: {why}. Aggregate (GROUP BY, count), "
            "select fewer columns, or add LIMIT/OFFSET."
        )
    if cut_values:
        why = (
            f"to fit the {limits.max_bytes // 1000} KB answer"
            if squeezed
            else f"past {limits.max_value:,} characters"
        )
        notes.append(
            f"{cut_values:,} long value{'s are' if cut_values > 1 else ' is'} cut {why}, "
            "each ending in …[cut: N more characters]: select less text (substr) or "
            "fewer columns."
        )
    return " ".join(notes) or None


def _room_for_rows(columns: list[str], limits: QueryLimits) -> int:
    """The bytes an answer has for its rows: ``max_bytes`` less the most that all else in
    it can take (its columns, the largest counts and the longest note)."""
    most = limits.max_rows + limits.count_cap + 1
    notes = [
        _note(limits.max_rows, most, why, limits.max_rows * limits.max_columns, squeezed, limits)
        for why in ("rows", "bytes")
        for squeezed in (True, False)
    ]
    answer = QueryResult(columns, [], most, False, max(notes, key=_size))
    room = limits.max_bytes - _size(asdict(answer))
    if room <= 0:
        raise _invalid(
            f"The column names alone fill the {limits.max_bytes // 1000} KB answer: name "
            "the columns shorter (AS) or select fewer."
        )
    return room


def _squeezed(row: tuple[Any, ...], room: int, limits: QueryLimits) -> tuple[list[Any], int]:
    """A first row too big for the answer on its own, its texts cut shorter until it fits."""
    limit = limits.max_value
    while limit > 1:
        limit //= 2
        values, cut = _row(row, limit)
        if _size(values) <= room:
            return values, cut
    raise _invalid(
        f"One row of {len(row)} columns does not fit the {limits.max_bytes // 1000} KB "
        "answer: select fewer columns."
    )


def _collect(cursor: sqlite3.Cursor, columns: list[str], limits: QueryLimits) -> QueryResult:
    """The first rows within the row and byte limits, and how many more there were. The
    whole answer's JSON stays within ``max_bytes`` whatever its rows, as sent and as
    stored: one first row too big alone is shown with its texts cut to fit."""
    rows: list[list[Any]] = []
    room = _room_for_rows(columns, limits)
    size = 0
    cut_for = None
    cut_values = 0
    squeezed = False
    for row in cursor:
        if len(rows) >= limits.max_rows:
            cut_for = "rows"
            break
        values, cut = _row(row, limits.max_value)
        if size + _size(values) + _SEPARATOR > room:
            if rows:
                cut_for = "bytes"
                break
            values, cut = _squeezed(row, room - _SEPARATOR, limits)
            squeezed = True
        size += _size(values) + _SEPARATOR
        cut_values += cut
        rows.append(values)
    more = 0
    if cut_for:
        more = 1 + sum(1 for _ in _take(cursor, limits.count_cap))
    note = _note(len(rows), more, cut_for, cut_values, squeezed, limits)
    return QueryResult(columns, rows, len(rows) + more, bool(more or cut_values), note)


def _take(rows: Iterable[Any], n: int) -> Iterator[Any]:
    for i, row in enumerate(rows):
        if i >= n:
            return
        yield row


# ---- the calls ---------------------------------------------------------------------------


_CACHE = "monark.query_cache"


def sandbox_cache() -> SandboxCache:
    """This process's kept sandboxes for the app (made at first use, so after a fork)."""
    cache = current_app.extensions.get(_CACHE)
    if cache is None:
        cache = current_app.extensions.setdefault(
            _CACHE, SandboxCache(settings().query.cache_mb * 2**20)
        )
    return cache


def data_versions(org_id: int, model_ids: Iterable[int]) -> dict[int, int]:
    """Each model's ``data_version`` as the database holds it now (columns, not the ORM's
    objects, which may hold what this session read earlier)."""
    ids = sorted(set(model_ids))
    if not ids:
        return {}
    stmt = select(RecordModel.id, RecordModel.data_version).where(
        RecordModel.org_id == org_id, RecordModel.id.in_(ids)
    )
    return {model_id: version for model_id, version in db.session.execute(stmt)}


def run_query(
    principal: Principal,
    sql: str,
    limits: QueryLimits | None = None,
    now: datetime | None = None,
) -> QueryResult:
    """Run one read-only statement over the caller's visible records (see the module);
    ``date('now')`` and ``today()`` are the caller's date at ``now`` (default: this instant)
    in their time zone. The sandbox is the caller's kept one when its tables are current
    (``query_cache``)."""
    principal.require("records.view")
    limits = limits or QueryLimits.of(settings().query)
    sql = check_sql(sql, limits)
    tables = catalogue(principal)
    caller = CallerKey.of(principal)
    local_now = zones.local_now(principal, now)
    key = (caller, tuple(tables), limits)
    # One person's copies are of one catalogue and one set of rights at a time.
    person = (caller.org_id, caller.user_id, caller.actor)
    with sandbox_cache().use(key, lambda: _Sandbox(tables, limits, local_now), person) as sandbox:
        sandbox.start(local_now)
        reads = sandbox.plan(sql)
        versions = data_versions(principal.org_id, (sandbox.tables[n].model_id for n in reads))
        needed = {
            name: [c for c in sandbox.tables[name].columns if c.name in wanted or c.source == "id"]
            for name, wanted in reads.items()
        }
        # Before any table is checked: new names drop every copy that holds names.
        if any(c.source == "user_name" for columns in needed.values() for c in columns):
            sandbox.set_people({u.id: u.name for u in members(principal.org_id)})
        for name, columns in needed.items():
            table = sandbox.tables[name]
            # A model deleted since the catalogue was read: no rows, never stale ones.
            version = versions.get(table.model_id, -1)
            if not sandbox.holds(table, version, columns):
                sandbox.fill(principal, table, columns, version)
        return sandbox.answered(sql) or sandbox.run(sql, reads)
