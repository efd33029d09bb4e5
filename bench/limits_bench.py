"""Benchmark of the rate limits (``monark.core.ratelimit``, on Flask-Limiter).

* Added cost per request: the median server time (the Flask test client) of a page
  (``GET /login``) and of an API call counted per key (``GET /api/v1/models``, Bearer key,
  a limit too high to trip), with the limiter on and off (``RATELIMIT_ENABLED``), the two
  apps interleaved request by request on one database. Target: under 0.5 ms added per
  page (the API call, which counts in the storage, is shown beside it).
* Exact N across instances: two gunicorn instances sharing Redis (``--redis``, a key
  prefix of their own), a limit of N calls per minute of one key; ``--sent`` calls at once,
  alternating between them. Target: exactly N admitted in all.

Prints a table; exits 1 on a miss.

    .venv/bin/python bench/limits_bench.py
    .venv/bin/python bench/limits_bench.py --requests 1000 --limit 25 --sent 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _measure import add_database_argument, throwaway_database, verdict  # noqa: E402

from monark import create_app  # noqa: E402
from tests import factories  # noqa: E402

TARGET_MS = 0.5


def _app(url: str, enabled: bool):
    return create_app(
        {
            "SQLALCHEMY_DATABASE_URI": url,
            "SECRET_KEY": "bench",
            "RATELIMIT_ENABLED": enabled,
            "LIMIT_API_PER_MINUTE": 1_000_000,
            "LIMIT_SIGNIN_FAILURES": 1_000_000,
        }
    )


def _timed(client, url: str, headers: dict[str, str]) -> float:
    start = time.perf_counter()
    response = client.get(url, headers=headers)
    elapsed = (time.perf_counter() - start) * 1000
    assert response.status_code == 200, response.status_code
    return elapsed


def overhead_rows(args) -> list[tuple[str, float, float]]:
    """(case, median on, median off) for a page and a key's API call."""
    with throwaway_database(args.database_url, lambda url: _app(url, True)) as (setup, _):
        with setup.app_context():
            world = factories.make_org_world("Acme")
            key = factories.make_key(world.principal("owner"), "member", "bench key")
        # Two apps made alike (the setup one has a statement counter on its engine).
        url = setup.config["SQLALCHEMY_DATABASE_URI"]
        on, off = _app(url, True), _app(url, False)
        rows = []
        cases = [
            ("page GET /login", "/login", {}),
            ("API GET /api/v1/models", "/api/v1/models", {"Authorization": f"Bearer {key}"}),
        ]
        for name, url, headers in cases:
            times: dict[bool, list[float]] = {True: [], False: []}
            clients = {True: on.test_client(), False: off.test_client()}
            for i in range(args.requests + 20):
                for enabled in (True, False) if i % 2 else (False, True):
                    with (on if enabled else off).app_context():
                        took = _timed(clients[enabled], url, headers)
                    if i >= 20:  # warm-up left out
                        times[enabled].append(took)
            rows.append((name, statistics.median(times[True]), statistics.median(times[False])))
        return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_database_argument(parser)
    parser.add_argument("--requests", type=int, default=400, help="requests per case and side")
    parser.add_argument("--limit", type=int, default=20, help="N per minute, two instances")
    parser.add_argument("--sent", type=int, default=60, help="calls sent to the two instances")
    parser.add_argument("--redis", default=os.environ.get("MONARK_TEST_REDIS_URL", ""))
    parser.add_argument("--rows", default="overhead,instances")
    args = parser.parse_args(argv)
    if args.redis:
        os.environ["MONARK_TEST_REDIS_URL"] = args.redis
    checks: list[tuple[str, bool]] = []
    wanted = set(args.rows.split(","))
    if "overhead" in wanted:
        print()
        print(f"{'case':<26} {'on ms':>8} {'off ms':>8} {'added ms':>9}")
        for name, on, off in overhead_rows(args):
            print(f"{name:<26} {on:8.3f} {off:8.3f} {on - off:9.3f}")
            if name.startswith("page"):  # the target is per page; a key's call is shown
                checks.append((f"{name}: limiter adds < {TARGET_MS} ms", on - off < TARGET_MS))
    if "instances" in wanted:
        from tests.limits_check import two_instances_admit

        result = two_instances_admit(args.limit, args.sent)
        print()
        print(f"{'limit/min':>9} {'sent':>5} {'admitted A':>10} {'admitted B':>10} {'refused':>8}")
        a, b = result.admitted
        print(f"{result.limit:>9} {result.sent:>5} {a:>10} {b:>10} {result.refused:>8}")
        checks.append((f"two instances admit exactly {args.limit}", a + b == args.limit))
    return verdict(checks)


if __name__ == "__main__":
    sys.exit(main())
