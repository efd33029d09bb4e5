"""Watching a turn as Server-Sent Events for htmx's hx-sse extension.

A turn runs on its own (``chat.turn``) and reports progress to a log; every SSE response
here is a watcher of that log: the answer to Send, Confirm, Reject and Retry (which start a
turn, then watch it), and the follow stream a thread screen opens while a turn runs (another
tab, a reopened panel, a reconnect after a dropped connection, another instance).

A watcher renders from the database what the log names (messages and cards by id) and the
streamed text the log carries. One that joins late first draws the thread from the database
(a snapshot, with the reply saved so far) and then reads the turn's log from its start,
skipping the text the snapshot already holds (log entries carry their offset in the reply).
One that reconnects with a ``Last-Event-ID`` of the running turn resumes right after it.
Closing a watcher never stops the turn: only Stop does.

The generator holds no database session between reads, so a long stream pins no connection.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from flask import Response, current_app, stream_with_context, url_for
from markupsafe import escape
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from monark.assistant.card_view import panel_card
from monark.assistant.thread import (
    ThreadFoot,
    ThreadView,
    message_view,
    thread_tail,
    thread_view,
)
from monark.chat.loop import TurnStatus
from monark.chat.models import Message, MessageRole, MessageStatus, ToolCall, ToolCallStatus
from monark.chat.turn import lease, progress
from monark.chat.turn.progress import (
    CallChanged,
    MessageSaved,
    Progress,
    TextStreamed,
    TurnFinished,
    progress_log,
)
from monark.core.broker import ProgressLog
from monark.core.errors import UNAVAILABLE, AppError, is_outage
from monark.core.rbac import Principal
from monark.extensions import db

# A watcher waits this long for progress before it sends a keep-alive and checks that the
# turn still holds its lease (a turn whose process died sends no "finished").
WAIT_SECONDS = 2.0
KEEPALIVE = ": keep-alive\n\n"


def sse(data: str = "", event: str | None = None, id: str | None = None) -> str:
    """One SSE frame; every line of ``data`` gets its own ``data:`` line."""
    lines = [f"event: {event}"] if event else []
    if id is not None:
        lines.append(f"id: {id}")
    lines += [f"data: {line}" for line in data.replace("\r", "").split("\n")]
    return "\n".join(lines) + "\n\n"


def partial(target: str, swap: str, html: str) -> str:
    """An ``<hx-partial>`` that swaps ``html`` into ``target``."""
    return f'<hx-partial hx-target="{target}" hx-swap="{swap}">{html}</hx-partial>'


def render_fragment(name: str, **context: Any) -> str:
    """Render a partial without the page context processors (they would query the DB)."""
    return current_app.jinja_env.get_template(name).render(**context)


def _id_input(conversation_id: int | None) -> str:
    value = "" if conversation_id is None else str(int(conversation_id))
    return f'<input type="hidden" id="chat-conversation-id" name="conversation_id" value="{value}">'


def follow_slot(conversation_id: int, turn_id: str, trigger: str = "load") -> str:
    """The element that follows a running turn (hx-sse:connect, reconnecting by itself)."""
    return render_fragment(
        "assistant/_follow.html", conversation_id=conversation_id, turn_id=turn_id, trigger=trigger
    )


def thread_frame(principal: Principal, conversation_id: int) -> tuple[str, tuple[int, ...]]:
    """A frame that draws the thread's messages as stored now, and the messages it drew."""
    thread = thread_view(principal, conversation_id)
    items = render_fragment("assistant/_thread_items.html", thread=thread)
    return sse(partial("#chat-thread", "outerHTML", items)), tuple(m.id for m in thread.messages)


def _foot_frame(foot: ThreadFoot, following: bool = False, notice: str | None = None) -> str:
    html = render_fragment(
        "assistant/_thread_foot.html", foot=foot, following=following, notice=notice
    )
    return sse(partial("#chat-thread-foot", "outerHTML", html))


