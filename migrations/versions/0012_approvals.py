"""approvals that scale: edited arguments, allowances, undo, hand-over, API-key approvals

Revision ID: 0012_approvals
Revises: 0011_conversation_summary
Create Date: 2026-12-01 22:00:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0012_approvals"
down_revision = "0011_conversation_summary"
branch_labels = None
depends_on = None

AUTOINCREMENT = {"sqlite_autoincrement": True}


def upgrade():
    with op.batch_alter_table("chat_tool_calls", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.add_column(sa.Column("original_input", sa.JSON(), nullable=True))
        b.add_column(sa.Column("edited_by_id", sa.Integer(), nullable=True))
        b.add_column(sa.Column("edited_at", sa.DateTime(timezone=True), nullable=True))
        b.add_column(sa.Column("allowed", sa.Boolean(), nullable=False, server_default=sa.false()))
        b.add_column(sa.Column("undo", sa.JSON(), nullable=True))
        b.add_column(sa.Column("undo_of_id", sa.Integer(), nullable=True))
        b.add_column(sa.Column("approver_id", sa.Integer(), nullable=True))
        b.add_column(sa.Column("handed_by_id", sa.Integer(), nullable=True))
        b.add_column(sa.Column("handed_at", sa.DateTime(timezone=True), nullable=True))
        b.create_unique_constraint("uq_chat_tool_calls_undo_of_id", ["undo_of_id"])
        b.create_foreign_key(
            "fk_chat_tool_calls_edited_by_id_users",
            "users",
            ["edited_by_id"],
            ["id"],
            ondelete="SET NULL",
        )
        b.create_foreign_key(
            "fk_chat_tool_calls_undo_of_id_chat_tool_calls",
            "chat_tool_calls",
            ["undo_of_id"],
            ["id"],
            ondelete="SET NULL",
        )
        b.create_foreign_key(
            "fk_chat_tool_calls_approver_id_users",
            "users",
            ["approver_id"],
            ["id"],
            ondelete="SET NULL",
        )
        b.create_foreign_key(
            "fk_chat_tool_calls_handed_by_id_users",
            "users",
            ["handed_by_id"],
            ["id"],
            ondelete="SET NULL",
        )
        b.create_index(
            "ix_chat_tool_calls_org_id_approver_id_status", ["org_id", "approver_id", "status"]
        )
    with op.batch_alter_table("chat_conversations", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.add_column(sa.Column("api_key_id", sa.Integer(), nullable=True))
        b.create_foreign_key(
            "fk_chat_conversations_api_key_id_api_keys",
            "api_keys",
            ["api_key_id"],
            ["id"],
            ondelete="SET NULL",
        )
    op.create_table(
        "chat_allowances",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("org_id", sa.Integer(), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(length=120), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["conversation_id"], ["chat_conversations.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_chat_allowances_conversation_id_tool", "chat_allowances", ["conversation_id", "tool"]
    )
    with op.batch_alter_table("orgs", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.add_column(
            sa.Column(
                "chat_allowances_enabled", sa.Boolean(), nullable=False, server_default=sa.true()
            )
        )
        b.add_column(
            sa.Column("chat_always_confirm", sa.JSON(), nullable=False, server_default="[]")
        )
        b.add_column(sa.Column("chat_four_eyes", sa.JSON(), nullable=False, server_default="[]"))
    # Keys made before this keep running their writes; new keys are made with it on.
    with op.batch_alter_table("api_keys", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.add_column(
            sa.Column(
                "writes_need_approval", sa.Boolean(), nullable=False, server_default=sa.false()
            )
        )


def downgrade():
    with op.batch_alter_table("api_keys", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.drop_column("writes_need_approval")
    with op.batch_alter_table("orgs", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.drop_column("chat_four_eyes")
        b.drop_column("chat_always_confirm")
        b.drop_column("chat_allowances_enabled")
    op.drop_index("ix_chat_allowances_conversation_id_tool", table_name="chat_allowances")
    op.drop_table("chat_allowances")
    with op.batch_alter_table("chat_conversations", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.drop_constraint("fk_chat_conversations_api_key_id_api_keys", type_="foreignkey")
        b.drop_column("api_key_id")
    with op.batch_alter_table("chat_tool_calls", schema=None, table_kwargs=AUTOINCREMENT) as b:
        b.drop_index("ix_chat_tool_calls_org_id_approver_id_status")
        b.drop_constraint("fk_chat_tool_calls_handed_by_id_users", type_="foreignkey")
        b.drop_constraint("fk_chat_tool_calls_approver_id_users", type_="foreignkey")
        b.drop_constraint("fk_chat_tool_calls_undo_of_id_chat_tool_calls", type_="foreignkey")
        b.drop_constraint("fk_chat_tool_calls_edited_by_id_users", type_="foreignkey")
        b.drop_constraint("uq_chat_tool_calls_undo_of_id", type_="unique")
        for column in (
            "handed_at",
            "handed_by_id",
            "approver_id",
            "undo_of_id",
            "undo",
            "allowed",
            "edited_at",
            "edited_by_id",
            "original_input",
        ):
            b.drop_column(column)
