"""API-key holds: one conversation per key; a held write cut off while it ran asked again

Revision ID: 0015_api_holds
Revises: 0014_allowance_scope
Create Date: 2026-12-08 10:00:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0015_api_holds"
down_revision = "0014_allowance_scope"
branch_labels = None
depends_on = None

AUTOINCREMENT = {"sqlite_autoincrement": True}
# The tables whose rows belong to a conversation (moved to the one a key keeps).
OWNED = ("chat_messages", "chat_tool_calls", "chat_participants", "chat_allowances")


def _repoint_events(bind, other: int, keep: int) -> None:
    """The events of a conversation merged away name the one kept instead: the column,
    a conversation's own events (their subject), and the ``conversation_id`` of the
    payloads of its calls' events (read before the calls move)."""
    events = sa.text(
        "SELECT id, payload FROM events WHERE conversation_id = :other "
        "OR (subject_type = 'conversation' AND subject_id = :other) "
        "OR (subject_type = 'tool_call' AND subject_id IN "
        "(SELECT id FROM chat_tool_calls WHERE conversation_id = :other))"
    ).columns(sa.column("id", sa.Integer()), sa.column("payload", sa.JSON()))
    for event_id, payload in bind.execute(events, {"other": other}).all():
        if isinstance(payload, dict) and payload.get("conversation_id") == other:
            bind.execute(
                sa.text("UPDATE events SET payload = :payload WHERE id = :id").bindparams(
                    sa.bindparam("payload", type_=sa.JSON())
                ),
                {"payload": {**payload, "conversation_id": keep}, "id": event_id},
            )
    bind.execute(
        sa.text("UPDATE events SET conversation_id = :keep WHERE conversation_id = :other"),
        {"keep": keep, "other": other},
    )
    bind.execute(
        sa.text(
            "UPDATE events SET subject_id = :keep "
            "WHERE subject_type = 'conversation' AND subject_id = :other"
        ),
        {"keep": keep, "other": other},
    )


def _merge_duplicate_key_conversations() -> None:
    """Two first writes at once could make two conversations for one key: keep its
    oldest, and move the others' messages (numbered after its own), calls and events
    into it."""
    bind = op.get_bind()
    duplicates = bind.execute(
        sa.text(
            "SELECT api_key_id, min(id) FROM chat_conversations WHERE api_key_id IS NOT NULL "
            "GROUP BY api_key_id HAVING count(*) > 1"
        )
    ).all()
    for key_id, keep in duplicates:
        others = bind.execute(
            sa.text(
                "SELECT id FROM chat_conversations WHERE api_key_id = :k AND id <> :keep "
                "ORDER BY id"
            ),
            {"k": key_id, "keep": keep},
        ).scalars()
        for other in list(others):
            _repoint_events(bind, other, keep)
            offset = bind.execute(
                sa.text(
                    "SELECT coalesce(max(seq), 0) FROM chat_messages WHERE conversation_id = :c"
                ),
                {"c": keep},
            ).scalar()
            bind.execute(
                sa.text(
                    "UPDATE chat_messages SET seq = seq + :offset, conversation_id = :keep "
                    "WHERE conversation_id = :other"
                ),
                {"offset": offset, "keep": keep, "other": other},
            )
            for table in OWNED[1:]:
                bind.execute(
                    sa.text(
                        f"UPDATE {table} SET conversation_id = :keep WHERE conversation_id = :other"
                    ),
                    {"keep": keep, "other": other},
                )
            bind.execute(sa.text("DELETE FROM chat_conversations WHERE id = :c"), {"c": other})


def upgrade():
    _merge_duplicate_key_conversations()
    with op.batch_alter_table("chat_conversations", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.create_unique_constraint("uq_chat_conversations_api_key_id", ["api_key_id"])
    with op.batch_alter_table("chat_tool_calls", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.add_column(sa.Column("retry_of_id", sa.Integer(), nullable=True))
        b.create_unique_constraint("uq_chat_tool_calls_retry_of_id", ["retry_of_id"])
        b.create_foreign_key(
            "fk_chat_tool_calls_retry_of_id_chat_tool_calls",
            "chat_tool_calls",
            ["retry_of_id"],
            ["id"],
            ondelete="SET NULL",
        )


def downgrade():
    with op.batch_alter_table("chat_tool_calls", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.drop_constraint("fk_chat_tool_calls_retry_of_id_chat_tool_calls", type_="foreignkey")
        b.drop_constraint("uq_chat_tool_calls_retry_of_id", type_="unique")
        b.drop_column("retry_of_id")
    with op.batch_alter_table("chat_conversations", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.drop_constraint("uq_chat_conversations_api_key_id", type_="unique")