def turn_preface(conversation_id: int, turn_id: str) -> str:
    """The first frames of a stream that starts a turn: the foot cleared (no Retry, no old
    notice while a turn runs), and a dormant follower of the turn, which the panel wakes
    should this connection drop: the turn goes on without it."""
    running = ThreadFoot(waiting=False, running=True, retry=False)
    slot = follow_slot(conversation_id, turn_id, "chat:resume")
    return _foot_frame(running, following=True) + sse(
        partial("#chat-follow-slot", "innerHTML", slot)
    )


@dataclass
class _Watch:
    """What one watcher has put on the page, so replays and late joins never repeat it."""

    principal: Principal
    conversation_id: int
    shown: dict[int, int] = field(default_factory=dict)  # streaming message → chars shown
    known: set[int] = field(default_factory=set)  # messages on the page
    changed: bool = False  # a write went through: the page behind may need a refresh
    # The turn made a new version (Regenerate, Edit): its end draws the whole thread, whose
    # versions' "1/2" only the thread as a whole can say.
    whole_at_end: bool = False

    # ---- loading (each a short session, handed back at once) ----

    def _message(self, message_id: int) -> Message | None:
        # Its tool calls load when drawn, which only a finished reply is.
        return db.session.scalar(
            select(Message).where(
                Message.id == message_id, Message.conversation_id == self.conversation_id
            )
        )

    def _call(self, call_id: int) -> ToolCall | None:
        return db.session.scalar(
            select(ToolCall).where(
                ToolCall.id == call_id, ToolCall.conversation_id == self.conversation_id
            )
        )

    # ---- frames ----

    def snapshot(self, following: bool) -> str:
        """The whole thread as stored now (for a watcher that joins late, and at the end)."""
        thread = thread_view(self.principal, self.conversation_id)
        self.known = {m.id for m in thread.messages}
        self.shown = {
            m.id: len(m.text) for m in thread.messages if m.status == MessageStatus.STREAMING
        }
        return self._thread_frames(thread, following)

    def _thread_frames(self, thread: ThreadView, following: bool, notice: str | None = None) -> str:
        items = render_fragment("assistant/_thread_items.html", thread=thread)
        title = render_fragment("assistant/_title.html", thread=thread)
        return (
            sse(partial("#chat-thread", "outerHTML", items))
            + _foot_frame(thread.foot, following=following, notice=notice)
            + sse(partial("#chat-title", "outerHTML", title))
        )

    def absorb(self, events: list[tuple[str, Progress]]) -> None:
        """Learn what a page that saw ``events`` shows, without drawing anything (for a
        reconnect that resumes after them)."""
        for _entry_id, event in events:
            match event:
                case MessageSaved(message_id) if message_id in self.known:
                    self.shown.pop(message_id, None)  # its second report: drawn whole
                case MessageSaved(message_id):
                    self.known.add(message_id)
                case TextStreamed(message_id, offset, text):
                    end = offset + len(text)
                    self.shown[message_id] = max(self.shown.get(message_id, 0), end)

    def text(self, message_id: int, offset: int, text: str) -> str:
        """Streamed text, less what this page already shows of it."""
        # A reply the page has, with no text shown yet, was drawn empty while streaming.
        shown = self.shown.get(message_id, 0 if message_id in self.known else None)
        if shown is None:
            return ""  # not on this page
        end = offset + len(text)
        if end <= shown:
            return ""
        fresh = text[max(0, shown - offset) :]
        self.shown[message_id] = end
        return sse(partial(f"#msg-{message_id}-text", "beforeend", str(escape(fresh))))

    def message(self, message_id: int) -> str:
        """A message saved: drawn anew in place, or added to the thread."""
        message = self._message(message_id)
        if message is None:
            return ""
        view = message_view(message)
        if message.status == MessageStatus.STREAMING:
            # Drawn empty: the log holds every token of it from its start, so the page shows
            # exactly what the entries read so far say (which a resume rebuilds).
            view.text = ""
            self.shown[message.id] = 0
        else:
            self.shown.pop(message.id, None)
        html = render_fragment("assistant/_message.html", m=view)
        frames = ""
        if message.role == MessageRole.USER:
            frames += sse(
                partial("#chat-conversation-id", "outerHTML", _id_input(view.conversation_id))
            )
        if message.id in self.known:
            return frames + sse(partial(f"#msg-{message.id}", "outerHTML", html))
        self.known.add(message.id)
        return frames + sse(partial("#chat-thread", "beforeend", html))

    def call(self, call_id: int) -> str:
        """A card whose call changed status, drawn anew in place."""
        call = self._call(call_id)
        if call is None:
            return ""
        card = panel_card(call)
        view = card.call
        if view.mutates and view.status == ToolCallStatus.SUCCEEDED:
            self.changed = True
        html = render_fragment("assistant/_call.html", card=card)
        return sse(partial(f"#call-{view.id}", "outerHTML", html))

    def finish(
        self, status: str, error: str | None, whole: bool = False, notice: bool = False
    ) -> str:
        """The turn ended: the thread's foot and title as stored (the whole thread when
        ``whole``: a turn that died or broke off may have left anything), then ``done``
        (and ``error``). ``notice``: the error is said in the foot (no message says it)."""
        frames = sse(partial("#chat-live", "innerHTML", ""))  # a notice from before: gone
        shown = error if notice else None
        try:
            if whole or self.whole_at_end:
                thread = thread_view(self.principal, self.conversation_id)
                frames += self._thread_frames(thread, following=False, notice=shown)
            else:
                title, foot = thread_tail(self.principal, self.conversation_id)
                frames += _foot_frame(foot, notice=shown)
                html = render_fragment("assistant/_title.html", thread={"title": title})
                frames += sse(partial("#chat-title", "outerHTML", html))
        except AppError:
            pass  # the conversation is gone (deleted in another tab): nothing to redraw
        frames += sse(
            partial("#chat-conversation-id", "outerHTML", _id_input(self.conversation_id))
        )
        if self.changed:
            frames += sse("{}", event="changed")
        data: dict[str, Any] = {"conversation_id": self.conversation_id, "status": status}
        if status == TurnStatus.ERROR:
            frames += sse(json.dumps({**data, "message": error}), event="error")
        return frames + sse(json.dumps(data), event="done")


