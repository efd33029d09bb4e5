"""Progress logs: append-only event streams that a writer in one thread (or process, or
instance) appends to and any number of readers follow, from the start or after an id.

A running assistant turn appends its progress (tokens, saved messages, tool-call changes,
its end) to the log named after the turn; whoever watches it (the tab that sent the message,
a second tab, a reconnect with ``Last-Event-ID``, another instance) reads the same events.

Two implementations behind one small interface:
- ``LocalLog``: in this process's memory. Enough for one process (``flask run``, one
  gunicorn worker); a watcher on another process sees the turn through the database only.
- ``RedisLog``: Redis Streams (``XADD`` / ``XREAD BLOCK``), shared by every process and
  instance pointed at one Redis. Chosen when ``CHAT_BROKER_URL`` is set. The streamed text
  of replies sits in it for ``retention`` seconds: give it the care the database gets.

Entries are small JSON objects; ids are opaque strings that only compare within one log.
A log is kept for ``retention`` seconds after its last entry and then dropped.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Protocol

Entry = tuple[str, dict[str, Any]]

RETENTION_SECONDS = 15 * 60
MAX_ENTRIES = 50_000  # far above what one turn writes; a runaway writer cannot exhaust memory


class ProgressLog(Protocol):
    """An append-only log per key, readable from the start or after an entry id."""

    def append(self, key: str, entry: dict[str, Any]) -> str:
        """Add ``entry`` to the log ``key``; returns its id."""
        ...

    def read(self, key: str, after: str | None, timeout: float) -> list[Entry]:
        """Entries after ``after`` (all when None), waiting up to ``timeout`` s for one."""
        ...

    def valid_id(self, entry_id: str) -> bool:
        """Whether ``entry_id`` has the shape of this log's ids (client input is checked)."""
        ...

    def prune(self) -> int:
        """Drop logs idle past their retention now; how many (the upkeep job calls it)."""
        ...


class _Channel:
    """One log: its entries and the condition its readers wait on. Each has a lock of its
    own, so the turns (and watchers) of one process never queue behind each other's."""

    __slots__ = ("changed", "entries", "touched")

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.changed = threading.Condition(threading.Lock())
        self.touched = time.monotonic()


class LocalLog:
    """Logs in this process's memory; readers wait on a condition, not a poll."""

    def __init__(self, retention: float = RETENTION_SECONDS):
        self.retention = retention
        self._lock = threading.Lock()  # the set of logs (a log's own lock guards its entries)
        self._channels: dict[str, _Channel] = {}
        self._swept = time.monotonic()

    def _channel(self, key: str) -> _Channel:
        channel = self._channels.get(key)  # a dict read is atomic: no lock for a known log
        if channel is None:
            with self._lock:
                channel = self._channels.get(key)
                if channel is None:
                    channel = self._channels[key] = _Channel()
        return channel

    def _sweep(self, now: float) -> None:
        if now - self._swept < 60:
            return
        with self._lock:
            self._drop_idle(now)

    def _drop_idle(self, now: float) -> int:
        self._swept = now
        idle = [k for k, c in self._channels.items() if now - c.touched > self.retention]
        for key in idle:
            del self._channels[key]
        return len(idle)

    def prune(self) -> int:
        """Drop logs idle past the retention (appends do it too, but a quiet process
        appends nothing)."""
        with self._lock:
            return self._drop_idle(time.monotonic())

    def append(self, key: str, entry: dict[str, Any]) -> str:
        """Add ``entry`` and wake every reader of ``key``."""
        now = time.monotonic()
        self._sweep(now)
        channel = self._channel(key)
        with channel.changed:
            if len(channel.entries) < MAX_ENTRIES:
                channel.entries.append(entry)
            channel.touched = now
            channel.changed.notify_all()
            return str(len(channel.entries))

    def read(self, key: str, after: str | None, timeout: float) -> list[Entry]:
        """Entries after ``after``; blocks until one arrives or ``timeout`` passes."""
        start = int(after) if after and after.isdigit() else 0
        deadline = time.monotonic() + timeout
        channel = self._channel(key)
        with channel.changed:
            while len(channel.entries) <= start:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                channel.changed.wait(remaining)
            return [(str(i + 1), channel.entries[i]) for i in range(start, len(channel.entries))]

    def valid_id(self, entry_id: str) -> bool:
        """Ids are decimal positions."""
        return entry_id.isascii() and entry_id.isdigit() and len(entry_id) < 10


class RedisLog:
    """Logs as Redis Streams, shared by every process that uses the same Redis."""

    def __init__(self, url: str, retention: float = RETENTION_SECONDS):
        import redis  # only deployments that configure a broker need the client

        self.retention = int(retention)
        # Writers never wait long on a Redis that stopped answering (a turn must not hang on
        # its progress report); readers block by design, so their timeout is past BLOCK.
        self._writer = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        self._reader = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=30)
        self._prefix = "monark:progress:"

    def append(self, key: str, entry: dict[str, Any]) -> str:
        """``XADD`` the entry (and push the log's expiry) in one round trip."""
        name = self._prefix + key
        pipe = self._writer.pipeline(transaction=False)
        pipe.xadd(name, {"e": json.dumps(entry, separators=(",", ":"))}, maxlen=MAX_ENTRIES)
        pipe.expire(name, self.retention)
        entry_id, _ = pipe.execute()
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    def read(self, key: str, after: str | None, timeout: float) -> list[Entry]:
        """``XREAD BLOCK`` after ``after`` (from the start when None)."""
        name = self._prefix + key
        block = int(min(timeout, 20) * 1000)  # 0 would mean "forever" to Redis
        if block > 0:
            got = self._reader.xread({name: after or "0-0"}, count=2000, block=block)
        else:
            got = self._reader.xread({name: after or "0-0"}, count=2000)
        out: list[Entry] = []
        for _stream, entries in got or []:
            for entry_id, fields in entries:
                raw = fields.get(b"e") or fields.get("e")
                ident = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                out.append((ident, json.loads(raw)))
        return out

    def valid_id(self, entry_id: str) -> bool:
        """Stream ids are ``<milliseconds>-<sequence>``."""
        ms, dash, seq = entry_id.partition("-")
        digits = ms.isascii() and ms.isdigit() and seq.isascii() and seq.isdigit()
        return bool(dash) and digits and len(ms) <= 15 and len(seq) <= 10

    def prune(self) -> int:
        """Nothing to do: each stream expires ``retention`` after its last entry."""
        return 0


def progress_log_for(url: str) -> ProgressLog:
    """The log the deployment configured: Redis at ``url`` (``CHAT_BROKER_URL``), else local."""
    return RedisLog(url) if url else LocalLog()
