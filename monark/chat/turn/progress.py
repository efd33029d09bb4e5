"""What a turn reports as it runs: typed events (ids, offsets and streamed text, nothing
else), and their form in its progress log (``core.broker``)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flask import Flask, current_app

from monark.chat.loop import TurnStatus
from monark.core.broker import ProgressLog, progress_log_for
from monark.core.settings import chat_settings


@dataclass(frozen=True, slots=True)
class TextStreamed:
    """Text of the reply ``message_id`` streamed at ``offset`` (characters into it)."""

    message_id: int
    offset: int
    text: str


@dataclass(frozen=True, slots=True)
class MessageSaved:
    """A message was stored (drawn from the database by whoever watches)."""

    message_id: int


@dataclass(frozen=True, slots=True)
class CallChanged:
    """A tool call was stored or changed status."""

    call_id: int


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """The turn ended; ``raised``: it broke off with an exception no stored message tells."""

    status: TurnStatus
    error: str | None = None
    raised: bool = False


Progress = TextStreamed | MessageSaved | CallChanged | TurnFinished


# Small JSON entries (a kind ``k``, short fields): a reply's every frame is one.
def encode(event: Progress) -> dict[str, Any]:
    """The log entry of ``event``."""
    match event:
        case TextStreamed(message_id, offset, text):
            return {"k": "t", "m": message_id, "o": offset, "x": text}
        case MessageSaved(message_id):
            return {"k": "m", "id": message_id}
        case CallChanged(call_id):
            return {"k": "c", "id": call_id}
        case TurnFinished(status, error, raised):
            return {"k": "f", "status": str(status), "error": error, "raised": raised}
    raise TypeError(f"not a progress event: {event!r}")


def decode(entry: Mapping[str, Any]) -> Progress:
    """The event of a log entry (``ValueError`` for one this module never wrote)."""
    match entry.get("k"):
        case "t":
            return TextStreamed(int(entry["m"]), int(entry["o"]), str(entry["x"]))
        case "m":
            return MessageSaved(int(entry["id"]))
        case "c":
            return CallChanged(int(entry["id"]))
        case "f":
            status = TurnStatus(entry.get("status") or TurnStatus.DONE)
            return TurnFinished(status, entry.get("error"), bool(entry.get("raised")))
    raise ValueError(f"not a progress entry: {entry!r}")


def append(log: ProgressLog, turn_id: str, event: Progress) -> str:
    """Add ``event`` to the turn's log; its entry id."""
    return log.append(turn_id, encode(event))


def read(
    log: ProgressLog, turn_id: str, after: str | None, timeout: float
) -> list[tuple[str, Progress]]:
    """The turn's events after ``after`` (all when None), waiting up to ``timeout`` s."""
    return [(entry_id, decode(entry)) for entry_id, entry in log.read(turn_id, after, timeout)]


_LOG_KEY = "monark.progress_log"
_log_lock = threading.Lock()


def progress_log(app: Flask | None = None) -> ProgressLog:
    """The app's progress log, made on first use from its settings."""
    app = app or current_app._get_current_object()  # type: ignore[attr-defined]
    log = app.extensions.get(_LOG_KEY)
    if log is None:
        with _log_lock:
            log = app.extensions.get(_LOG_KEY)
            if log is None:
                log = app.extensions[_LOG_KEY] = progress_log_for(chat_settings(app).broker_url)
    return log