def _frames(
    watch: _Watch, events: list[tuple[str, Progress]], turn_id: str
) -> tuple[str, TurnFinished | None]:
    """Frames for a batch of events (consecutive text of one reply in one frame)."""
    out: list[str] = []
    pending: tuple[int, int, list[str]] | None = None  # message, offset, texts

    def flush() -> None:
        nonlocal pending
        if pending is not None:
            out.append(watch.text(pending[0], pending[1], "".join(pending[2])))
            pending = None

    finished: TurnFinished | None = None
    for _entry_id, event in events:
        if isinstance(event, TextStreamed):
            if pending is not None and pending[0] == event.message_id:
                pending[2].append(event.text)
                continue
            flush()
            pending = (event.message_id, event.offset, [event.text])
            continue
        flush()
        match event:
            case MessageSaved(message_id):
                out.append(watch.message(message_id))
            case CallChanged(call_id):
                out.append(watch.call(call_id))
            case TurnFinished():
                finished = event
                break
    flush()
    frames = "".join(out)
    if events:
        # The batch's last id rides on a frame of its own, which htmx does not swap: a
        # reconnect resumes after everything this batch drew (or skipped as already drawn).
        frames += f"id: {turn_id}:{events[-1][0]}\n\n"
    return frames, finished


def _resume_point(log: ProgressLog, turn_id: str | None, last_event_id: str) -> str | None:
    """The log position after ``Last-Event-ID``, if it is one of this turn's."""
    if not turn_id or not last_event_id:
        return None
    given_turn, _, entry_id = last_event_id.partition(":")
    if given_turn == turn_id and log.valid_id(entry_id):
        return entry_id
    return None


