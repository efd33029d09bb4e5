"""The key's conversation of held writes: one per key, changed by one write at a time.

Writes of a key marked "writes need approval" are stored in its conversation of kind
``API`` (see ``monark.api.key_holds``). Two of them may arrive at once, on two instances:
each takes the key's row lock first, so the second waits for the first, then finds the
conversation it made (``api_key_id`` is unique: a second one cannot exist) and numbers its
message after the first's.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select

from monark.approvals.standalone import standalone_write
from monark.chat import store
from monark.chat.models import (
    CallEvent,
    Conversation,
    ConversationKind,
    MessageRole,
    ToolCall,
    ToolCallStatus,
)
from monark.core.models import ApiKey
from monark.core.rbac import Principal
from monark.core.uow import for_update, get_or_add
from monark.extensions import db


def lock_key(key_id: int) -> ApiKey:
    """The key's row, locked until commit: one change at a time to the key's conversation,
    on any instance. Call it first in a transaction (SQLite takes its write lock here, before
    any read, so it never writes from a snapshot another writer has moved past)."""
    return db.session.scalars(for_update(select(ApiKey).where(ApiKey.id == key_id))).one()


def key_conversation(principal: Principal, key: ApiKey) -> Conversation:
    """The key's conversation of held writes, made on its first one (under ``lock_key``)."""
    conversation = get_or_add(
        Conversation,
        {"org_id": principal.org_id, "kind": ConversationKind.API, "api_key_id": key.id},
        title=key.name,
        creator_id=key.created_by_id,
    )
    db.session.flush()  # a new one's id, for its first message
    return conversation


def store_held(
    principal: Principal, conversation: Conversation, text: str, **fields: Any
) -> ToolCall:
    """One held write (under ``lock_key``): its message, its PROPOSED call of ``fields``
    (name, input, preview, ...) and the ``held`` event."""
    message = store.add_message(
        conversation, principal, author_kind="agent", role=MessageRole.ASSISTANT, text=text
    )
    call = standalone_write(
        message, f"api_{uuid.uuid4().hex[:24]}", status=ToolCallStatus.PROPOSED, **fields
    )
    db.session.flush()
    more = {"retry_of_id": call.retry_of_id} if call.retry_of_id else None
    store.tool_call_event(principal, call, CallEvent.HELD, more)
    return call
