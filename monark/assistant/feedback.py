"""What people think of the assistant's replies: a thumbs up or down on a reply, with an
optional reason, kept with the provider and model that wrote it.

Giving feedback shares that conversation with the org's moderators (holders of
``chat.moderate``), and the panel says so where the feedback is given; a moderator reads
only conversations that feedback points to, and each reading is audited.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint, func, select
from sqlalchemy.orm import Mapped, mapped_column

from monark.chat import store
from monark.chat.models import Conversation, Message, MessageRole
from monark.core.errors import NotFound, ValidationFailed
from monark.core.events import record_event
from monark.core.models import CreatedAt, IntPk, OrgId, UpdatedAt, User, UserRef
from monark.core.rbac import Principal
from monark.core.text import storable
from monark.core.uow import get_or_add
from monark.extensions import db

REASON_MAX = 1000  # characters of a reason
PAGE_SIZE = 50  # feedback a moderator's page lists
UNSHARED = "Its owner deleted that conversation: it is no longer shared."


class Rating(StrEnum):
    """A reply was good, or it was not."""

    UP = "up"
    DOWN = "down"


class ReplyFeedback(db.Model):
    """One person's verdict on one reply (given again, it replaces their last)."""

    __tablename__ = "reply_feedback"
    __table_args__ = (UniqueConstraint("message_id", "user_id"),)

    id: Mapped[IntPk]
    org_id: Mapped[OrgId] = mapped_column(index=True)
    message_id: Mapped[int] = mapped_column(
        ForeignKey("chat_messages.id", ondelete="CASCADE"), index=True
    )
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("chat_conversations.id", ondelete="CASCADE")
    )
    user_id: Mapped[UserRef]
    rating: Mapped[str] = mapped_column(String(8))
    reason: Mapped[str | None] = mapped_column(Text, default=None)
    provider: Mapped[str | None] = mapped_column(String(40), default=None)
    model: Mapped[str | None] = mapped_column(String(80), default=None)
    created_at: Mapped[CreatedAt]
    updated_at: Mapped[UpdatedAt]


def _field(name: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, [{"field": name, "message": message}])


def _rating(raw: str) -> Rating:
    try:
        return Rating(raw)
    except ValueError:
        raise _field("rating", "Choose up or down.") from None


def _reason(raw: str | None) -> str | None:
    text = storable(raw or "").strip()
    if len(text) > REASON_MAX:
        raise _field("reason", f"Keep the reason under {REASON_MAX} characters.")
    return text or None


def give(principal: Principal, message_id: int, rating: str, reason: str | None) -> ReplyFeedback:
    """Store this person's verdict on a reply in a conversation of their own."""
    chosen, why = _rating(rating), _reason(reason)
    message = db.session.scalar(
        select(Message).where(Message.id == message_id, Message.org_id == principal.org_id)
    )
    if message is None or message.role != MessageRole.ASSISTANT:
        raise NotFound("No such reply.")
    store.get_conversation(principal, message.conversation_id)  # theirs, or NotFound
    found = get_or_add(
        ReplyFeedback,
        {"org_id": principal.org_id, "message_id": message.id, "user_id": principal.user_id},
        conversation_id=message.conversation_id,
    )
    found.rating, found.reason = chosen.value, why
    found.provider, found.model = message.provider, message.model
    db.session.flush()
    record_event(
        principal,
        "chat.feedback.given",
        "message",
        message.id,
        {"conversation_id": message.conversation_id, "rating": chosen.value},
    )
    db.session.commit()
    return found


def ratings_of(principal: Principal, message_ids: Iterable[int]) -> dict[int, str]:
    """This person's rating of each of these replies that they rated (one query)."""
    ids = list(message_ids)
    if not ids or principal.user_id is None:
        return {}
    rows = db.session.execute(
        select(ReplyFeedback.message_id, ReplyFeedback.rating).where(
            ReplyFeedback.message_id.in_(ids), ReplyFeedback.user_id == principal.user_id
        )
    )
    return {message_id: rating for message_id, rating in rows}


def listed(principal: Principal, rating: str | None = None, page: int = 1):
    """The org's feedback, newest first, with who gave it and whether its conversation is
    still shared (not deleted by its owner): (feedback, name, shared) rows (moderators)."""
    principal.require("chat.moderate")
    stmt = (
        select(ReplyFeedback, User.name, ~Conversation.archived)
        .outerjoin(User, User.id == ReplyFeedback.user_id)
        .join(Conversation, Conversation.id == ReplyFeedback.conversation_id)
        .where(ReplyFeedback.org_id == principal.org_id)
        .order_by(ReplyFeedback.updated_at.desc(), ReplyFeedback.id.desc())
    )
    if rating:
        stmt = stmt.where(ReplyFeedback.rating == _rating(rating).value)
    offset = (max(1, page) - 1) * PAGE_SIZE
    return [tuple(row) for row in db.session.execute(stmt.offset(offset).limit(PAGE_SIZE + 1))]


def counts(principal: Principal) -> dict[str, int]:
    """How many replies of the org were rated up and down."""
    principal.require("chat.moderate")
    rows = db.session.execute(
        select(ReplyFeedback.rating, func.count())
        .where(ReplyFeedback.org_id == principal.org_id)
        .group_by(ReplyFeedback.rating)
    )
    return {Rating.UP.value: 0, Rating.DOWN.value: 0} | {r: n for r, n in rows}


def shared_conversation(
    principal: Principal, feedback_id: int
) -> tuple[ReplyFeedback, Conversation]:
    """The conversation one piece of feedback points to, for a moderator; the reading is
    audited. ``NotFound`` for feedback of another org, or none."""
    principal.require("chat.moderate")
    found = db.session.scalar(
        select(ReplyFeedback).where(
            ReplyFeedback.id == feedback_id, ReplyFeedback.org_id == principal.org_id
        )
    )
    conversation = db.session.get(Conversation, found.conversation_id) if found else None
    if found is None or conversation is None or conversation.org_id != principal.org_id:
        raise NotFound("No such feedback in this organization.")
    if conversation.archived:  # its owner deleted it: that ends the sharing
        raise NotFound(UNSHARED)
    record_event(
        principal,
        "chat.feedback.conversation_read",
        "conversation",
        conversation.id,
        {"conversation_id": conversation.id, "feedback_id": found.id},
    )
    db.session.commit()
    return found, conversation
