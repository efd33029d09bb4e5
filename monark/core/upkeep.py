"""Upkeep of the database itself, as a periodic job: the query planner's statistics."""

from __future__ import annotations

from sqlalchemy import text

from monark.core import jobs
from monark.extensions import db


@jobs.periodic("upkeep.optimize", minutes=60)
def optimize() -> bool:
    """On SQLite, give the query planner statistics (``ANALYZE`` the first time, within
    ``analysis_limit``; ``PRAGMA optimize`` after, which redoes only what is stale);
    whether it ran (PostgreSQL's autovacuum does this itself)."""
    if db.engine.dialect.name != "sqlite":
        return False
    with db.engine.connect() as connection:
        connection.execute(text("PRAGMA analysis_limit=1000"))
        analyzed = connection.execute(
            text("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'")
        ).first()
        connection.execute(text("PRAGMA optimize" if analyzed else "ANALYZE"))
        connection.commit()
    return True
