"""Serving a turn as Server-Sent Events for htmx's hx-sse extension.

The turn runs in a worker thread with its own app context and database session; it hands
plain view data to the response generator through a queue, and the generator renders
fragments. The generator holds no database session, so a long stream pins no connection.
A closed tab or the Stop button sets the turn's stop flag: the loop stops reading the
provider and keeps what arrived as an incomplete message.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from flask import Response, current_app, stream_with_context
from markupsafe import escape

from monark.assistant.thread import CallView, MessageView, call_view, message_view, thread_view
from monark.chat.hooks import TurnHooks
from monark.chat.loop import TurnResult
from monark.chat.models import Message, ToolCall
from monark.core.errors import AppError
from monark.core.rbac import Principal
from monark.extensions import db

KEEPALIVE_SECONDS = 15.0

# Stop flags of the turns this process is streaming, by conversation id.
_active: dict[int, threading.Event] = {}
_active_lock = threading.Lock()


def request_stop(conversation_id: int) -> bool:
    """Ask this process's running turn of a conversation to stop; False if none runs here."""
    with _active_lock:
        flag = _active.get(conversation_id)
    if flag is None:
        return False
    flag.set()
    return True


def sse(data: str = "", event: str | None = None) -> str:
    """One SSE frame; every line of ``data`` gets its own ``data:`` line."""
    lines = [f"event: {event}"] if event else []
    lines += [f"data: {line}" for line in data.replace("\r", "").split("\n")]
    return "\n".join(lines) + "\n\n"


def partial(target: str, swap: str, html: str) -> str:
    """An ``<hx-partial>`` that swaps ``html`` into ``target``."""
    return f'<hx-partial hx-target="{target}" hx-swap="{swap}">{html}</hx-partial>'


@dataclass
class _Item:
    kind: str  # token | message | call | finished | failed
    payload: Any = None


@dataclass
class _Finish:
    status: str
    conversation_id: int | None
    error: str | None
    thread: Any = None


class QueueHooks(TurnHooks):
    """Loop hooks that snapshot rows into view data and queue them for the generator."""

    def __init__(self, out: queue.Queue, stop: threading.Event):
        self.out = out
        self.stop = stop
        self.conversation_id: int | None = None

    def _register(self, conversation_id: int) -> None:
        if self.conversation_id is None:
            self.conversation_id = conversation_id
            with _active_lock:
                _active[conversation_id] = self.stop

    def on_text_delta(self, text: str) -> None:
        self.out.put(_Item("token", text))

    def on_message_saved(self, message: Message) -> None:
        self._register(message.conversation_id)
        self.out.put(_Item("message", message_view(message)))

    def on_tool_call(self, call: ToolCall) -> None:
        self._register(call.conversation_id)
        self.out.put(_Item("call", call_view(call)))

    def should_stop(self) -> bool:
        return self.stop.is_set()

    def release(self) -> None:
        if self.conversation_id is not None:
            with _active_lock:
                if _active.get(self.conversation_id) is self.stop:
                    del _active[self.conversation_id]


