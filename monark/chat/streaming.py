"""Streaming one model step: the provider read in a thread of its own, text handed on in
frames (the first at once, then one per ``FRAME_SECONDS``): each hand-over is a log entry,
a wake-up of every watcher and an SSE frame, so 200 tokens a second cost 40 of them."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import monark.core.metrics as metrics
from monark.chat.hooks import TurnHooks
from monark.chat.llm.types import (
    LlmProvider,
    LlmRequest,
    ProviderError,
    StopReason,
    TextDelta,
    ToolCallRequested,
    UsageReport,
)
from monark.core.bounds import MAX_DEPTH, depth
from monark.core.text import storable

STOP_POLL_SECONDS = 0.2
# Text within this long of the last hand-over waits for the next (nobody reads faster).
FRAME_SECONDS = 0.025
# The reader wakes this long before a held frame goes, to take what came meanwhile.
READ_AHEAD_SECONDS = 0.003
_END = object()


@dataclass
class Step:
    """What one model step gave."""

    text: list[str] = field(default_factory=list)
    calls: list[ToolCallRequested] = field(default_factory=list)
    usage: UsageReport = field(default_factory=UsageReport)
    stop_reason: str | None = None
    error: ProviderError | None = None
    stopped: bool = False


@dataclass
class _Pace:
    """When the turn last handed text on (``time.monotonic``), read by the reader."""

    handed: float = float("-inf")  # nothing handed on yet: the first text goes at once


def _pump(provider: LlmProvider, request: LlmRequest, pace: _Pace) -> queue.SimpleQueue:
    """Read the provider in a thread of its own (a hung one cannot hold the turn past Stop),
    sleeping while a frame is held, so one read takes all that waited in the socket."""
    events: queue.SimpleQueue = queue.SimpleQueue()

    def read() -> None:
        try:
            for event in provider.stream(request):
                events.put(event)
                if request.stop.is_set():
                    break
                if type(event) is TextDelta:
                    wait = pace.handed + FRAME_SECONDS - READ_AHEAD_SECONDS - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
        except Exception as err:  # providers report errors as events; this one raised
            events.put(ProviderError(f"The model provider failed ({type(err).__name__})."))
        finally:
            events.put(_END)

    threading.Thread(target=read, name="llm-stream", daemon=True).start()
    return events


def _drain(events: queue.SimpleQueue, first: Any) -> list[Any]:
    """``first`` and whatever else is already waiting (one batch, no waiting)."""
    batch = [first]
    while True:
        try:
            batch.append(events.get_nowait())
        except queue.Empty:
            return batch


def _apply(step: Step, event: Any) -> str:
    """Fold one provider event into the step; returns its text (cleaned), if any."""
    if isinstance(event, TextDelta):
        text = storable(event.text)
        step.text.append(text)
        return text
    if isinstance(event, ToolCallRequested):
        # Arguments nested too deep are refused unread: cleaning them would recurse as deep.
        deep = depth(event.input) > MAX_DEPTH
        arguments = event.input if deep else storable(event.input)
        step.calls.append(
            ToolCallRequested(storable(event.id), storable(event.name), arguments, event.meta)
        )
    elif isinstance(event, UsageReport):
        step.usage = event
    elif isinstance(event, StopReason):
        step.stop_reason = storable(event.reason)
        step.stopped = event.reason == "stopped"
    elif isinstance(event, ProviderError):
        step.error = ProviderError(storable(event.message), event.kind)
    return ""


def stream_step(
    provider: LlmProvider, request: LlmRequest, hooks: TurnHooks, silence: float
) -> Step:
    """Stream one model step, text in frames, until Stop or ``silence`` seconds of nothing."""
    step = Step()
    pace = _Pace()  # when text last went to the hooks: the first goes at once
    events = _pump(provider, request, pace)
    last = asked = time.monotonic()
    waiting_first = True  # for /metrics: how long the first text took
    while True:
        try:
            first = events.get(timeout=STOP_POLL_SECONDS)
        except queue.Empty:
            first = None
        if hooks.should_stop() and not step.stopped:
            request.stop.set()
            step.stopped = True
            return step
        if first is None:
            if time.monotonic() - last > silence:
                request.stop.set()
                step.error = ProviderError(
                    f"The model sent nothing for {silence:g} seconds; it may be overloaded."
                )
                return step
            continue
        last = time.monotonic()
        held = pace.handed + FRAME_SECONDS - last
        if held > 0 and first is not _END:  # sleep out the frame, then take all that came
            time.sleep(held)
        text: list[str] = []
        ended = False
        for event in _drain(events, first):
            if event is _END:
                ended = True
                break
            text.append(_apply(step, event))
        joined = "".join(text)
        if joined:
            pace.handed = time.monotonic()
            if waiting_first:
                waiting_first = False
                name = getattr(provider, "name", None) or "unknown"
                metrics.first_token(name, request.model, pace.handed - asked)
            hooks.on_text_delta(joined)
        if ended:
            return step
