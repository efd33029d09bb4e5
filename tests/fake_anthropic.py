"""A fake Anthropic Messages API on loopback, speaking the real streaming event sequence.

Point the real SDK at it with ``base_url`` (or ``ANTHROPIC_BASE_URL``). It plays a
``Script`` (see ``llm_script``), records every request body and header, and can pause
between chunks so tests can watch tokens arrive. With ``context_limit`` set it counts each
request's tokens (a quarter of its JSON body), refuses one past the limit as the API does
("prompt is too long", recorded in ``refused``, no script step used) and reports that count
as the request's input tokens.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fake_server import LoopbackServer
from tests.llm_script import Call, Fail, HttpFail, Say, Script

DEFAULT_MODELS = ["claude-sonnet-5-5", "claude-haiku-4-5"]


class FakeAnthropic(LoopbackServer):
    def __init__(
        self,
        script: Script | None = None,
        chunk_delay: float = 0.0,
        context_limit: int | None = None,
    ):
        self.script = script or Script()
        self.context_limit = context_limit
        # When set, asked first with each request body: a step to answer it with instead of
        # the script's next (say, every summary request), or None for the script's.
        self.answer: Callable[[dict[str, Any]], list | None] | None = None
        self.refused: list[dict[str, Any]] = []  # bodies refused as too long
        self.chunk_delay = chunk_delay
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.usage = {
            "input_tokens": 120,
            "cache_read_input_tokens": 90,
            "cache_creation_input_tokens": 30,
            "output_tokens": 0,
        }
        self.gate: threading.Event | None = None  # when set, each chunk waits for it
        # When set, a request is accepted and then answered only once this is set (a hung
        # provider): nothing at all is sent back until then.
        self.hang: threading.Event | None = None
        self.arrivals = 0  # requests received, counted before any hang
        self.models = list(DEFAULT_MODELS)  # what GET /v1/models lists, in one page
        super().__init__(self._handler())

    # ---- the HTTP side ------------------------------------------------------------------

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.split("?")[0].rstrip("/") != "/v1/models":
                    error = {"type": "not_found_error", "message": self.path}
                    self._json(404, {"type": "error", "error": error})
                    return
                data = [
                    {
                        "type": "model",
                        "id": m,
                        "display_name": m,
                        "created_at": "2026-01-01T00:00:00Z",
                    }
                    for m in fake.models
                ]
                first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
                page = {"data": data, "has_more": False, "first_id": first, "last_id": last}
                self._json(200, page)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.arrivals += 1
                if fake.hang is not None:
                    fake.hang.wait(120)
                if self.path.rstrip("/") != "/v1/messages":
                    self._json(
                        404,
                        {
                            "type": "error",
                            "error": {"type": "not_found_error", "message": self.path},
                        },
                    )
                    return
                tokens = fake.tokens_of(body)
                if fake.context_limit is not None and tokens > fake.context_limit:
                    fake.refused.append(body)
                    message = f"prompt is too long: {tokens} tokens > {fake.context_limit} maximum"
                    self._json(
                        400,
                        {
                            "type": "error",
                            "error": {"type": "invalid_request_error", "message": message},
                        },
                    )
                    return
                fake.requests.append(body)
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                step = (fake.answer(body) if fake.answer else None) or fake.script.next()
                failure = next((i for i in step if isinstance(i, HttpFail)), None)
                if failure is not None:
                    self._json(
                        failure.status,
                        {
                            "type": "error",
                            "error": {"type": failure.type, "message": failure.said(self.headers)},
                        },
                    )
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    fake._stream(self, body, step)
                self.close_connection = True

            def _json(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    @staticmethod
    def tokens_of(body: dict) -> int:
        """A request's size in tokens, as this fake counts them."""
        return len(json.dumps(body)) // 4

    def _send(self, handler: BaseHTTPRequestHandler, event: str, data: dict) -> None:
        frame = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
        handler.wfile.write(frame)
        handler.wfile.flush()

    def _pause(self) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        if self.chunk_delay:
            time.sleep(self.chunk_delay)

    def _stream(self, handler: BaseHTTPRequestHandler, body: dict, step: list) -> None:
        send = lambda event, data: self._send(handler, event, {"type": event, **data})  # noqa: E731
        usage = dict(self.usage)
        if self.context_limit is not None:  # the request's own size, none of it cached
            usage |= {
                "input_tokens": self.tokens_of(body),
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            }
        send(
            "message_start",
            {
                "message": {
                    "id": f"msg_{len(self.requests)}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "fake"),
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage,
                }
            },
        )
        send("ping", {})
        output = 0
        index = 0
        for item in step:
            if isinstance(item, Say):
                send(
                    "content_block_start",
                    {"index": index, "content_block": {"type": "text", "text": ""}},
                )
                for piece in item.pieces():
                    self._pause()
                    send(
                        "content_block_delta",
                        {"index": index, "delta": {"type": "text_delta", "text": piece}},
                    )
                    output += 1
                send("content_block_stop", {"index": index})
                index += 1
            elif isinstance(item, Call):
                send(
                    "content_block_start",
                    {
                        "index": index,
                        "content_block": {
                            "type": "tool_use",
                            "id": item.id,
                            "name": item.name,
                            "input": {},
                        },
                    },
                )
                raw = json.dumps(item.input)
                for start in range(0, len(raw), 7):  # arguments arrive in pieces, as for real
                    send(
                        "content_block_delta",
                        {
                            "index": index,
                            "delta": {
                                "type": "input_json_delta",
                                "partial_json": raw[start : start + 7],
                            },
                        },
                    )
                send("content_block_stop", {"index": index})
                index += 1
                output += 5
            elif isinstance(item, Fail):
                self._pause()
                send("error", {"error": {"type": item.type, "message": item.message}})
                return
        has_call = any(isinstance(i, Call) for i in step)
        send(
            "message_delta",
            {
                "delta": {
                    "stop_reason": "tool_use" if has_call else "end_turn",
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": output},
            },
        )
        send("message_stop", {})
