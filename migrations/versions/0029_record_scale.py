"""Records at scale: a data version per model, set afresh by every write to its records

Revision ID: 0029_record_scale
Revises: 0028_branches
Create Date: 2026-12-03 13:45:00

"""

import secrets

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0029_record_scale"
down_revision = "0028_branches"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("data_version", sa.BigInteger(), nullable=False, server_default="0"))
    # Each model a random version of its own (as the app gives a new one), never 0 twice.
    models = sa.table("models", sa.column("id", sa.Integer), sa.column("data_version", sa.BigInteger))
    connection = op.get_bind()
    for (model_id,) in connection.execute(sa.select(models.c.id)).all():
        connection.execute(
            models.update().where(models.c.id == model_id).values(data_version=secrets.randbits(63))
        )


def downgrade():
    with op.batch_alter_table("models") as batch:
        batch.drop_column("data_version")
