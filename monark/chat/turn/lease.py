"""One turn at a time per conversation: a lease on the conversation row.

A turn claims its conversation with a fresh ``turn_id`` and a lease (``turn_lease_until``)
that its process renews about every second; whichever tab, window or instance asks, a
conditional update lets exactly one claim win. A turn whose process dies stops renewing,
and its lease runs out in seconds: the next claim takes the conversation over and settles
what the dead turn left open. Stop sets a flag on the row that the turn reads at its next
renewal, wherever it runs. Every write here is conditioned on the turn's id, so a turn
that lost its lease can no longer release, settle or renew what another turn holds.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

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
    """Claim the conversation's turn with a fresh lease and commit; returns the turn's id.

    ``Conflict`` while a live turn holds it. A conversation whose lease ran out is taken
    over, and what its turn left open is settled (``settle``).
    """
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
    # Taken over from a turn that died, or freed by one that could not settle: either way
    # nothing of an earlier turn can still be running now.
    settle(conversation_id)
    db.session.commit()
    return turn_id


ORG_BUSY = (
    "{limit} replies are being written in this organization at once, the most it may run;"
    " try again in a few seconds."
)


def check_org_room(org_id: int) -> None:
    """``RateLimited`` when the org runs more turns at once than ``LIMIT_TURNS_PER_ORG``.

    Called after a claim committed, so the count includes it and every other instance's:
    two claims racing for the last place both see one too many and both give way, so the
    limit is never passed (at worst, both retry).
    """
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
    """Close what an ended turn left open: a reply cut off mid-stream is kept as an
    incomplete message, and a call it was running failed (its own transaction rolled back
    with it, so nothing of it was kept). Only the lease holder calls this."""
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
    """Extend the leases of running turns in one statement; commits.

    Returns each turn that still holds its conversation with whether Stop was asked; a
    turn missing from the answer lost its lease (another instance took its conversation
    over after this process stalled past the lease).
    """
    held = db.session.execute(
        update(Conversation)
        .where(Conversation.turn_id.in_(turn_ids))
        .values(turn_lease_until=utcnow() + lease)
        .returning(Conversation.turn_id, Conversation.turn_stop_requested)
        .execution_options(synchronize_session=False)
    ).all()
    db.session.commit()
    return {turn_id: bool(stop) for turn_id, stop in held}


def _save_reply(message_id: int, text: str) -> None:
    _save_all([(message_id, text)])


def _save_all(replies: list[tuple[int, str]]) -> None:
    # One statement executed for every reply (executemany), each only while it streams: a
    # reply stored whole meanwhile keeps its text.
    table = Message.__table__
    db.session.execute(
        table.update()
        .where(table.c.id == bindparam("reply_id"), table.c.status == MessageStatus.STREAMING)
        .values(text=bindparam("reply_text")),
        [{"reply_id": message_id, "reply_text": text} for message_id, text in replies],
    )


def save_replies(replies: list[tuple[int, str]]) -> list[int]:
    """Save replies streamed so far (``(message_id, text)``): all in one statement and one
    commit a beat, however many turns stream, and should the database refuse that, each on
    its own, so one it refuses is logged and skipped, never holding up the others. Returns
    the ids saved."""
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
            _save_reply(message_id, text)
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
    """Give the conversation back, settling what the turn left open first if asked; only
    while this turn holds it. Commits; returns whether it held it."""
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
    """Ask the conversation's live turn (only ``turn_id``, when given) to stop; commits.
    Returns the id of the turn asked, or None when none was running."""
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


def live_turn_id(conversation: Conversation) -> str | None:
    """The id of the turn holding a loaded conversation, if its lease is live."""
    until = as_utc(conversation.turn_lease_until)
    if conversation.turn_id and until is not None and until >= utcnow():
        return conversation.turn_id
    return None


def live_turn(conversation_id: int) -> str | None:
    """The same, read from the database now (one small query)."""
    row = db.session.execute(
        select(Conversation.turn_id, Conversation.turn_lease_until).where(
            Conversation.id == conversation_id
        )
    ).one_or_none()
    if row is None or row.turn_id is None:
        return None
    until = as_utc(row.turn_lease_until)
    return row.turn_id if until is not None and until >= utcnow() else None
