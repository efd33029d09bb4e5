"""A person's own calls and messages, as the decision paths read them: only those in one of
their live panel conversations (a deleted one takes no decisions; a key's held writes are
the inbox's alone), one at a time or batched in one read.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, select

from monark.chat.models import Conversation, ConversationKind, Message, ToolCall, ToolCallStatus
from monark.core.errors import NotFound
from monark.core.rbac import Principal
from monark.extensions import db


def _of_own(principal: Principal, row: type[Any]) -> Select[Any]:
    """Rows of ``row`` (a message or a tool call) in one of the principal's own live
    conversations of the panel (a deleted one takes no decisions; a key's held writes are
    the inbox's alone)."""
    return (
        select(row)
        .join(Conversation, Conversation.id == row.conversation_id)
        .where(
            row.org_id == principal.org_id,
            Conversation.creator_id == principal.user_id,
            Conversation.archived.is_(False),
            Conversation.kind == ConversationKind.AI,
        )
    )


def get_message(principal: Principal, message_id: int) -> Message:
    """A message of one of the principal's own conversations; ``NotFound`` otherwise."""
    message = db.session.scalar(_of_own(principal, Message).where(Message.id == message_id))
    if message is None:
        raise NotFound("No such message.")
    return message


def settled_any(conversation_id: int, call_ids: list[int]) -> bool:
    """Whether any of these calls of the conversation is no longer PROPOSED."""
    return (
        db.session.scalar(
            select(ToolCall.id)
            .where(
                ToolCall.conversation_id == conversation_id,
                ToolCall.id.in_(call_ids),
                ToolCall.status != ToolCallStatus.PROPOSED,
            )
            .limit(1)
        )
        is not None
    )


def proposed_calls_of(message_id: int) -> list[ToolCall]:
    """The writes of one message still waiting for a decision, in the model's order."""
    return list(
        db.session.scalars(
            select(ToolCall)
            .where(ToolCall.message_id == message_id, ToolCall.status == ToolCallStatus.PROPOSED)
            .order_by(ToolCall.position, ToolCall.id)
        )
    )


def get_tool_call(principal: Principal, tool_call_id: int) -> ToolCall:
    """A tool call in one of the principal's own conversations; ``NotFound`` otherwise."""
    call = db.session.scalar(_of_own(principal, ToolCall).where(ToolCall.id == tool_call_id))
    if call is None:
        raise NotFound("No such tool call.")
    return call


def tool_calls_of(principal: Principal, tool_call_ids: list[int]) -> list[ToolCall]:
    """Those of these calls in the principal's own conversations, in one read, in the
    order given."""
    stmt = _of_own(principal, ToolCall).where(ToolCall.id.in_(tool_call_ids))
    found = {c.id: c for c in db.session.scalars(stmt)}
    return [found[i] for i in tool_call_ids if i in found]
