"""search: one full-text index of records, wiki pages, automations and conversations

Revision ID: 0024_search
Revises: 0023_time_zones
Create Date: 2026-12-03 11:00:00

"""

import json

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0024_search"
# Written beside 0021–0023: the merge points this at the last of them.
down_revision = "0023_time_zones"
branch_labels = None
depends_on = None

# The full-text part, as monark.search.index made it when this was written (spelled out so
# this migration keeps meaning what it meant when the app's code changes).
SQLITE_DDL = (
    "CREATE VIRTUAL TABLE search_fts USING fts5(title, body, content='search_documents',"
    " content_rowid='id', tokenize='porter unicode61 remove_diacritics 2', prefix='2 3')",
    "CREATE TRIGGER search_documents_ai AFTER INSERT ON search_documents BEGIN"
    " INSERT INTO search_fts(rowid, title, body) VALUES (new.id, new.title, new.body); END",
    "CREATE TRIGGER search_documents_ad AFTER DELETE ON search_documents BEGIN"
    " INSERT INTO search_fts(search_fts, rowid, title, body)"
    " VALUES ('delete', old.id, old.title, old.body); END",
    "CREATE TRIGGER search_documents_au AFTER UPDATE ON search_documents BEGIN"
    " INSERT INTO search_fts(search_fts, rowid, title, body)"
    " VALUES ('delete', old.id, old.title, old.body);"
    " INSERT INTO search_fts(rowid, title, body) VALUES (new.id, new.title, new.body); END",
)
POSTGRES_DDL = (
    "ALTER TABLE search_documents ADD COLUMN search_vector tsvector GENERATED ALWAYS AS"
    " (setweight(to_tsvector('english', title), 'A')"
    " || setweight(to_tsvector('english', body), 'B')) STORED",
    "CREATE INDEX ix_search_documents_search_vector ON search_documents"
    " USING GIN (search_vector)",
)
# The backfill, as monark.search.index.REBUILD_SQL (automations below, from their graphs).
BACKFILL = (
    "INSERT INTO search_documents (org_id, kind, object_id, model_id, private_to, title, body)"
    " SELECT org_id, 'record', id, model_id,"
    " CASE WHEN visibility = 'private' THEN COALESCE(creator_id, 0) END,"
    " substr(title, 1, 300), substr(search_text, 1, 100000) FROM records",
    "INSERT INTO search_documents (org_id, kind, object_id, title, body)"
    " SELECT org_id, 'wiki', id, substr(title, 1, 300), substr(body, 1, 100000)"
    " FROM wiki_pages WHERE archived = :no",
    "INSERT INTO search_documents (org_id, kind, object_id, parent_id, owner_id, title, body)"
    " SELECT org_id, 'conversation', id, id, creator_id, substr(title, 1, 300), ''"
    " FROM chat_conversations WHERE kind = 'ai' AND archived = :no",
    "INSERT INTO search_documents (org_id, kind, object_id, parent_id, owner_id, title, body)"
    " SELECT m.org_id, 'message', m.id, m.conversation_id, c.creator_id, '',"
    " substr(m.text, 1, 100000) FROM chat_messages m"
    " JOIN chat_conversations c ON c.id = m.conversation_id"
    " WHERE c.kind = 'ai' AND c.archived = :no AND m.role IN ('user', 'assistant')"
    " AND m.text <> ''",
)


def _automation_words(trigger_type, trigger_model, graph):
    # As monark.search.index.automation_words: the trigger and the kinds of the steps.
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    kinds = [str(n.get("type", "")) for n in nodes or [] if isinstance(n, dict)]
    words = [trigger_type or "", trigger_model or "", *kinds]
    return " ".join(w.replace(".", " ").replace("_", " ") for w in words if w)


def upgrade():
    table = op.create_table(
        "search_documents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("org_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=12), nullable=False),
        sa.Column("object_id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=True),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("private_to", sa.Integer(), nullable=True),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("title", sa.String(length=300), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["models.id"],
            name=op.f("fk_search_documents_model_id_models"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["orgs.id"], name=op.f("fk_search_documents_org_id_orgs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_search_documents")),
        sa.UniqueConstraint("kind", "object_id", name=op.f("uq_search_documents_kind")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_search_documents_org_id_kind", "search_documents", ["org_id", "kind"], unique=False
    )
    conn = op.get_bind()
    for sql in SQLITE_DDL if conn.dialect.name == "sqlite" else POSTGRES_DDL:
        op.execute(sql)
    for sql in BACKFILL:
        conn.execute(sa.text(sql), {"no": False})
    automations = sa.table(
        "automations",
        sa.column("id", sa.Integer),
        sa.column("org_id", sa.Integer),
        sa.column("name", sa.String),
        sa.column("trigger_type", sa.String),
        sa.column("trigger_model", sa.String),
        sa.column("graph", sa.Text),
    )
    rows = []
    for aid, org_id, name, trigger_type, trigger_model, raw in conn.execute(
        sa.select(
            automations.c.id,
            automations.c.org_id,
            automations.c.name,
            automations.c.trigger_type,
            automations.c.trigger_model,
            automations.c.graph,
        )
    ):
        graph = json.loads(raw) if isinstance(raw, str) else raw
        rows.append(
            {
                "org_id": org_id,
                "kind": "automation",
                "object_id": aid,
                "title": (name or "")[:300],
                "body": _automation_words(trigger_type, trigger_model, graph),
            }
        )
    if rows:
        conn.execute(table.insert(), rows)


def downgrade():
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS search_fts")  # its triggers go with their table
    op.drop_index("ix_search_documents_org_id_kind", table_name="search_documents")
    op.drop_table("search_documents")
