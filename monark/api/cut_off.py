"""Held writes whose approved run was cut off: settled as a dead turn's calls are, asked again.

A member's confirm runs a key's held write as a turn of the key's conversation, under its
lease (``key_holds.decide``). If the process dies mid-write, the write's own transaction
dies with it, and its result was to be stored in that transaction: no result means
nothing changed. The call is left EXECUTING and the lease stops being renewed; once it has
run out, whoever reads the call next (the agent's status, the Approvals inbox) takes the
lease over, which fails the call as interrupted (``lease.settle``), and the write waits for
approval again as a new request pointing at it (``ToolCall.retry_of_id``, once per call):
nothing runs again without a member's decision, and the dead run's late answer, should
its process only have stalled, can no longer be kept (its call is no longer EXECUTING).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, select, update

from monark.api import held
from monark.approvals.decision import user_name
from monark.chat.models import Conversation, ConversationKind, ToolCall, ToolCallStatus
from monark.chat.turn import lease
from monark.core.errors import Conflict
from monark.core.keys import key_principal
from monark.core.models import utcnow
from monark.core.uow import unit_of_work
from monark.extensions import db

ASKED_AGAIN = (
    "Approved, but the server stopped while it ran, so nothing was changed: it waits for "
    "approval again as approval {id}."
)
NOT_ASKED_AGAIN = (
    "Approved, but the server stopped while it ran, so nothing was changed; the API key was "
    "revoked (or its creator left) since, so it is not asked again."
)


def _left_behind(org_id: int) -> Select[Any]:
    """The org's key conversations holding a write a decision left: EXECUTING with no live
    lease (its process died), or failed as interrupted and not yet asked again."""
    abandoned = (ToolCall.status == ToolCallStatus.EXECUTING) & (
        Conversation.turn_id.is_(None) | (Conversation.turn_lease_until < utcnow())
    )
    interrupted = (ToolCall.status == ToolCallStatus.FAILED) & (
        ToolCall.error == lease.INTERRUPTED_CALL
    )
    return (
        select(Conversation.id, Conversation.api_key_id)
        .join(ToolCall, ToolCall.conversation_id == Conversation.id)
        .where(
            Conversation.org_id == org_id,
            Conversation.kind == ConversationKind.API,
            ToolCall.org_id == org_id,
            abandoned | interrupted,
        )
        .distinct()
    )


def settle(org_id: int, conversation_id: int | None = None) -> None:
    """Settle the org's (or one conversation's) held writes cut off while they ran, and ask
    each again, in a unit of work that writes (kept even where it is called within a read);
    commits. A conversation whose decision still holds its lease is left to it."""
    query = _left_behind(org_id)
    if conversation_id is not None:
        query = query.where(Conversation.id == conversation_id)
    with unit_of_work():
        found = db.session.execute(query).all()
        db.session.rollback()
        for cid, key_id in found:
            try:
                turn_id = lease.claim(cid)  # taken over: the dead run's call failed
            except Conflict:
                continue  # a live decision holds it: it settles its own
            try:
                _ask_again(org_id, cid, key_id)
            finally:
                db.session.rollback()
                lease.release(cid, turn_id)


def _ask_again(org_id: int, conversation_id: int, key_id: int | None) -> None:
    """Each write of the conversation failed as interrupted waits for approval again: a new
    PROPOSED call of the same arguments, and the old one says which. Under the
    conversation's lease; commits."""
    key = held.lock_key(key_id) if key_id is not None else None
    principal = key_principal(org_id, key_id) if key_id is not None else None
    conversation = db.session.get(Conversation, conversation_id)
    cut = db.session.scalars(
        select(ToolCall)
        .where(
            ToolCall.conversation_id == conversation_id,
            ToolCall.status == ToolCallStatus.FAILED,
            ToolCall.error == lease.INTERRUPTED_CALL,
        )
        .order_by(ToolCall.id)
    ).all()
    for old in cut:
        if key is None or principal is None or conversation is None:
            error = NOT_ASKED_AGAIN
        else:
            again = held.store_held(
                principal,
                conversation,
                f"{key.name} wants to {(old.preview or {}).get('headline')} (asked again: "
                f"approval {old.id} was cut off while it ran, and changed nothing)",
                name=old.name,
                input=old.input,
                preview=old.preview,
                original_input=old.original_input,
                edited_by_id=old.edited_by_id,  # four eyes: who set them still may not confirm
                edited_at=old.edited_at,
                retry_of_id=old.id,
            )
            error = ASKED_AGAIN.format(id=again.id)
        db.session.execute(
            update(ToolCall)
            .where(ToolCall.id == old.id, ToolCall.error == lease.INTERRUPTED_CALL)
            .values(error=error)
            .execution_options(synchronize_session=False)
        )
    db.session.commit()


def asked_again_as(call: ToolCall) -> int | None:
    """The request a cut-off write waits for approval again as (None for any other)."""
    return db.session.scalar(select(ToolCall.id).where(ToolCall.retry_of_id == call.id))


def asked_again_note(call: ToolCall) -> str | None:
    """What the inbox says of a request asked again (None for any other)."""
    if call.retry_of_id is None:
        return None
    approver = user_name(
        db.session.scalar(select(ToolCall.decided_by_id).where(ToolCall.id == call.retry_of_id))
    )
    return (
        f"Asked again: {approver or 'a member'} approved this, but the server stopped while "
        "it ran, so nothing was changed. Decide again."
    )
