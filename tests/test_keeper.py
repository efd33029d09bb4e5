"""The lease keeper reads its settings at each beat, so a lease set after start holds."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from sqlalchemy import event, select, text

from monark.chat import store
from monark.chat.models import Conversation, Message, MessageRole, MessageStatus
from monark.chat.turn import keeper, lease
from monark.core.models import as_utc, utcnow
from monark.extensions import db
from tests.tuning import configure


class Running:
    """A turn as the keeper sees it, alive and with nothing to save."""

    def __init__(self, turn_id: str):
        self.turn_id = turn_id
        self.stop = threading.Event()
        self.progressed = time.monotonic()

    def unsaved_reply(self):
        return None

    def saved(self, message_id: int, length: int) -> None:
        pass


def test_a_lease_length_set_after_the_keeper_started_is_the_one_it_renews_with(
    app, world, monkeypatch
):
    principal = world.a.principal("member")
    conversation_id = store.create_conversation(principal, "Kept").id
    db.session.commit()
    turn = Running(lease.claim(conversation_id))  # an 8 s lease, the default
    keep = keeper.of(app)
    keep.add(turn)
    try:
        configure(monkeypatch, app, CHAT_TURN_LEASE_SECONDS=2.0)
        deadline = time.monotonic() + 10
        until = None
        while time.monotonic() < deadline:
            db.session.rollback()
            until = as_utc(db.session.get(Conversation, conversation_id).turn_lease_until)
            if until is not None and until <= utcnow() + timedelta(seconds=2.5):
                break  # renewed for 2 s: the new length, read at this beat
            time.sleep(0.05)
        assert until is not None and until <= utcnow() + timedelta(seconds=2.5)
        assert not turn.stop.is_set()
    finally:
        keep.remove(turn)
        lease.release(conversation_id, turn.turn_id)


def _streaming_reply(principal, conversation, text: str = "") -> int:
    message = store.add_message(
        conversation,
        principal,
        author_kind="agent",
        role=MessageRole.ASSISTANT,
        text=text,
        status=MessageStatus.STREAMING,
    )
    db.session.commit()
    return message.id


def _refuse_updates_of(message_id: int) -> tuple[str, ...]:
    """SQL that makes the database refuse any update of one message (and what undoes it)."""
    table = Message.__tablename__
    if db.engine.dialect.name == "sqlite":
        db.session.execute(
            text(
                f"CREATE TRIGGER refuse_reply BEFORE UPDATE ON {table} "
                f"WHEN NEW.id = {int(message_id)} BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
        )
        return ("DROP TRIGGER refuse_reply",)
    db.session.execute(
        text(
            "CREATE FUNCTION refuse_reply() RETURNS trigger AS $$ BEGIN "
            f"IF NEW.id = {int(message_id)} THEN RAISE EXCEPTION 'refused'; END IF; "
            "RETURN NEW; END $$ LANGUAGE plpgsql"
        )
    )
    db.session.execute(
        text(
            f"CREATE TRIGGER refuse_reply BEFORE UPDATE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION refuse_reply()"
        )
    )
    return (f"DROP TRIGGER refuse_reply ON {table}", "DROP FUNCTION refuse_reply()")


def _texts(ids: list[int]) -> list[str]:
    db.session.rollback()
    rows = db.session.execute(select(Message.id, Message.text).where(Message.id.in_(ids)))
    found = dict(rows.all())
    return [found[i] for i in ids]


def test_replies_of_one_beat_are_saved_in_one_commit(app, world):
    principal = world.a.principal("member")
    conversation = store.create_conversation(principal, "Many")
    db.session.commit()
    ids = [_streaming_reply(principal, conversation) for _ in range(3)]
    done = store.add_message(
        conversation, principal, author_kind="agent", role=MessageRole.ASSISTANT, text="Kept"
    )
    db.session.commit()
    commits: list[object] = []
    listen = lambda conn: commits.append(conn)  # noqa: E731
    event.listen(db.engine, "commit", listen)
    try:
        saved = lease.save_replies([(i, f"so far {n}") for n, i in enumerate([*ids, done.id])])
    finally:
        event.remove(db.engine, "commit", listen)
    assert saved == [*ids, done.id]
    assert len(commits) == 1
    # A reply no longer streaming keeps its final text.
    assert _texts([*ids, done.id]) == ["so far 0", "so far 1", "so far 2", "Kept"]


def test_a_reply_the_database_refuses_does_not_hold_up_the_others(app, world):
    principal = world.a.principal("member")
    conversation = store.create_conversation(principal, "Refused")
    db.session.commit()
    ids = [_streaming_reply(principal, conversation, "start") for _ in range(3)]
    undo = _refuse_updates_of(ids[1])
    db.session.commit()
    try:
        saved = lease.save_replies([(i, f"so far {n}") for n, i in enumerate(ids)])
    finally:
        db.session.rollback()
        for statement in undo:
            db.session.execute(text(statement))
        db.session.commit()
    assert saved == [ids[0], ids[2]]
    assert _texts(ids) == ["so far 0", "start", "so far 2"]
