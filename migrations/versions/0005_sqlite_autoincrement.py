"""SQLite: ids are never reused (AUTOINCREMENT on every table)

Revision ID: 0005_sqlite_autoincrement
Revises: 0004_invites
Create Date: 2026-11-30 08:00:00

Without AUTOINCREMENT, SQLite gives a new row the id of the newest deleted one, so audit
events, chat cards and links naming a deleted record would point at its successor. Each
table is rebuilt in batch mode (copy, drop, rename) with ``sqlite_autoincrement``; the copy
seeds ``sqlite_sequence`` with each table's highest id. PostgreSQL is left as it is: its
sequences never hand out an id twice.
"""

from alembic import op

revision = "0005_sqlite_autoincrement"
down_revision = "0004_invites"
branch_labels = None
depends_on = None

# Parents before children, so each copy finds the rows its foreign keys name.
TABLES = (
    "orgs",
    "users",
    "api_keys",
    "automations",
    "chat_conversations",
    "events",
    "invites",
    "memberships",
    "models",
    "wiki_pages",
    "automation_runs",
    "chat_messages",
    "chat_participants",
    "model_fields",
    "records",
    "chat_tool_calls",
)


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass


def upgrade():
    _rebuild(True)


def downgrade():
    _rebuild(False)
