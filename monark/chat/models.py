"""Conversations, participants, messages and tool calls; everything scoped to an org."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from monark.core.enum_text import EnumText
from monark.core.models import utcnow
from monark.core.money import Money
from monark.extensions import db


class ConversationKind(StrEnum):
    AI = "ai"
    DIRECT = "direct"  # person to person: the schema has it, the app has no UI for it yet
    API = "api"  # an API key's held writes, a message and call each, for the Approvals inbox


class MessageRole(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    NOTE = "note"  # a line from the system in the thread (the step limit, say)
    # The model's summary of the turns before it: read instead of them from then on.
    SUMMARY = "summary"


class MessageStatus(StrEnum):
    STREAMING = "streaming"  # being written by a running turn
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"  # stopped, or broken off: the text is what came
    ERROR = "error"  # no reply came


class ToolCallStatus(StrEnum):
    PROPOSED = "PROPOSED"  # a write waiting for the user's decision (or a question, an answer)
    EXECUTING = "EXECUTING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"  # a proposal nobody decided within ``CHAT_APPROVAL_TTL``: nothing ran


PENDING_STATUSES = (ToolCallStatus.PROPOSED, ToolCallStatus.EXECUTING)


class CallEvent(StrEnum):
    """What happened to a tool call: its audit event is ``chat.tool_call.<this>``."""

    PROPOSED = "proposed"
    ALLOWED = "allowed"  # ran at once, under an allowance
    HELD = "held"  # an API key's write, waiting in the Approvals inbox
    EDITED = "edited"
    REDRAWN = "redrawn"  # its target changed since the card was drawn
    CONFIRMED = "confirmed"
    REJECTED = "rejected"
    ANSWERED = "answered"  # a question to the user, answered (its result is the answer)
    EXPIRED = "expired"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNDO_STARTED = "undo_started"
    UNDONE = "undone"

    @property
    def event_type(self) -> str:
        """The audit event's type."""
        return f"chat.tool_call.{self}"


class Conversation(db.Model):
    __tablename__ = "chat_conversations"
    __table_args__ = (
        Index("ix_chat_conversations_org_id_creator_id", "org_id", "creator_id"),
        # Each process renews its running turns by id every second.
        Index("ix_chat_conversations_turn_id", "turn_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    kind: Mapped[ConversationKind] = mapped_column(
        EnumText(ConversationKind, 10), default=ConversationKind.AI
    )
    title: Mapped[str] = mapped_column(String(200), default="")
    creator_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    archived: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_activity_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The turn running now, one at a time, under a lease it renews (``chat.turn.lease``).
    turn_id: Mapped[str | None] = mapped_column(String(32), default=None)
    turn_started_at: Mapped[datetime | None] = mapped_column(default=None)
    turn_lease_until: Mapped[datetime | None] = mapped_column(default=None)
    # Stop, asked on any instance: the turn sees it at its next renewal.
    turn_stop_requested: Mapped[bool] = mapped_column(default=False)
    # Tool results before this message reach the model as stubs (``chat.compaction``).
    context_stub_before: Mapped[int | None] = mapped_column(default=None)
    # The last message when it moved: replies after it measured the request as it is now.
    context_stub_moved_at: Mapped[int | None] = mapped_column(default=None)
    # ``ConversationKind.API``'s key: unique, so two first writes at once cannot make two.
    api_key_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_keys.id", ondelete="SET NULL"), default=None, unique=True
    )
    # The active branch's last message (None: never branched); no foreign key, as a cycle
    # of keys with messages' own would order nothing.
    head_id: Mapped[int | None] = mapped_column(default=None)

    participants: Mapped[list[Participant]] = relationship(
        back_populates="conversation", cascade="all, delete-orphan"
    )


