"""A real loopback HTTP server that records webhook POSTs and answers a chosen status."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fake_server import LoopbackServer


class WebhookServer(LoopbackServer):
    """``start()`` on 127.0.0.1 and a free port; ``received`` holds each POST's JSON body."""

    def __init__(self, status: int = 200, delay: float = 0.0):
        self.status = status
        self.delay = delay  # seconds each answer takes (a slow receiver)
        self.received: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if server.delay:
                    time.sleep(server.delay)
                server.received.append(
                    {"path": self.path, "headers": dict(self.headers), "json": json.loads(body)}
                )
                self.send_response(server.status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"ok": true}')

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

        super().__init__(Handler)

    @property
    def url(self) -> str:
        return f"{super().url}/hook"
