"""A step's text goes to the hooks in frames: the first at once, what comes within a frame
interval of the last hand-over together (``chat.streaming.FRAME_SECONDS``)."""

from __future__ import annotations

import itertools
import queue
import threading
import time

import pytest

from monark.chat import streaming
from monark.chat.hooks import TurnHooks
from monark.chat.llm.types import LlmRequest, StopReason, TextDelta, UsageReport


class Paced:
    """A provider whose pieces come ``gap`` seconds apart whether or not they are read yet,
    as a socket fills (the reader may sleep out a frame), each noted when it came."""

    name = "paced"

    def __init__(
        self,
        pieces: list[str],
        gap: float,
        after_first: threading.Event | None = None,
        after_each: threading.Event | None = None,
    ):
        self.pieces, self.gap, self.after_first = pieces, gap, after_first
        self.after_each = after_each  # each piece waits until the one before was handed on
        self.sent: list[float] = []

    def _send(self, arrived: queue.SimpleQueue) -> None:
        for n, piece in enumerate(self.pieces):
            if n and self.after_each is not None:
                assert self.after_each.wait(10)
                self.after_each.clear()
            if n == 1 and self.after_first is not None:
                self.after_first.wait(10)  # the first piece was handed on
            elif n:
                time.sleep(self.gap)
            self.sent.append(time.monotonic())
            arrived.put(TextDelta(piece))
        arrived.put(None)

    def stream(self, request: LlmRequest):
        arrived: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._send, args=(arrived,), daemon=True).start()
        while (event := arrived.get(timeout=10)) is not None:
            yield event
        yield UsageReport(1, len(self.pieces))
        yield StopReason("end_turn")


class Frames(TurnHooks):
    def __init__(self, first: threading.Event | None = None):
        self.frames: list[tuple[float, str]] = []
        self.first = first

    def on_text_delta(self, text: str) -> None:
        self.frames.append((time.monotonic(), text))
        if self.first is not None:
            self.first.set()


def request() -> LlmRequest:
    return LlmRequest(model="m", system="s", messages=[], tools=[], max_tokens=10)


def test_a_replys_first_text_goes_at_once_and_alone(monkeypatch):
    monkeypatch.setattr(streaming, "FRAME_SECONDS", 2.0)
    handed = threading.Event()
    provider = Paced(["Hel", "lo", " there"], 0.01, after_first=handed)
    hooks = Frames(handed)
    step = streaming.stream_step(provider, request(), hooks, silence=30)
    (first_at, first), (_, second), *late = hooks.frames
    assert first == "Hel"  # not held for what came next
    assert first_at - provider.sent[0] < 1.0  # far less than a frame interval of 2 s
    # What came within the frame interval went out at its end, as one frame (a reader that
    # a busy machine wakes late may leave the last piece to a frame of its own).
    assert second in ("lo there", "lo") and len(late) <= 1
    assert all(at - first_at >= 1.9 for at, _ in hooks.frames[1:])
    assert "".join(step.text) == "Hello there" and step.stop_reason == "end_turn"


def test_tokens_within_one_frame_interval_go_out_as_one_frame(monkeypatch):
    monkeypatch.setattr(streaming, "FRAME_SECONDS", 0.5)
    # The reader wakes well before the frame goes, as it would on a quiet machine: a busy
    # one may wake it late, and what it has not yet taken then goes in a frame of its own.
    monkeypatch.setattr(streaming, "READ_AHEAD_SECONDS", 0.1)
    handed = threading.Event()  # the rest come 10 ms apart once the first was handed on
    provider = Paced([f"t{n} " for n in range(8)], 0.01, after_first=handed)
    hooks = Frames(handed)
    step = streaming.stream_step(provider, request(), hooks, silence=30)
    texts = [text for _, text in hooks.frames]
    assert texts[0] == "t0 "
    assert len(texts) <= 3  # 8 tokens 10 ms apart: 70 ms, within one 500 ms interval
    assert "".join(texts) == "".join(step.text) == "".join(f"t{n} " for n in range(8))
    times = [at for at, _ in hooks.frames]
    assert all(b - a >= 0.45 for a, b in itertools.pairwise(times))


@pytest.mark.parametrize("gap", [0.06, 0.1])
def test_tokens_slower_than_a_frame_each_go_at_once(gap):
    # Each piece comes ``gap`` (more than a frame interval) after the one before was handed
    # on, so however late a busy machine wakes the reader, none has a frame left to wait out.
    handed = threading.Event()
    provider = Paced(["a", "b", "c", "d"], gap, after_each=handed)
    hooks = Frames(handed)
    streaming.stream_step(provider, request(), hooks, silence=30)
    assert [text for _, text in hooks.frames] == ["a", "b", "c", "d"]