def stream_turn(
    principal: Principal, run: Callable[[TurnHooks], TurnResult], known_conversation: int | None
) -> Response:
    """Run ``run(hooks)`` in a worker and stream its progress as SSE."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    out: queue.Queue[_Item] = queue.Queue()
    stop = threading.Event()
    hooks = QueueHooks(out, stop)
    if known_conversation is not None:
        hooks._register(known_conversation)

    def work() -> None:
        with app.app_context():
            finish = _Finish("error", hooks.conversation_id, None)
            try:
                result = run(hooks)
                finish = _Finish(result.status, result.conversation_id, result.error)
            except AppError as err:
                finish.error = err.message
            except Exception:
                app.logger.exception("assistant turn failed")
                finish.error = "Something went wrong on our side. Retry in a moment."
            finally:
                hooks.release()
                cid = finish.conversation_id or hooks.conversation_id
                finish.conversation_id = cid
                try:
                    db.session.rollback()  # a failed flush leaves the session unusable
                    finish.thread = thread_view(principal, cid) if cid else None
                except Exception as err:  # the stream must still end
                    if not isinstance(err, AppError):
                        app.logger.exception("assistant thread view failed")
                    finish.thread = None
                finally:
                    db.session.remove()
                    out.put(_Item("finished", finish))

    worker = threading.Thread(target=work, name="assistant-turn", daemon=True)
    worker.start()
    renderer = _Renderer()

    def generate() -> Iterator[str]:
        yield ": stream open\n\n"
        finished = False
        try:
            while True:
                try:
                    item = out.get(timeout=KEEPALIVE_SECONDS)
                except queue.Empty:
                    yield ": keep-alive\n\n"
                    continue
                yield from renderer.frames(item)
                if item.kind == "finished":
                    finished = True
                    return
        finally:
            if not finished:  # the client went away: stop the turn, keep what arrived
                stop.set()

    # The request's own session is done: hand its connection back before the long stream.
    db.session.close()
    response = Response(stream_with_context(generate()), mimetype="text/event-stream")
    response.headers["Cache-Control"] = "no-cache, no-transform"
    response.headers["X-Accel-Buffering"] = "no"
    return response


@dataclass
class _Renderer:
    """Turns queued items into frames: live tokens, then persisted bubbles and cards."""

    live: str | None = None
    count: int = 0
    changed: bool = False  # a write went through: the page behind may need a refresh

    def _open_live(self) -> Iterator[str]:
        self.count += 1
        self.live = f"live-{threading.get_ident()}-{self.count}"
        html = render_fragment("assistant/_live.html", live_id=self.live)
        yield sse(partial("#chat-thread", "beforeend", html))

    def frames(self, item: _Item) -> Iterator[str]:
        if item.kind == "token":
            if self.live is None:
                yield from self._open_live()
            yield sse(partial(f"#{self.live}-text", "beforeend", str(escape(item.payload))))
        elif item.kind == "message":
            yield from self._message(item.payload)
        elif item.kind == "call":
            yield from self._call(item.payload)
        elif item.kind == "finished":
            yield from self._finish(item.payload)

    def _message(self, view: MessageView) -> Iterator[str]:
        html = render_fragment("assistant/_message.html", m=view)
        if view.role == "user":
            yield sse(
                partial("#chat-conversation-id", "outerHTML", _id_input(view.conversation_id))
            )
        if self.live is not None and view.role == "assistant":
            yield sse(partial(f"#{self.live}", "outerHTML", html))
            self.live = None
        else:
            yield sse(partial("#chat-thread", "beforeend", html))

    def _call(self, view: CallView) -> Iterator[str]:
        # Every call is on the page already: new ones came inside their message's bubble,
        # older ones (confirm, retry) were rendered with the thread.
        html = render_fragment("assistant/_call.html", c=view)
        if view.mutates and view.status == "SUCCEEDED":
            self.changed = True
        yield sse(partial(f"#call-{view.id}", "outerHTML", html))

    def _finish(self, finish: _Finish) -> Iterator[str]:
        if finish.thread is not None:
            html = render_fragment(
                "assistant/_thread_items.html", thread=finish.thread, turn_error=finish.error
            )
            yield sse(partial("#chat-thread", "outerHTML", html))
            title = render_fragment("assistant/_title.html", thread=finish.thread)
            yield sse(partial("#chat-title", "outerHTML", title))
        elif finish.error:
            html = render_fragment("assistant/_notice.html", message=finish.error, kind="error")
            yield sse(partial("#chat-thread", "beforeend", html))
        if finish.conversation_id:
            yield sse(
                partial("#chat-conversation-id", "outerHTML", _id_input(finish.conversation_id))
            )
        if self.changed:
            yield sse("{}", event="changed")
        data = json.dumps({"conversation_id": finish.conversation_id, "status": finish.status})
        if finish.status == "error":
            yield sse(json.dumps({**json.loads(data), "message": finish.error}), event="error")
        yield sse(data, event="done")


def render_fragment(name: str, **context: Any) -> str:
    """Render a partial without the page context processors (they would query the DB)."""
    return current_app.jinja_env.get_template(name).render(**context)


def _id_input(conversation_id: int | None) -> str:
    value = "" if conversation_id is None else str(int(conversation_id))
    return f'<input type="hidden" id="chat-conversation-id" name="conversation_id" value="{value}">'
