"""The sandboxes ``records_query`` keeps between calls, per process, within a memory bound.

Copying a million visible rows into a sandbox takes about a second; the next question
over the same rows should not pay it again. A sandbox is kept for one caller as they are
now (``CallerKey``: org, user or key, role and permissions, so anything that changes what
they may see makes another key) over one catalogue of tables (a field added or changed
makes another key too). Inside it, each copied table remembers the ``data_version`` of
its model when it was copied: every write to a model's records sets a new one in the
writing transaction, by the database's own triggers (``records/models.py``), so a write
from any process, instance or raw SQL shows up as a different version and the table is
copied again before it is read. A version is read before the rows it labels, so a copy
is never older than its label says (at worst newer, which only makes the next call copy
again).

The cache holds at most ``RECORDS_QUERY_CACHE_MB`` of copied pages in all; past it the
least recently used sandboxes are closed (one in use is closed when its query ends). A
sandbox bigger than the bound alone is used once and closed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from monark.core.rbac import Principal


class Closable(Protocol):
    """What the cache keeps: something with a size in bytes that can be closed."""

    def size(self) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class CallerKey:
    """Who a sandbox's rows were copied for, as far as it decides what they may see: the
    same person through the assistant or directly shares one, anyone else never does."""

    org_id: int
    user_id: int | None
    actor: tuple[str, int] | None  # an API key or an automation: no user
    role: str
    permissions: frozenset[str]

    @classmethod
    def of(cls, principal: Principal) -> CallerKey:
        """The key of ``principal`` as it is now (its rights read with this request)."""
        actor = None if principal.user_id is not None else principal_actor(principal)
        return cls(
            principal.org_id, principal.user_id, actor, principal.role, principal.permissions
        )


def principal_actor(principal: Principal) -> tuple[str, int]:
    """The acting key or automation of a principal without a user."""
    return (principal.actor_kind, principal.actor_id)


@dataclass
class Entry:
    """One kept sandbox, used by one query at a time."""

    key: Hashable
    sandbox: Any
    family: Hashable = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    size: int = 0
    dropped: bool = False  # evicted while in use: closed by its user


class SandboxCache:
    """Sandboxes by key, least recently used first out, within ``limit`` bytes in all."""

    def __init__(self, limit: int):
        self.limit = limit
        self._entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.peak = 0  # the most bytes held at once (the bench prints it)

    @property
    def held(self) -> int:
        """Bytes of the sandboxes kept now."""
        with self._lock:
            return sum(e.size for e in self._entries.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @contextmanager
    def use(
        self, key: Hashable, build: Callable[[], Closable], family: Hashable = None
    ) -> Iterator[Any]:
        """The sandbox of ``key`` (built by ``build`` when none is kept), held for the block
        by this caller alone; afterwards kept at its new size, or closed past the bound.
        Building one closes the others of its ``family`` (the same person's copies under an
        older catalogue or other rights)."""
        entry = self._take(key, build, family)
        try:
            yield entry.sandbox
        except BaseException:
            # A failed fill may leave a table half copied: never reuse it.
            self._forget(entry)
            raise
        finally:
            self._settle(entry)

    def clear(self) -> None:
        """Close every kept sandbox (tests; a deployment never needs it)."""
        self._drop(lambda entry: True)

    def _take(self, key: Hashable, build: Callable[[], Closable], family: Hashable) -> Entry:
        while True:
            with self._lock:
                entry = self._entries.get(key)
                if entry is None:
                    entry = Entry(key, None, family)
                    entry.lock.acquire()
                    self._entries[key] = entry
                    fresh = True
                else:
                    self._entries.move_to_end(key)
                    fresh = False
            if fresh:
                if family is not None:
                    self._drop(lambda e, new=entry: e.family == family and e is not new)
                try:
                    entry.sandbox = build()
                except BaseException:
                    self._forget(entry)  # a caller waiting on it takes another
                    entry.lock.release()
                    raise
                return entry
            entry.lock.acquire()
            if not entry.dropped:
                return entry
            entry.lock.release()  # closed while we waited: take another

    def _forget(self, entry: Entry) -> None:
        with self._lock:
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]
            entry.dropped = True

    def _settle(self, entry: Entry) -> None:
        """Keep the entry at its new size (or drop it past the bound), then make room."""
        if not entry.dropped:
            entry.size = entry.sandbox.size()
            if entry.size > self.limit:
                self._forget(entry)
        with self._lock:
            # Decided under the cache's lock, as an eviction decides whom to close.
            closing = entry.dropped
            if not closing:
                self.peak = max(self.peak, sum(e.size for e in self._entries.values()))
        if closing:
            entry.sandbox.close()
        entry.lock.release()
        if not closing:
            self._evict(keep=entry)

    def _evict(self, keep: Entry) -> None:
        """Close the least recently used sandboxes until the rest fit the bound."""
        with self._lock:
            total = sum(e.size for e in self._entries.values())
            over = []
            for entry in self._entries.values():
                if total <= self.limit:
                    break
                if entry is not keep:
                    over.append(entry)
                    total -= entry.size
        self._drop(lambda entry: any(entry is e for e in over))

    def _drop(self, chosen: Callable[[Entry], bool]) -> None:
        """Forget the chosen entries and close them; one in use is only marked, and closed
        by its query as it ends (``_settle`` decides that under the same lock)."""
        victims = []
        with self._lock:
            for entry in [e for e in self._entries.values() if chosen(e)]:
                del self._entries[entry.key]
                entry.dropped = True
                if entry.lock.acquire(blocking=False):
                    victims.append(entry)
        for entry in victims:
            try:
                if entry.sandbox is not None:
                    entry.sandbox.close()
            finally:
                entry.lock.release()
