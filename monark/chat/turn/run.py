"""A turn: one run of the agent loop under its conversation's lease, belonging to no
connection, reporting progress to a log that watchers follow (``turn.progress``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from flask import Flask, current_app

from monark.chat.hooks import TurnHooks
from monark.chat.loop import TurnResult, TurnStatus
from monark.chat.models import Message, MessageStatus, ToolCall
from monark.chat.turn import keeper, lease, progress
from monark.chat.turn.progress import (
    CallChanged,
    MessageSaved,
    Progress,
    TextStreamed,
    TurnFinished,
)
from monark.core.broker import ProgressLog
from monark.core.errors import AppError
from monark.core.rbac import Principal
from monark.extensions import db

FAILED_TEXT = "Something went wrong on our side. Retry in a moment."


@dataclass
class Turn:
    """A claimed turn, ready to run: ``work(hooks)`` is the loop to run under the lease."""

    principal: Principal
    conversation_id: int
    turn_id: str
    work: Callable[[TurnHooks], TurnResult]
    # What was stored under the claim (the user's message, cards it skipped), reported first.
    opening: list[Progress] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    progressed: float = field(default_factory=time.monotonic)  # its last sign of life


def request_stop(conversation_id: int, turn_id: str | None = None) -> str | None:
    """Stop the conversation's live turn (or only ``turn_id``) wherever it runs; the id asked."""
    asked = lease.request_stop(conversation_id, turn_id)
    if asked is not None:
        keeper.of(current_app._get_current_object()).wake(asked)  # type: ignore[attr-defined]
    return asked


class Reporter(TurnHooks):
    """The loop's hooks for a turn: progress to the log, the reply so far for the lease
    keeper to save (``keeper.Kept``), and everything on to the caller's hooks."""

    def __init__(self, log: ProgressLog, turn: Turn, inner: TurnHooks):
        self.log = log
        self.turn = turn
        self.turn_id = turn.turn_id
        self.stop = turn.stop
        self.inner = inner
        self._lock = threading.Lock()
        self._live: int | None = None  # the message being streamed
        self._parts: list[str] = []
        self._length = 0
        self._saved = 0  # how much of it is stored

    @property
    def progressed(self) -> float:
        return self.turn.progressed

    def publish(self, event: Progress) -> None:
        """Append to the turn's log; progress is best effort (the database has the truth)."""
        self.turn.progressed = time.monotonic()
        try:
            progress.append(self.log, self.turn_id, event)
        except Exception:
            current_app.logger.warning("progress log unavailable", exc_info=True)

    def on_text_delta(self, text: str) -> None:
        with self._lock:
            offset = self._length
            self._parts.append(text)
            self._length += len(text)
            live = self._live
        if live is not None:
            self.publish(TextStreamed(live, offset, text))
        self.inner.on_text_delta(text)

    def on_message_saved(self, message: Message) -> None:
        with self._lock:
            if message.status == MessageStatus.STREAMING:
                self._live, self._parts, self._length, self._saved = message.id, [], 0, 0
            elif message.id == self._live:
                self._live = None
        self.publish(MessageSaved(message.id))
        self.inner.on_message_saved(message)

    def on_tool_call(self, call: ToolCall) -> None:
        self.publish(CallChanged(call.id))
        self.inner.on_tool_call(call)

    def should_stop(self) -> bool:
        return self.turn.stop.is_set() or self.inner.should_stop()

    def unsaved_reply(self) -> tuple[int, str, int] | None:
        with self._lock:
            if self._live is None or self._length == self._saved:
                return None
            return self._live, "".join(self._parts), self._length

    def saved(self, message_id: int, length: int) -> None:
        with self._lock:
            if self._live == message_id:
                self._saved = max(self._saved, length)


def run_turn(turn: Turn, hooks: TurnHooks | None = None) -> TurnResult:
    """Run a claimed turn here and release it; errors are re-raised after its end is reported."""
    app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
    reporter = Reporter(progress.progress_log(app), turn, hooks or TurnHooks())
    keep = keeper.of(app)
    keep.add(reporter)
    result = TurnResult(TurnStatus.ERROR, turn.conversation_id)
    raised = True  # the work broke off with an exception: no stored message says why
    try:
        for entry in turn.opening:
            reporter.publish(entry)
        result = turn.work(reporter)
        raised = False
        return result
    except AppError as err:
        result.error = err.message
        raise
    except Exception:
        result.error = FAILED_TEXT
        raise
    finally:
        keep.remove(reporter)
        try:
            db.session.rollback()
            if raised and (reply := reporter.unsaved_reply()):
                lease.save_replies([reply[:2]])  # keep what streamed of the cut reply
            # A turn that broke off leaves no reply streaming and no call EXECUTING.
            lease.release(turn.conversation_id, turn.turn_id, settle_first=raised)
        except Exception:  # the lease runs out on its own; the next claim settles
            app.logger.exception("releasing turn %s failed", turn.turn_id)
        reporter.publish(TurnFinished(result.status, result.error, raised))


def start_turn(turn: Turn) -> threading.Thread:
    """Run a claimed turn in a thread of its own, with its own app context and session."""
    app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]

    def work() -> None:
        with app.app_context():
            try:
                run_turn(turn)
            except AppError:
                pass  # reported to watchers as the turn's error
            except Exception:
                app.logger.exception("assistant turn failed")
            finally:
                db.session.remove()

    thread = threading.Thread(target=work, name=f"turn-{turn.conversation_id}", daemon=True)
    thread.start()
    return thread
