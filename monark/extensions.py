"""Flask extensions, created here and bound to the app in ``create_app``."""

import sqlite3
from datetime import datetime
from typing import Any

from flask_login import LoginManager
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from flask_wtf.csrf import CSRFProtect
from sqlalchemy import DateTime, Engine, MetaData, event
from sqlalchemy.orm import DeclarativeBase, registry

# Named constraints keep Alembic migrations identical on SQLite and PostgreSQL.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    # Aware datetimes everywhere: timestamptz on PostgreSQL (SQLite stores them naive).
    registry = registry(
        metadata=MetaData(naming_convention=NAMING_CONVENTION),
        type_annotation_map={datetime: DateTime(timezone=True)},
    )


db = SQLAlchemy(model_class=Base)
migrate = Migrate()
login_manager = LoginManager()
csrf = CSRFProtect()


@event.listens_for(Engine, "connect")
def _sqlite_wal(dbapi_connection: Any, connection_record: Any) -> None:
    """SQLite in WAL mode: readers never wait for the writer (many streaming turns at once).
    Its ``lower()`` lowercases ASCII only: Python's lowercases every script, as PostgreSQL's
    does, so text filters mean the same on both (``É`` matches ``é``)."""
    if isinstance(dbapi_connection, sqlite3.Connection):
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()
        dbapi_connection.create_function("lower", 1, _lower, deterministic=True)


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value
