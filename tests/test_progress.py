"""A turn's progress events, through the log and back: typed on both sides."""

from __future__ import annotations

import pytest

from monark.chat.loop import TurnStatus
from monark.chat.turn import progress
from monark.chat.turn.progress import CallChanged, MessageSaved, TextStreamed, TurnFinished
from monark.core.broker import LocalLog

EVENTS = [
    TextStreamed(7, 12, "Hello, "),
    MessageSaved(7),
    CallChanged(31),
    TurnFinished(TurnStatus.AWAITING_CONFIRMATION),
    TurnFinished(TurnStatus.ERROR, "It broke.", raised=True),
]


def test_every_event_reads_back_as_it_was_appended():
    log = LocalLog()
    ids = [progress.append(log, "turn-1", event) for event in EVENTS]
    assert progress.read(log, "turn-1", None, 0) == list(zip(ids, EVENTS, strict=True))
    assert progress.read(log, "turn-1", ids[1], 0) == list(zip(ids[2:], EVENTS[2:], strict=True))


def test_an_entry_no_turn_wrote_is_refused_not_guessed():
    log = LocalLog()
    log.append("turn-1", {"k": "z", "id": 1})
    with pytest.raises(ValueError, match="not a progress entry"):
        progress.read(log, "turn-1", None, 0)


def test_the_finished_status_is_the_loops_enum():
    entry = progress.encode(TurnFinished(TurnStatus.STEP_LIMIT))
    assert progress.decode(entry) == TurnFinished(TurnStatus.STEP_LIMIT, None, False)
    assert isinstance(progress.decode(entry).status, TurnStatus)