def watch_turn(
    principal: Principal,
    conversation_id: int,
    turn_id: str | None,
    *,
    snapshot: bool,
    last_event_id: str = "",
    preface: str = "",
    drawn: tuple[int, ...] = (),
    whole_at_end: bool = False,
) -> Response:
    """Stream a turn's progress from its log as SSE, until it finishes (``drawn``: messages
    the preface put on the page; ``whole_at_end``: the whole thread drawn at the end)."""
    log = progress_log()
    after = _resume_point(log, turn_id, last_event_id)
    watch = _Watch(principal, conversation_id, known=set(drawn), whole_at_end=whole_at_end)

    def generate() -> Iterator[str]:
        yield ": stream open\n\n"
        if preface:
            yield preface
        try:
            if snapshot and after is None:
                yield _released(watch.snapshot(following=turn_id is not None))
            if turn_id is None:
                yield _released(watch.finish(TurnStatus.DONE, None))
                return
            if after is not None:
                watch.absorb(_entries_until(log, turn_id, after))
            yield from _follow(watch, log, turn_id, after)
        except SQLAlchemyError as err:
            if not is_outage(err):
                raise
            yield _database_lost(watch.conversation_id)

    # The request's own session is done: hand its connection back before the long stream.
    db.session.close()
    response = Response(stream_with_context(generate()), mimetype="text/event-stream")
    response.headers["Cache-Control"] = "no-cache, no-transform"
    response.headers["X-Accel-Buffering"] = "no"
    return response


def _database_lost(conversation_id: int) -> str:
    """The stream's end when the database stopped answering while it ran: say so, with a
    Retry that draws the conversation again (and follows its turn, if one still runs)."""
    with suppress(SQLAlchemyError):  # its connection went with the database: nothing to hand back
        db.session.remove()
    current_app.logger.warning("database unavailable while following a turn")
    retry = url_for("assistant.conversation", conversation_id=conversation_id)
    notice = render_fragment(
        "assistant/_notice.html", message=UNAVAILABLE, kind="error", retry_url=retry
    )
    data = {"conversation_id": conversation_id, "status": TurnStatus.ERROR}
    return (
        sse(partial("#chat-live", "innerHTML", notice))
        + sse(json.dumps({**data, "message": UNAVAILABLE}), event="error")
        + sse(json.dumps(data), event="done")
    )


def _released(frames: str) -> str:
    """``frames``, once the session that drew them has handed its connection back (a slow
    client must not hold one while they are written)."""
    db.session.remove()
    return frames


def _read(
    log: ProgressLog, turn_id: str, after: str | None, timeout: float
) -> list[tuple[str, Progress]]:
    """The turn's next events; none when the broker fails (after waiting as long, so a
    broker that is down is not asked again at once)."""
    try:
        return progress.read(log, turn_id, after, timeout)
    except Exception:
        current_app.logger.warning("progress log read failed", exc_info=True)
        time.sleep(timeout)
        return []


def _follow(watch: _Watch, log: ProgressLog, turn_id: str, after: str | None) -> Iterator[str]:
    while True:
        entries = _read(log, turn_id, after, WAIT_SECONDS)
        if not entries:
            yield KEEPALIVE
            if not _turn_gone(watch.conversation_id, turn_id):
                continue
            # Gone: it either just ended (its "finished" is on its way) or its process died.
            entries = _read(log, turn_id, after, 0.5)
            if not entries:
                yield _released(watch.finish(TurnStatus.INTERRUPTED, None, whole=True))
                return
        after = entries[-1][0]
        frames, finished = _frames(watch, entries, turn_id)
        yield _released(frames)
        if finished is not None:
            # A turn that broke off left its reply and calls settled, unreported: draw all.
            raised = finished.raised
            yield _released(
                watch.finish(finished.status, finished.error, whole=raised, notice=raised)
            )
            return


def _entries_until(log: ProgressLog, turn_id: str, until: str) -> list[tuple[str, Progress]]:
    """The turn's events from its start through ``until``, without waiting."""
    out: list[tuple[str, Progress]] = []
    cursor: str | None = None
    while True:
        batch = progress.read(log, turn_id, cursor, 0)
        for entry_id, entry in batch:
            out.append((entry_id, entry))
            if entry_id == until:
                return out
        if not batch:
            return out
        cursor = batch[-1][0]


def _turn_gone(conversation_id: int, turn_id: str) -> bool:
    """Whether the turn no longer holds the conversation (it ended, or its process died)."""
    try:
        return lease.live_turn(conversation_id) != turn_id
    finally:
        db.session.remove()
