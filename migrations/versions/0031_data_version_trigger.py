"""Records: each model's data_version set by triggers on records, whoever writes them

Revision ID: 0031_data_version_trigger
Revises: 0030_budget
Create Date: 2026-12-03 16:40:00

"""

from alembic import op


# revision identifiers, used by Alembic.
revision = "0031_data_version_trigger"
down_revision = "0030_budget"
branch_labels = None
depends_on = None

# The statements of ``monark.records.models`` (SQLITE_DATA_VERSION_DDL,
# POSTGRES_DATA_VERSION_DDL), as they were at this revision.
_SQLITE_NEW_VERSION = "random() & 9223372036854775807"
SQLITE_DDL = (
    "CREATE TRIGGER records_data_version_ai AFTER INSERT ON records BEGIN"
    f" UPDATE models SET data_version = {_SQLITE_NEW_VERSION} WHERE id = new.model_id; END",
    "CREATE TRIGGER records_data_version_au AFTER UPDATE ON records BEGIN"
    f" UPDATE models SET data_version = {_SQLITE_NEW_VERSION}"
    " WHERE id IN (old.model_id, new.model_id); END",
    "CREATE TRIGGER records_data_version_ad AFTER DELETE ON records BEGIN"
    f" UPDATE models SET data_version = {_SQLITE_NEW_VERSION} WHERE id = old.model_id; END",
)
_PG_NEW_VERSION = (
    "(('x' || translate(gen_random_uuid()::text, '-', ''))::bit(64)::bigint"
    " & 9223372036854775807)"
)
POSTGRES_DDL = (
    "CREATE OR REPLACE FUNCTION records_data_version() RETURNS trigger LANGUAGE plpgsql AS $$"
    " DECLARE ids integer[];"
    " BEGIN"
    " IF TG_OP = 'INSERT' THEN"
    " SELECT array_agg(DISTINCT model_id) INTO ids FROM new_rows;"
    " ELSIF TG_OP = 'DELETE' THEN"
    " SELECT array_agg(DISTINCT model_id) INTO ids FROM old_rows;"
    " ELSIF TG_OP = 'UPDATE' THEN"
    " SELECT array_agg(model_id) INTO ids FROM"
    " (SELECT model_id FROM old_rows UNION SELECT model_id FROM new_rows) AS touched;"
    " ELSE"
    " SELECT array_agg(id) INTO ids FROM models;"
    " END IF;"
    " IF cardinality(ids) > 1 THEN"
    " PERFORM 1 FROM models WHERE id = ANY(ids) ORDER BY id FOR UPDATE;"
    " END IF;"
    f" UPDATE models SET data_version = {_PG_NEW_VERSION} WHERE id = ANY(ids);"
    " RETURN NULL;"
    " END $$",
    "CREATE TRIGGER records_data_version_ai AFTER INSERT ON records"
    " REFERENCING NEW TABLE AS new_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION records_data_version()",
    "CREATE TRIGGER records_data_version_au AFTER UPDATE ON records"
    " REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION records_data_version()",
    "CREATE TRIGGER records_data_version_ad AFTER DELETE ON records"
    " REFERENCING OLD TABLE AS old_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION records_data_version()",
    "CREATE TRIGGER records_data_version_at AFTER TRUNCATE ON records"
    " FOR EACH STATEMENT EXECUTE FUNCTION records_data_version()",
)
_NAMES = ("ai", "au", "ad", "at")


def upgrade():
    conn = op.get_bind()
    for sql in SQLITE_DDL if conn.dialect.name == "sqlite" else POSTGRES_DDL:
        op.execute(sql)


def downgrade():
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        for name in _NAMES[:3]:
            op.execute(f"DROP TRIGGER IF EXISTS records_data_version_{name}")
    else:
        for name in _NAMES:
            op.execute(f"DROP TRIGGER IF EXISTS records_data_version_{name} ON records")
        op.execute("DROP FUNCTION IF EXISTS records_data_version()")
