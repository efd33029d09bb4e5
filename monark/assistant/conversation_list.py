"""The panel's list of a person's conversations: listed (most recent first), renamed,
archived. Which conversation is a person's own, and how one is made, is chat's
(``chat.store``)."""

from __future__ import annotations

from sqlalchemy import select

from monark.chat.models import Conversation, ConversationKind
from monark.chat.store import get_conversation
from monark.core.errors import ValidationFailed
from monark.core.events import record_event
from monark.core.rbac import Principal
from monark.extensions import db


def list_conversations(principal: Principal, limit: int = 50) -> list[Conversation]:
    """The principal's conversations, most recent activity first."""
    stmt = (
        select(Conversation)
        .where(
            Conversation.org_id == principal.org_id,
            Conversation.creator_id == principal.user_id,
            Conversation.archived.is_(False),
            Conversation.kind == ConversationKind.AI,
        )
        .order_by(Conversation.last_activity_at.desc(), Conversation.id.desc())
        .limit(limit)
    )
    return list(db.session.scalars(stmt))


def rename_conversation(principal: Principal, conversation_id: int, title: str) -> Conversation:
    """Give a conversation another title."""
    conversation = get_conversation(principal, conversation_id)
    title = " ".join((title or "").split())
    if not title or len(title) > 200:
        raise ValidationFailed(
            "Invalid title.", [{"field": "title", "message": "Give 1-200 characters."}]
        )
    conversation.title = title
    record_event(
        principal,
        "chat.conversation.renamed",
        "conversation",
        conversation.id,
        {"conversation_id": conversation.id},
    )
    db.session.commit()
    return conversation


def archive_conversation(principal: Principal, conversation_id: int) -> None:
    """Remove a conversation from the user's list; its rows stay for the audit trail."""
    conversation = get_conversation(principal, conversation_id)
    conversation.archived = True
    record_event(
        principal,
        "chat.conversation.archived",
        "conversation",
        conversation.id,
        {"conversation_id": conversation.id},
    )
    db.session.commit()
