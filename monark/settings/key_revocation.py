"""Revoking an API key from the settings page: its writes still waiting are rejected too."""

from __future__ import annotations

from sqlalchemy import select

from monark.chat.decisions import Settlement, settle
from monark.chat.models import Conversation, ConversationKind, ToolCall, ToolCallStatus
from monark.core import keys
from monark.core.errors import Conflict
from monark.core.models import ApiKey
from monark.core.rbac import Principal
from monark.extensions import db

REVOKED_REASON = "The API key was revoked before anyone approved this, so it never ran."


def revoke_key(principal: Principal, key_id: int) -> ApiKey:
    """Revoke a key of the org, and reject its held writes with the reason (the agent reads
    it from the status), so no inbox keeps a request nobody can run."""
    key = keys.revoke_key(principal, key_id)
    waiting = db.session.scalars(
        select(ToolCall)
        .join(Conversation, Conversation.id == ToolCall.conversation_id)
        .where(
            Conversation.org_id == principal.org_id,
            Conversation.kind == ConversationKind.API,
            Conversation.api_key_id == key.id,
            ToolCall.status == ToolCallStatus.PROPOSED,
        )
        .order_by(ToolCall.id)
    ).all()
    for call in waiting:
        try:
            settle(principal, [Settlement(call, ToolCallStatus.REJECTED, REVOKED_REASON)])
        except Conflict:  # decided meanwhile: nothing of it waits any more
            db.session.rollback()
    db.session.refresh(key)
    return key
