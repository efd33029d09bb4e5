"""Upkeep of held API writes, as a periodic job: a confirmed run cut off by a dead process
is settled and asked again (``cut_off.settle``) without waiting for someone to read it."""

from __future__ import annotations

from sqlalchemy import select

from monark.api import cut_off
from monark.chat.models import Conversation, ConversationKind, ToolCall, ToolCallStatus
from monark.chat.turn import lease
from monark.core import jobs
from monark.extensions import db


@jobs.periodic("upkeep.settle_held_writes")
def settle_held_writes() -> int:
    """Settle the held writes cut off while they ran of every org that may have some
    (``cut_off.settle`` tells which for sure); how many orgs it looked at."""
    running = ToolCall.status == ToolCallStatus.EXECUTING
    interrupted = (ToolCall.status == ToolCallStatus.FAILED) & (
        ToolCall.error == lease.INTERRUPTED_CALL
    )
    orgs = db.session.scalars(
        select(Conversation.org_id)
        .join(ToolCall, ToolCall.conversation_id == Conversation.id)
        .where(Conversation.kind == ConversationKind.API, running | interrupted)
        .distinct()
    ).all()
    db.session.commit()
    for org_id in orgs:
        cut_off.settle(org_id)
    return len(orgs)
