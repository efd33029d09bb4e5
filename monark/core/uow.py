"""Units of work: run code in its own app context and transaction, kept only on success.

Services commit as they go. Inside a unit of work their ``commit()`` only releases a
SAVEPOINT; the real commit happens when the block ends well, and anything that raised
(or was marked failed) is rolled back whole. The assistant's tool calls run this way, so a
tool that fails half-way leaves nothing behind and never touches the caller's session.
``on_commit`` defers work (the automations engine) until the real commit, and drops it on
a rollback. ``time_limit`` sets a deadline (a tool call's time limit) that the units
opened within it hold: no statement starts after it, a running one is stopped at it, and
a unit it passes keeps nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from flask import current_app
from sqlalchemy import Connection, Select, event, select, text
from sqlalchemy.orm import Session

from monark.core.errors import AppError
from monark.extensions import db


@dataclass
class UnitOfWork:
    session: Session
    read_only: bool = False  # rolled back at the end whatever happens
    failed: bool = False
    callbacks: list[Callable[[], None]] = field(default_factory=list)

    def fail(self) -> None:
        """Roll everything back when the block ends, even without an exception."""
        self.failed = True


Row = TypeVar("Row")

_current: ContextVar[UnitOfWork | None] = ContextVar("monark_unit_of_work", default=None)
# When the statements of units opened now must stop (``time.monotonic()``), if ever.
_deadline: ContextVar[float | None] = ContextVar("monark_deadline", default=None)


def for_update(stmt: Select[Any]) -> Select[Any]:
    """``stmt`` for rows this transaction will read, change and write back, held until commit.

    PostgreSQL locks the rows (``FOR UPDATE``). SQLite has no row locks: a write that changes
    nothing takes the database's write lock first, so a concurrent writer waits and then reads
    what this one committed. Either way two read-modify-writes run one after the other.
    """
    # populate_existing: a row this session already holds is refreshed from what the lock
    # let through, instead of handing back the values read before the wait.
    stmt = stmt.execution_options(populate_existing=True)
    if db.session.get_bind().dialect.name == "sqlite":
        # A writing unit began with BEGIN IMMEDIATE: it holds the write lock already.
        if writing_unit() is None:
            db.session.execute(text("UPDATE orgs SET id = id WHERE 0"))
        return stmt
    return stmt.with_for_update()


def get_or_add(model: type[Row], where: Mapping[str, Any], **new: Any) -> Row:
    """The ``model`` row whose columns equal ``where``, or a new one of ``where`` and ``new``
    added to the session, not flushed: the caller sets what it needs first. ``where`` names
    the columns of a unique key (with ``org_id``), so the row found is the only one."""
    found = db.session.scalar(select(model).filter_by(**where))
    if found is None:
        found = model(**where, **new)
        db.session.add(found)
    return found


def writing_unit() -> UnitOfWork | None:
    """The unit of work whose transaction ``db.session`` writes in now, if any: the locks
    its statements take are held until that unit ends, whatever its session commits."""
    unit = _current.get()
    if unit is None or unit.read_only or db.session() is not unit.session:
        return None
    return unit


def on_commit(callback: Callable[[], None]) -> bool:
    """Run ``callback`` once the current unit of work has committed (never if it rolls back).

    Returns False, doing nothing, outside a unit of work: there a session's commit is real.
    """
    unit = _current.get()
    if unit is None:
        return False
    unit.callbacks.append(callback)
    return True


@contextmanager
def session_released() -> Iterator[None]:
    """Commit ``db.session`` and keep its objects readable without it: in the block it holds
    no connection (a unit of work there is the only one this work checks out), and after
    it they are expired, as a commit leaves them, so what the block changed is read fresh."""
    session = db.session()
    expiring = session.expire_on_commit
    session.expire_on_commit = False
    try:
        session.commit()
    finally:
        session.expire_on_commit = expiring
    try:
        yield
    finally:
        session.expire_all()


def _begin_for_savepoints(connection: Connection) -> Callable[[], None] | None:
    """On SQLite, take transaction control from pysqlite (its own breaks SAVEPOINTs)."""
    if connection.dialect.name != "sqlite":
        return None
    raw = connection.connection.driver_connection
    previous = raw.isolation_level
    raw.isolation_level = None

    def restore() -> None:
        raw.isolation_level = previous

    return restore


class TimeLimitPassed(AppError):
    """The deadline of a ``time_limit`` passed: the unit that hit it keeps nothing."""

    code, status = "time_limit", 503

    def __init__(self) -> None:
        super().__init__("The time limit of this work passed; nothing it did was kept.")


def _refuse_writes(connection: Connection) -> Callable[[], None] | None:
    """Make a read-only unit's connection refuse writes, so that one there fails loudly
    instead of being rolled back unseen (a write that must be kept opens a unit of its
    own). PostgreSQL: its transaction begins ``READ ONLY`` (no round trip of its own; reset
    when the connection goes back to the pool). SQLite: ``query_only`` until undone."""
    if connection.dialect.name != "sqlite":
        connection.execution_options(postgresql_readonly=True)
        return None
    raw = connection.connection.driver_connection
    raw.execute("PRAGMA query_only = ON")

    def undo() -> None:
        raw.execute("PRAGMA query_only = OFF")

    return undo


@dataclass(frozen=True)
class Deadline:
    """When a ``time_limit`` ends."""

    ends: float  # time.monotonic()

    def passed(self) -> bool:
        """Whether it has come (a statement that failed since was stopped by it)."""
        return time.monotonic() >= self.ends


@contextmanager
def time_limit(seconds: float) -> Iterator[Deadline]:
    """Every unit of work opened in the block holds to a deadline ``seconds`` from now (an
    enclosing limit that ends sooner still holds): no statement starts after it, a running
    one is stopped at it, and a unit it passes before its commit keeps nothing."""
    ends = time.monotonic() + seconds
    current = _deadline.get()
    ends = ends if current is None else min(current, ends)
    token = _deadline.set(ends)
    try:
        yield Deadline(ends)
    finally:
        _deadline.reset(token)


def deadline() -> float | None:
    """When the current ``time_limit`` ends (``time.monotonic()``), or None."""
    return _deadline.get()


def deadline_passed() -> bool:
    """Whether a ``time_limit`` is in force and its deadline has passed."""
    ends = _deadline.get()
    return ends is not None and time.monotonic() >= ends


# Statements that end (part of) a transaction: they run whatever the time, or what a unit
# did past its deadline could not be undone.
_ENDINGS = ("ROLLBACK", "RELEASE", "SAVEPOINT")
# PostgreSQL's statement_timeout counts from each statement's start: set once, it lets
# every later statement run past the deadline by the time gone since. It is set again
# when that is more than this (a round trip saved on each statement of a burst).
STATEMENT_TIMEOUT_SLACK = 0.01


class _Limit:
    """A unit's deadline on its connection: ``before_cursor_execute`` refuses a statement
    once it has passed and, on PostgreSQL, cuts ``statement_timeout`` to the time left."""

    def __init__(self, connection: Connection, ends: float):
        self.ends = ends
        self.postgres = connection.dialect.name == "postgresql"
        self.raw = connection.connection.dbapi_connection
        self.set_at = -math.inf  # when statement_timeout was last cut to the time left

    def before_statement(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith(_ENDINGS):
            return
        now = time.monotonic()
        if now >= self.ends:
            raise TimeLimitPassed()
        if self.postgres and now - self.set_at > STATEMENT_TIMEOUT_SLACK:
            # Rounded up: a statement it stops has reached the deadline (``Deadline.passed``).
            left_ms = max(1, math.ceil((self.ends - now) * 1000))
            # A cursor of its own: the statement's may be a server-side one.
            self.raw.execute(f"SET LOCAL statement_timeout = {left_ms}")
            self.set_at = now


def _limit_time(connection: Connection, ends: float | None) -> Callable[[], None] | None:
    """Hold this connection's statements to the deadline, if one is set: each is refused
    once it has passed (``_Limit``). A statement running then is stopped: PostgreSQL's
    ``statement_timeout`` (lock waits count), cut to the time left before each statement;
    on SQLite a progress handler, and a busy timeout no longer than the time left (waiting
    for the write lock counts). Returns what undoes it before the connection goes back to
    the pool."""
    if ends is None:
        return None
    limit = _Limit(connection, ends)
    # On the unit's Connection only: it is dropped with it, and other work never pays.
    event.listen(connection, "before_cursor_execute", limit.before_statement)
    if limit.postgres:
        return None  # statement_timeout ends with the transaction
    raw = connection.connection.driver_connection
    left_ms = max(1, math.ceil((ends - time.monotonic()) * 1000))
    busy = raw.execute("PRAGMA busy_timeout").fetchone()[0]
    raw.execute(f"PRAGMA busy_timeout = {min(busy, left_ms)}")
    raw.set_progress_handler(lambda: int(time.monotonic() > ends), 1_000)

    def undo() -> None:
        raw.set_progress_handler(None, 0)
        raw.execute(f"PRAGMA busy_timeout = {busy}")

    return undo


@contextmanager
def unit_of_work(read_only: bool = False) -> Iterator[UnitOfWork]:
    """A fresh app context whose ``db.session`` writes only if the block succeeds.

    Nested units share the outermost one (its connection and transaction), so a tool that
    makes several in-process calls keeps all of them or none, on one connection. A
    ``read_only`` unit takes no write lock, refuses writes (one there fails, rather than
    being rolled back unseen with the rest) and is rolled back at the end; a unit that
    writes, opened within one, has a transaction of its own (on its own connection),
    committed when its block ends well: it keeps its word where the reads around it are
    thrown away. Inside a ``time_limit`` a unit holds to its deadline; one that would
    commit after it rolls back instead (``TimeLimitPassed``).
    """
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    outer = _current.get()
    committed: list[UnitOfWork] = []
    with app.app_context():
        if outer is not None and (read_only or not outer.read_only):
            db.session.registry.set(outer.session)
            try:
                yield outer
            finally:
                # Leave the shared session open: the outermost unit closes it.
                db.session.registry.clear()
            return
        ends = _deadline.get()
        connection = db.engine.connect()
        restore = _begin_for_savepoints(connection)
        unlimit: Callable[[], None] | None = None
        writable: Callable[[], None] | None = None
        try:
            if read_only:
                writable = _refuse_writes(connection)
            transaction = connection.begin()
            unlimit = _limit_time(connection, ends)
            if restore is not None:
                # pysqlite only opens transactions lazily: open it now. A write takes the
                # write lock up front (waiting for it counts toward the deadline), so
                # concurrent units wait for each other rather than deadlock; a read takes
                # none.
                connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")
            # A plain Session: Flask-SQLAlchemy's own would pick the engine, not this
            # connection. Its commits and rollbacks are SAVEPOINTs: the transaction (and
            # its time limit) is the unit's, and ends only with it. A commit there ends no
            # transaction, so what the unit loaded stays as it wrote it: nothing is expired
            # (a view answering with the row it just saved reads it again otherwise).
            session = Session(
                bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
            )
            db.session.registry.set(session)
            unit = UnitOfWork(session, read_only=read_only)
            token = _current.set(unit)
            try:
                yield unit
                if unit.failed or unit.read_only:
                    transaction.rollback()
                else:
                    session.commit()  # releases the session's savepoint
                    if ends is not None and time.monotonic() >= ends:
                        raise TimeLimitPassed()  # as a statement then would have been
                    transaction.commit()
                    committed.append(unit)
            except BaseException:
                transaction.rollback()
                raise
            finally:
                _current.reset(token)
                session.close()
        finally:
            if unlimit is not None:
                unlimit()
            if writable is not None:
                writable()
            if restore is not None:
                restore()
            connection.close()
            db.session.registry.clear()
    for unit in committed:  # after the real commit, outside the unit's context and connection
        for callback in unit.callbacks:
            callback()


def listen_once(target: Any, listeners: Iterable[tuple[str, Callable[..., Any]]]) -> None:
    """Hook each ``(event name, listener)`` to ``target`` (SQLAlchemy's ``Session``, say),
    once per process however many apps install them (one per test)."""
    for name, listener in listeners:
        if not event.contains(target, name, listener):
            event.listen(target, name, listener)
