"""A database a test can take away and give back: the test database, reached by a path that
a test cuts (a real failure of the driver, not a mock).

On PostgreSQL the path is a TCP gate in front of the server: shut, nothing listens on its
port (connections are refused) and the connections it carried are cut. On SQLite it is a
directory link: shut, it points nowhere, and SQLite cannot open the file.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Flask
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from tests.databases import is_postgres


class TcpGate:
    """Forwards connections from a loopback port to ``upstream`` while open."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.port = 0
        self._listener: socket.socket | None = None
        self._carried: list[socket.socket] = []
        self._lock = threading.Lock()

    def open(self) -> TcpGate:
        if self._listener is not None:
            return self  # open already
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def shut(self) -> None:
        """Refuse new connections and cut the ones carried."""
        with self._lock:
            listener, self._listener = self._listener, None
            carried, self._carried = self._carried, []
        if listener is not None:
            with suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in carried:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # shut
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # shut meanwhile
                    client.close()
                    server.close()
                    return
                self._carried += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@dataclass(frozen=True)
class DatabaseSwitch:
    """``url`` reaches the test database while up; ``down()`` cuts it, ``up()`` mends it."""

    url: str
    down: Callable[[], None]
    up: Callable[[], None]


@contextmanager
def switchable_database(url: str) -> Iterator[DatabaseSwitch]:
    """A URL of the database ``url`` names that a test can cut and mend."""
    if is_postgres(url):
        parsed = make_url(url)
        gate = TcpGate((parsed.host or "127.0.0.1", parsed.port or 5432)).open()
        try:
            gated = parsed.set(host="127.0.0.1", port=gate.port)
            yield DatabaseSwitch(gated.render_as_string(hide_password=False), gate.shut, gate.open)
        finally:
            gate.shut()
        return
    real = Path(make_url(url).database or "").resolve()
    with tempfile.TemporaryDirectory() as tmp:
        link = Path(tmp) / "db"
        link.symlink_to(real.parent, target_is_directory=True)

        def down() -> None:
            link.unlink()
            link.symlink_to(Path(tmp) / "gone", target_is_directory=True)

        def up() -> None:
            link.unlink(missing_ok=True)
            link.symlink_to(real.parent, target_is_directory=True)

        yield DatabaseSwitch(f"sqlite:///{link / real.name}", down, up)


@contextmanager
def app_on_switchable_database(**overrides: Any) -> Iterator[tuple[Flask, DatabaseSwitch]]:
    """A second app on the test database (``DATABASE_URL``, as the session's app has it),
    reached by a path the test can cut; it is up again, and its engine gone, afterwards."""
    from monark import create_app
    from monark.extensions import db
    from tests import factories

    with switchable_database(os.environ["DATABASE_URL"]) as switch:
        # SQLite: each checkout opens the file anew, so a cut path fails at once.
        pool = {"pool_pre_ping": True} if is_postgres(switch.url) else {"poolclass": NullPool}
        app = create_app(
            {
                "TESTING": True,
                "SECRET_KEY": "test",
                "PASSWORD_HASH_METHOD": factories.FAST_HASH,
                "SQLALCHEMY_DATABASE_URI": switch.url,
                "SQLALCHEMY_ENGINE_OPTIONS": pool,
                **overrides,
            }
        )
        try:
            yield app, switch
        finally:
            switch.up()
            with app.app_context():
                db.session.remove()
                db.engine.dispose()
