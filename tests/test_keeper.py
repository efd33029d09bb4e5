"""The lease keeper reads its settings at each beat, so a lease set after start holds."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from monark.chat import store
from monark.chat.models import Conversation
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
