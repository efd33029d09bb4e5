"""allowances scoped to one target: chat_allowances.scope (a record tool's model)

Revision ID: 0014_allowance_scope
Revises: 0013_automation_owner
Create Date: 2026-12-08 10:00:00

An allowance of records_create or records_update stored before this covered every model;
it now covers one. Those still open end here (``revoked_at``), so nobody's earlier click
trusts more than a card now says: the next such call asks again. Allowances of other tools
stay as they were (tool-wide, ``scope`` NULL). A downgrade ends the scoped ones the same
way, since without the column they would widen to the whole tool.
"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0014_allowance_scope"
down_revision = "0013_automation_owner"
branch_labels = None
depends_on = None

AUTOINCREMENT = {"sqlite_autoincrement": True}
SCOPED_TOOLS = ("records_create", "records_update")  # the scoped tools at this revision

allowances = sa.table(
    "chat_allowances",
    sa.column("tool", sa.String),
    sa.column("scope", sa.String),
    sa.column("revoked_at", sa.DateTime(timezone=True)),
)


def _end(condition) -> None:
    op.execute(
        allowances.update()
        .where(allowances.c.revoked_at.is_(None), condition)
        .values(revoked_at=sa.func.current_timestamp())
    )


def upgrade():
    with op.batch_alter_table("chat_allowances", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.add_column(sa.Column("scope", sa.String(length=120), nullable=True))
    _end(allowances.c.tool.in_(SCOPED_TOOLS))


def downgrade():
    _end(allowances.c.scope.is_not(None))
    with op.batch_alter_table("chat_allowances", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.drop_column("scope")
