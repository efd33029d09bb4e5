"""A write that is no model's step: the one call of a message of its own.

Held writes of an API key (``api.held``) and undos (``approvals.undo``) are stored this way,
so the thread, the inbox and ``decide()`` treat them as any other proposed or running write.
"""

from __future__ import annotations

from typing import Any

from monark.chat.models import Message, ToolCall
from monark.extensions import db


def standalone_write(message: Message, provider_call_id: str, **fields: Any) -> ToolCall:
    """The write ``fields`` describe (name, input, status, ...) as ``message``'s only call,
    added to the session (the caller flushes: an undo's flush may meet its unique key)."""
    call = ToolCall(
        org_id=message.org_id,
        conversation_id=message.conversation_id,
        message_id=message.id,
        position=0,
        provider_call_id=provider_call_id,
        mutates=True,
        **fields,
    )
    db.session.add(call)
    return call
