"""One turn at a time per conversation: a lease on its row, won by one conditional update,
taken over once a dead process stops renewing it; every write is conditioned on the turn."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from flask import Flask, current_app
from sqlalchemy import bindparam, func, select, update

from monark.chat.models import Conversation, Message, MessageStatus, ToolCall, ToolCallStatus
from monark.core.errors import Conflict, RateLimited
from monark.core.models import as_utc, utcnow
from monark.core.settings import chat_settings, settings
from monark.extensions import db

BUSY = "A reply is still being written in this conversation. Wait for it, or press Stop."
INTERRUPTED_REPLY = "The server stopped while writing this reply."
INTERRUPTED_CALL = "Interrupted before it finished, so nothing was changed."


def _holds(conversation_id: int, turn_id: str):
    return (Conversation.id == conversation_id) & (Conversation.turn_id == turn_id)


def length(app: Flask | None = None) -> timedelta:
    """How long a lease lasts without renewal (``CHAT_TURN_LEASE_SECONDS``)."""
    return timedelta(seconds=chat_settings(app).turn_lease_seconds)


def claim(conversation_id: int) -> str:
    """Claim the conversation's turn (``Conflict`` while a live one holds it) and commit;
    the turn's id. One whose lease ran out is taken over, and what it left open settled."""
    lease = length()
    now = utcnow()
    turn_id = uuid.uuid4().hex
    claim = (
        update(Conversation)
        .values(
            turn_id=turn_id,
            turn_started_at=now,
            turn_lease_until=now + lease,
            turn_stop_requested=False,
        )
        .execution_options(synchronize_session=False)
    )
    free = claim.where(Conversation.id == conversation_id, Conversation.turn_id.is_(None))
    if db.session.execute(free).rowcount != 1:
        expired = claim.where(
            Conversation.id == conversation_id, Conversation.turn_lease_until < now
        )
        if db.session.execute(expired).rowcount != 1:
            db.session.rollback()
            raise Conflict(BUSY)
    # Taken over, or freed by a turn that could not settle: nothing earlier runs now.
    settle(conversation_id)
    db.session.commit()
    return turn_id


ORG_BUSY = (
    "{limit} replies are being written in this organization at once, the most it may run;"
    " try again in a few seconds."
)


def check_org_room(org_id: int) -> None:
    """``RateLimited`` past ``LIMIT_TURNS_PER_ORG`` turns at once, counted after the claim
    committed: two racing for the last place both give way, so it is never passed."""
    limit = settings().limits.turns_per_org
    if not limit:
        return
    running = db.session.scalar(
        select(func.count())
        .select_from(Conversation)
        .where(
            Conversation.org_id == org_id,
            Conversation.turn_id.is_not(None),
            Conversation.turn_lease_until >= utcnow(),
        )
    )
    if (running or 0) > limit:
        wait = max(1, int(chat_settings().turn_lease_seconds))
        raise RateLimited(ORG_BUSY.format(limit=limit), wait)


def settle(conversation_id: int) -> None:
    """Close what an ended turn left open (the lease holder's): a cut-off reply is kept as
    incomplete, and a call it ran failed (its transaction rolled back with it)."""
    left_open = (
        (Message, MessageStatus.STREAMING, MessageStatus.INCOMPLETE, INTERRUPTED_REPLY),
        (ToolCall, ToolCallStatus.EXECUTING, ToolCallStatus.FAILED, INTERRUPTED_CALL),
    )
    for row, running, ended, why in left_open:
        db.session.execute(
            update(row)
            .where(row.conversation_id == conversation_id, row.status == running)
            .values(status=ended, error=why)
            .execution_options(synchronize_session=False)
        )


def renew(turn_ids: list[str], lease: timedelta) -> dict[str, bool]:
    """Extend running turns' leases and commit: each still holding, with whether Stop was asked."""
    held = db.session.execute(
        update(Conversation)
        .where(Conversation.turn_id.in_(turn_ids))
        .values(turn_lease_until=utcnow() + lease)
        .returning(Conversation.turn_id, Conversation.turn_stop_requested)
        .execution_options(synchronize_session=False)
    ).all()
    db.session.commit()
    return {turn_id: bool(stop) for turn_id, stop in held}


def _save_all(replies: list[tuple[int, str]]) -> None:
    # One executemany, each only while it streams: a reply stored whole keeps its text.
    table = Message.__table__
    db.session.execute(
        table.update()
        .where(table.c.id == bindparam("reply_id"), table.c.status == MessageStatus.STREAMING)
        .values(text=bindparam("reply_text")),
        [{"reply_id": message_id, "reply_text": text} for message_id, text in replies],
    )


def save_replies(replies: list[tuple[int, str]]) -> list[int]:
    """Save replies streamed so far (``(message_id, text)``) in one statement and commit, or
    each on its own should that fail (one refused never holds up the others); the ids saved."""
    if len(replies) > 1:
        try:
            _save_all(replies)
            db.session.commit()
            return [message_id for message_id, _ in replies]
        except Exception:
            db.session.rollback()  # one at a time, below, finds the one it refuses
    saved = []
    for message_id, text in replies:
        try:
            _save_all([(message_id, text)])
            db.session.commit()
            saved.append(message_id)
        except Exception:
            db.session.rollback()
            current_app.logger.warning("saving reply %s failed", message_id, exc_info=True)
    return saved


def give_back(conversation_id: int, turn_id: str) -> None:
    """Give back a claim whose turn will not run (its opening step failed)."""
    try:
        db.session.rollback()
        release(conversation_id, turn_id)
    except Exception:  # the opening's own error matters more; the lease runs out anyway
        current_app.logger.exception("releasing turn %s failed", turn_id)


def release(conversation_id: int, turn_id: str, settle_first: bool = False) -> bool:
    """Give the conversation back (settling first, if asked) and commit; whether it held it."""
    held = db.session.execute(
        update(Conversation)
        .where(_holds(conversation_id, turn_id))
        .values(
            turn_id=None, turn_started_at=None, turn_lease_until=None, turn_stop_requested=False
        )
        .execution_options(synchronize_session=False)
    ).rowcount
    if held and settle_first:
        settle(conversation_id)
    db.session.commit()
    return bool(held)


def request_stop(conversation_id: int, turn_id: str | None = None) -> str | None:
    """Ask the live turn (only ``turn_id``, when given) to stop and commit; the id asked."""
    conditions = [
        Conversation.id == conversation_id,
        Conversation.turn_id.is_not(None),
        Conversation.turn_lease_until >= utcnow(),
    ]
    if turn_id is not None:
        conditions.append(Conversation.turn_id == turn_id)
    asked = db.session.execute(
        update(Conversation)
        .where(*conditions)
        .values(turn_stop_requested=True)
        .returning(Conversation.turn_id)
        .execution_options(synchronize_session=False)
    ).scalar()
    db.session.commit()
    return asked


def _live(turn_id: str | None, lease_until: datetime | None) -> str | None:
    until = as_utc(lease_until)
    return turn_id if turn_id and until is not None and until >= utcnow() else None


def live_turn_id(conversation: Conversation) -> str | None:
    """The id of the turn holding a loaded conversation, if its lease is live."""
    return _live(conversation.turn_id, conversation.turn_lease_until)


def live_turn(conversation_id: int) -> str | None:
    """The same, read from the database now (one small query)."""
    row = db.session.execute(
        select(Conversation.turn_id, Conversation.turn_lease_until).where(
            Conversation.id == conversation_id
        )
    ).one_or_none()
    return _live(row.turn_id, row.turn_lease_until) if row is not None else None
