"""A real loopback HTTP server that records webhook POSTs and answers a chosen status."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fake_server import LoopbackServer

RESET = -1  # an answer that is no answer: the connection is reset


class WebhookServer(LoopbackServer):
    """``start()`` on 127.0.0.1 and a free port; ``received`` holds each POST's JSON body.

    ``answers`` (statuses, or ``RESET``) are given one per request, in order; after them
    every request gets ``status``. A 3xx answer says ``Location: /elsewhere``.
    """

    def __init__(self, status: int = 200, delay: float = 0.0, answers: list[int] | None = None):
        self.status = status
        self.delay = delay  # seconds each answer takes (a slow receiver)
        self.answers = list(answers or [])
        self.received: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                at = time.monotonic()
                with server.arrived:
                    answer = server.answers.pop(0) if server.answers else server.status
                if server.delay:
                    time.sleep(server.delay)
                with server.arrived:
                    server.received.append(
                        {
                            "path": self.path,
                            "headers": dict(self.headers),
                            "json": json.loads(body),
                            "body": body.decode(),
                            "at": at,
                        }
                    )
                    server.arrived.notify_all()
                if answer == RESET:
                    # SO_LINGER 0: close sends a reset instead of an orderly end.
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.connection.close()
                    self.close_connection = True
                    return
                self.send_response(answer)
                self.send_header("Content-Type", "application/json")
                if 300 <= answer < 400:
                    self.send_header("Location", "/elsewhere")
                self.end_headers()
                self.wfile.write(b'{"ok": true}' if answer < 400 else b'{"error": "nope"}')

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

        super().__init__(Handler)

    @property
    def url(self) -> str:
        return f"{super().url}/hook"

    def wait_for(self, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        """The requests received, once there are ``count`` of them."""
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.received) >= count, timeout), (
                f"{len(self.received)} of {count} webhooks arrived"
            )
            return list(self.received)
