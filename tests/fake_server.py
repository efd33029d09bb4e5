"""The one base of the loopback fakes (model APIs, webhooks): a threaded HTTP server on a free
port that stops at once when asked."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

# How often ``serve_forever`` looks for a shutdown request; the stdlib's 0.5 s made every
# fake's teardown wait about a quarter of a second.
POLL_SECONDS = 0.01


class LoopbackServer:
    """``start()`` serves ``handler`` on 127.0.0.1 and a free port until ``stop()``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
