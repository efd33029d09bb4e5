"""Two real instances sharing one Redis limiter admit exactly N calls per minute of one API
key between them (used by ``tests/test_limits_instances.py`` and ``bench/limits_bench.py``)."""

from __future__ import annotations

import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx2
import redis

from tests.instances import REDIS_URL, Client, deployment

NEW_TOKEN = re.compile(r'id="new-token">([^<]+)<')


@dataclass
class Admitted:
    """How many calls each instance let through, and how many were refused."""

    limit: int
    sent: int
    admitted: tuple[int, int]
    refused: int


def new_key(owner: Client) -> str:
    """A member API key, made on the API keys page."""
    page = owner.post(
        "/settings/api-keys", {"name": f"limits {uuid.uuid4().hex[:6]}", "role": "member"}
    )
    return NEW_TOKEN.search(page.text).group(1)


def two_instances_admit(limit: int, sent: int) -> Admitted:
    """Start two instances on one Redis (a key prefix of their own), send ``sent`` calls of
    one key at once, alternating between them, and count the answers."""
    prefix = f"monark-test-{uuid.uuid4().hex[:10]}"
    settings = {
        "RATELIMIT_STORAGE_URI": REDIS_URL,
        "RATELIMIT_KEY_PREFIX": prefix,
        "LIMIT_API_PER_MINUTE": str(limit),
    }
    try:
        with deployment(2, broker=False, **settings) as running:
            token = new_key(Client(running[0].url))
            urls = [running[i % 2].url + "/api/v1/models" for i in range(sent)]
            headers = {"Authorization": f"Bearer {token}"}

            def call(url: str) -> tuple[str, int]:
                return url, httpx2.get(url, headers=headers, timeout=30).status_code

            with ThreadPoolExecutor(16) as pool:
                answers = list(pool.map(call, urls))
            per = tuple(
                sum(1 for url, code in answers if code == 200 and url.startswith(i.url))
                for i in running.instances
            )
            refused = sum(1 for _, code in answers if code == 429)
            return Admitted(limit, sent, per, refused)  # type: ignore[arg-type]
    finally:
        store = redis.Redis.from_url(REDIS_URL)
        for key in store.scan_iter(f"*{prefix}*"):
            store.delete(key)
