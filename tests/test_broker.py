"""Progress logs, in memory and on Redis: the same behaviour behind one interface."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from monark.core.broker import LocalLog, RedisLog
from tests.instances import REDIS_URL


@pytest.fixture(params=["local", "redis"])
def log(request):
    return LocalLog() if request.param == "local" else RedisLog(REDIS_URL, retention=60)


def test_a_reader_gets_everything_from_the_start_and_then_after_an_id(log):
    key = uuid.uuid4().hex
    ids = [log.append(key, {"n": n}) for n in range(5)]
    got = log.read(key, None, 0.1)
    assert [e for _, e in got] == [{"n": n} for n in range(5)]
    assert [i for i, _ in got] == ids
    assert [e["n"] for _, e in log.read(key, ids[2], 0.1)] == [3, 4]
    assert all(log.valid_id(i) for i in ids)


def test_a_waiting_reader_wakes_when_an_entry_comes(log):
    key = uuid.uuid4().hex
    first = log.append(key, {"n": 0})
    threading.Timer(0.2, lambda: log.append(key, {"n": 1})).start()
    started = time.monotonic()
    got = log.read(key, first, 5)
    assert [e for _, e in got] == [{"n": 1}]
    assert time.monotonic() - started < 2


@pytest.mark.realtime
def test_a_reader_with_nothing_new_returns_empty_after_its_timeout(log):
    key = uuid.uuid4().hex
    last = log.append(key, {"n": 0})
    started = time.monotonic()
    assert log.read(key, last, 0.3) == []
    assert 0.25 <= time.monotonic() - started < 2
    assert log.read(uuid.uuid4().hex, None, 0) == []


@pytest.mark.parametrize("bad", ["", "x", "1-", "-1", "1-x", "١٢", "\u00b2", "9" * 40])
def test_ids_from_clients_are_checked(log, bad):
    assert not log.valid_id(bad)
