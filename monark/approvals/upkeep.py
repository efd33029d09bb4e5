"""Upkeep of what waits on the assistant, as periodic jobs: proposals past their time
expire, turns whose process died are settled, idle progress logs are dropped.

Each is what the next request would do anyway (``expiry.expire_overdue`` on a decision, the next
claim settling a dead turn), done even when nobody opens the conversation again.
"""

from __future__ import annotations

from flask import current_app
from sqlalchemy import select

from monark.approvals import expiry
from monark.chat.models import Conversation, ConversationKind, ToolCall, ToolCallStatus
from monark.chat.turn import lease, progress
from monark.core import jobs
from monark.core.errors import Conflict
from monark.core.models import utcnow
from monark.core.rbac import Principal
from monark.extensions import db

BATCH = 500


def _expirer(conversation: Conversation) -> Principal:
    """Who an expiry's event names: the conversation's member (a key's, for its holds)."""
    if conversation.kind == ConversationKind.API and conversation.api_key_id is not None:
        return Principal.for_api_key(conversation.api_key_id, conversation.org_id, "member")
    if conversation.creator_id is not None:
        return Principal.for_user(conversation.creator_id, conversation.org_id, "member")
    # Its member left: the event names the assistant of nobody (no user id).
    return Principal(conversation.org_id, "member", "assistant", 0)


@jobs.periodic("upkeep.expire_proposals")
def expire_proposals() -> int:
    """Expire every proposal past ``CHAT_APPROVAL_TTL`` (each once, with its event); how
    many."""
    ids = db.session.scalars(
        select(ToolCall.conversation_id)
        .where(
            ToolCall.status == ToolCallStatus.PROPOSED,
            ToolCall.created_at < expiry.cutoff(),
        )
        .distinct()
        .limit(BATCH)
    ).all()
    expired = 0
    for conversation_id in ids:
        conversation = db.session.get(Conversation, conversation_id)
        if conversation is not None:
            expired += expiry.expire_overdue(_expirer(conversation), conversation_id)
    db.session.commit()
    return expired


@jobs.periodic("upkeep.settle_turns")
def settle_turns() -> int:
    """Settle the conversations whose turn's lease ran out (its process died): its reply
    kept as incomplete, a call it ran failed as interrupted; how many. Held API writes are
    asked again by ``api.upkeep``."""
    ids = db.session.scalars(
        select(Conversation.id)
        .where(
            Conversation.kind != ConversationKind.API,
            Conversation.turn_id.is_not(None),
            Conversation.turn_lease_until < utcnow(),
        )
        .limit(BATCH)
    ).all()
    db.session.commit()
    settled = 0
    for conversation_id in ids:
        try:
            turn_id = lease.claim(conversation_id)  # taking it over settles it
        except Conflict:
            continue  # a live turn took it meanwhile: it settles its own
        lease.release(conversation_id, turn_id)
        settled += 1
    return settled


@jobs.periodic("upkeep.prune_progress_logs")
def prune_progress_logs() -> int:
    """Drop this process's progress logs idle past their retention; how many."""
    return progress.progress_log(current_app._get_current_object()).prune()  # type: ignore[attr-defined]
