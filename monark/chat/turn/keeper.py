"""The lease keeper: one thread per app renewing this process's turns' leases, reading
their stop flags and saving their replies, in one statement a second however many run.
A turn stalled past ``CHAT_TURN_STALL_SECONDS`` (a hung tool) is stopped, not renewed."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any, Protocol

from flask import Flask

from monark.chat.turn import lease
from monark.core.settings import chat_settings
from monark.extensions import db

_KEY = "monark.lease_keeper"
_lock = threading.Lock()


class Kept(Protocol):
    """What the keeper needs of a running turn (``run.Reporter`` is one)."""

    turn_id: str
    stop: threading.Event

    @property
    def progressed(self) -> float:
        """When the turn last showed a sign of life (``time.monotonic``)."""
        ...

    def unsaved_reply(self) -> tuple[int, str, int] | None:
        """``(message_id, text, length)`` of the reply, when it grew since last saved."""
        ...

    def saved(self, message_id: int, length: int) -> None:
        """The reply was stored up to ``length``."""
        ...


class LeaseKeeper(threading.Thread):
    def __init__(self, app: Flask):
        super().__init__(name="turn-lease-keeper", daemon=True)
        self.app = app
        self.turns: dict[str, Kept] = {}
        self.lock = threading.Lock()
        self.busy = threading.Event()
        self.renewed = time.monotonic()

    def add(self, turn: Kept) -> None:
        """Keep ``turn`` alive until ``remove``."""
        with self.lock:
            if not self.turns:
                self.renewed = time.monotonic()  # idle until now: nothing was due
            self.turns[turn.turn_id] = turn
            self.busy.set()

    def remove(self, turn: Kept) -> None:
        """Stop keeping ``turn`` (it ended)."""
        with self.lock:
            self.turns.pop(turn.turn_id, None)
            if not self.turns:
                self.busy.clear()

    def wake(self, turn_id: str) -> None:
        """Stop a turn of this process now, without waiting for a beat."""
        with self.lock:
            found = self.turns.get(turn_id)
        if found is not None:
            found.stop.set()

    @property
    def lease(self) -> timedelta:
        """How long a renewal holds (read at each beat: the settings may change)."""
        return lease.length(self.app)

    def run(self) -> None:
        with self.app.app_context():
            while True:
                self.busy.wait()
                held = self.lease.total_seconds()
                # Four beats to a lease at least, so one slow beat never lets it lapse.
                time.sleep(min(1.0, held / 4))
                with self.lock:
                    running = dict(self.turns)
                if not running:
                    continue
                try:
                    self.beat(running)
                except Exception:  # the database blinked: try again at the next beat
                    self.app.logger.warning("renewing turns failed", exc_info=True)
                    db.session.rollback()
                    if time.monotonic() - self.renewed > held:
                        for turn in running.values():
                            turn.stop.set()  # the leases have lapsed: others may take over
                finally:
                    db.session.remove()  # no connection held between beats

    def beat(self, running: dict[str, Kept]) -> None:
        """Renew, stop what must stop, save replies."""
        now = time.monotonic()
        stall = chat_settings(self.app).turn_stall_seconds
        alive = {k: v for k, v in running.items() if now - v.progressed < stall}
        for turn_id in running.keys() - alive.keys():
            self.app.logger.warning("turn %s shows no progress: no longer renewed", turn_id)
            running[turn_id].stop.set()
        flags = lease.renew(list(alive), self.lease) if alive else {}
        self.renewed = now
        replies: list[tuple[Any, ...]] = []
        for turn_id, turn in alive.items():
            stop = flags.get(turn_id)
            if stop is None or stop:
                turn.stop.set()  # asked to stop, or lost its lease
            if stop is not None and (reply := turn.unsaved_reply()):
                replies.append((turn, *reply))
        saved = set(lease.save_replies([(message_id, text) for _, message_id, text, _ in replies]))
        for reporter, message_id, _, length in replies:
            if message_id in saved:
                reporter.saved(message_id, length)


def of(app: Flask) -> LeaseKeeper:
    """The app's lease keeper, started on first use."""
    keeper = app.extensions.get(_KEY)
    if keeper is None or not keeper.is_alive():
        with _lock:
            keeper = app.extensions.get(_KEY)
            if keeper is None or not keeper.is_alive():
                keeper = app.extensions[_KEY] = LeaseKeeper(app)
                keeper.start()
    return keeper