class Participant(db.Model):
    """A user or the agent taking part in a conversation."""

    __tablename__ = "chat_participants"

    id: Mapped[int] = mapped_column(primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("chat_conversations.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(10))  # "user" | "agent"
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    joined_at: Mapped[datetime] = mapped_column(default=utcnow)

    conversation: Mapped[Conversation] = relationship(back_populates="participants")


class Message(db.Model):
    __tablename__ = "chat_messages"
    __table_args__ = (UniqueConstraint("conversation_id", "seq"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("chat_conversations.id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column()
    # The message before it on its branch, stored from the conversation's first branch on.
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("chat_messages.id", ondelete="SET NULL"), default=None
    )
    author_kind: Mapped[str] = mapped_column(String(10))  # "user" | "agent" | "system"
    author_user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    role: Mapped[MessageRole] = mapped_column(EnumText(MessageRole, 12))
    text: Mapped[str] = mapped_column(Text, default="")
    # What the model saw besides the text: for user messages the page-context sentence.
    content: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    status: Mapped[MessageStatus] = mapped_column(
        EnumText(MessageStatus, 12), default=MessageStatus.COMPLETE
    )
    error: Mapped[str | None] = mapped_column(Text, default=None)
    # Which provider and model wrote an assistant message.
    provider: Mapped[str | None] = mapped_column(String(40), default=None)
    model: Mapped[str | None] = mapped_column(String(80), default=None)
    stop_reason: Mapped[str | None] = mapped_column(String(40), default=None)
    input_tokens: Mapped[int] = mapped_column(default=0)
    output_tokens: Mapped[int] = mapped_column(default=0)
    cache_read_tokens: Mapped[int] = mapped_column(default=0)
    cache_creation_tokens: Mapped[int] = mapped_column(default=0)
    # What the reply cost, in US dollars (None: no price, or no usage reported).
    cost: Mapped[Decimal | None] = mapped_column(Money(), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    tool_calls: Mapped[list[ToolCall]] = relationship(
        back_populates="message", order_by="ToolCall.position", cascade="all, delete-orphan"
    )


# How long a stored call's tool name and provider call id may be (``chat.loop`` cuts).
CALL_NAME_MAX = 120


class ToolCall(db.Model):
    __tablename__ = "chat_tool_calls"
    __table_args__ = (
        Index("ix_chat_tool_calls_conversation_id_status", "conversation_id", "status"),
        # The Approvals inbox: what waits for one member, per org.
        Index("ix_chat_tool_calls_org_id_approver_id_status", "org_id", "approver_id", "status"),
        # The usage page: an org's calls since a day, by tool and status (the index alone).
        Index("ix_chat_tool_calls_org_id_created_at", "org_id", "created_at", "name", "status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("chat_conversations.id", ondelete="CASCADE")
    )
    message_id: Mapped[int] = mapped_column(
        ForeignKey("chat_messages.id", ondelete="CASCADE"), index=True
    )
    position: Mapped[int] = mapped_column(default=0)
    provider_call_id: Mapped[str] = mapped_column(String(CALL_NAME_MAX))
    # What the provider asked to get back with the call (Gemini's thought signature).
    provider_meta: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    name: Mapped[str] = mapped_column(String(CALL_NAME_MAX))
    input: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    mutates: Mapped[bool] = mapped_column()
    status: Mapped[ToolCallStatus] = mapped_column(EnumText(ToolCallStatus, 12))
    # Rejected because the user sent a new message instead of deciding (not by a click).
    skipped: Mapped[bool] = mapped_column(default=False)
    result: Mapped[Any | None] = mapped_column(JSON, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    decided_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    decided_at: Mapped[datetime | None] = mapped_column(default=None)
    reject_reason: Mapped[str | None] = mapped_column(Text, default=None)
    # What the host showed the user at proposal: a headline and, for updates, before → after.
    preview: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    duration_ms: Mapped[int | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Edited before a decision: the model's own arguments (``input`` is what runs), by whom.
    original_input: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    edited_by_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), default=None
    )
    edited_at: Mapped[datetime | None] = mapped_column(default=None)
    allowed: Mapped[bool] = mapped_column(default=False)  # ran at once, under an allowance
    # What undoing a done write takes; an undo is a call of its own, one per call undone.
    undo: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    undo_of_id: Mapped[int | None] = mapped_column(
        ForeignKey("chat_tool_calls.id", ondelete="SET NULL"), default=None, unique=True
    )
    # Handed over: the member asked to decide (the Approvals inbox), who asked, and when.
    approver_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), default=None
    )
    handed_by_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), default=None
    )
    handed_at: Mapped[datetime | None] = mapped_column(default=None)
    # A key's held write asked again after its approved run was cut off (``api.cut_off``).
    retry_of_id: Mapped[int | None] = mapped_column(
        ForeignKey("chat_tool_calls.id", ondelete="SET NULL"), default=None, unique=True
    )

    message: Mapped[Message] = relationship(back_populates="tool_calls")
