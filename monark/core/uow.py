"""Units of work: run code in its own app context and transaction, kept only on success.

Services commit as they go. Inside a unit of work their ``commit()`` only releases a
SAVEPOINT; the real commit happens when the block ends well, and anything that raised
(or was marked failed) is rolled back whole. The assistant's tool calls run this way, so a
tool that fails half-way leaves nothing behind and never touches the caller's session.
``on_commit`` defers work (the automations engine) until the real commit, and drops it on
a rollback. ``time_limit`` makes the statements of the units opened within it stop at a
deadline (a tool call's time limit).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from flask import current_app
from sqlalchemy import Connection, Select, text
from sqlalchemy.orm import Session

from monark.extensions import db


@dataclass
class UnitOfWork:
    session: Session
    failed: bool = False
    callbacks: list[Callable[[], None]] = field(default_factory=list)

    def fail(self) -> None:
        """Roll everything back when the block ends, even without an exception."""
        self.failed = True


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
        db.session.execute(text("UPDATE orgs SET id = id WHERE 0"))
        return stmt
    return stmt.with_for_update()


def on_commit(callback: Callable[[], None]) -> bool:
    """Run ``callback`` once the current unit of work has committed (never if it rolls back).

    Returns False, doing nothing, outside a unit of work: there a session's commit is real.
    """
    unit = _current.get()
    if unit is None:
        return False
    unit.callbacks.append(callback)
    return True


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


@dataclass(frozen=True)
class Deadline:
    """When a ``time_limit`` ends."""

    ends: float  # time.monotonic()

    def passed(self) -> bool:
        """Whether it has come (a statement that failed since was stopped by it)."""
        return time.monotonic() >= self.ends


@contextmanager
def time_limit(seconds: float) -> Iterator[Deadline]:
    """Every unit of work opened in the block stops its statements once ``seconds`` have
    passed (an enclosing limit that ends sooner still holds): what was running fails, and
    its unit rolls back."""
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


def _limit_time(connection: Connection) -> Callable[[], None] | None:
    """Hold this connection's statements to the deadline, if one is set. PostgreSQL:
    ``statement_timeout`` for its transaction (lock waits count). SQLite: a progress
    handler, and a busy timeout no longer than the time left (waiting for the write lock
    counts). Returns what undoes it before the connection goes back to the pool."""
    ends = _deadline.get()
    if ends is None:
        return None
    # Rounded up: a wait it ends has reached the deadline (``Deadline.passed``).
    left_ms = max(1, math.ceil((ends - time.monotonic()) * 1000))
    if connection.dialect.name != "sqlite":
        connection.exec_driver_sql(f"SET LOCAL statement_timeout = {left_ms}")
        return None  # it ends with the transaction
    raw = connection.connection.driver_connection
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

    Nested units share the outermost one's transaction, so a tool that makes several
    in-process calls keeps all of them or none. A ``read_only`` unit outside any other has
    a transaction of its own too, rolled back at the end, and takes no write lock (units
    within it have their own). Inside a ``time_limit`` its statements stop at the deadline.
    """
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    outer = _current.get()
    committed: list[UnitOfWork] = []
    with app.app_context():
        if outer is not None:
            db.session.registry.set(outer.session)
            try:
                yield outer
            finally:
                # Leave the shared session open: the outermost unit closes it.
                db.session.registry.clear()
            return
        connection = db.engine.connect()
        restore = _begin_for_savepoints(connection)
        unlimit: Callable[[], None] | None = None
        try:
            transaction = connection.begin()
            unlimit = _limit_time(connection)
            if restore is not None:
                # pysqlite only opens transactions lazily: open it now. A write takes the
                # write lock up front, so concurrent units wait for each other rather than
                # deadlock; a read takes none.
                connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")
            # A plain Session: Flask-SQLAlchemy's own would pick the engine, not this
            # connection. Its commits and rollbacks are SAVEPOINTs: the transaction (and
            # its time limit) is the unit's, and ends only with it.
            session = Session(bind=connection, join_transaction_mode="create_savepoint")
            db.session.registry.set(session)
            unit = UnitOfWork(session, failed=read_only)
            # A read opens no unit for those within it: a write there keeps its own word.
            token = None if read_only else _current.set(unit)
            try:
                yield unit
                if unit.failed:
                    transaction.rollback()
                else:
                    session.commit()  # releases the session's savepoint
                    transaction.commit()
                    committed.append(unit)
            except BaseException:
                transaction.rollback()
                raise
            finally:
                if token is not None:
                    _current.reset(token)
                session.close()
        finally:
            if unlimit is not None:
                unlimit()
            if restore is not None:
                restore()
            connection.close()
            db.session.registry.clear()
    for unit in committed:  # after the real commit, outside the unit's context and connection
        for callback in unit.callbacks:
            callback()
