"""Databases of their own for tests: a new PostgreSQL database beside ``DATABASE_URL``'s."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


def is_postgres(url: str) -> bool:
    return url.startswith(("postgres://", "postgresql"))


@contextmanager
def new_postgres_database(url: str, name: str) -> Iterator[str]:
    """The URL of a new, empty database ``name`` on the PostgreSQL server of ``url`` (one
    left over from a run that was killed is dropped first); dropped afterwards."""
    server = make_url(url.replace("postgres://", "postgresql+psycopg://", 1))
    if server.drivername == "postgresql":
        server = server.set(drivername="postgresql+psycopg")
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
        # A test database needs no durability: without waiting for the WAL flush, each
        # commit saves a disk round trip (every connection to it, app processes' included).
        conn.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit = off'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
