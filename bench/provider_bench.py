"""What the server adds to each provider's stream: per token, and before the first token.

For each provider adapter (Anthropic, OpenAI and compatible, Gemini), an org is pointed at
that provider's fake (``tests/fake_*.py``, the real wire format, spoken to by the real SDK)
in its AI settings, and the app (werkzeug's threaded server on 127.0.0.1, a temporary
SQLite file) serves ``POST /chat/stream`` to a raw-socket client. The fake sends one marked
token every 5 ms (``t000001 ``, ``t000002 ``, …) and records, on one system-wide clock,
when it wrote each token and when it began to answer; the client records when each
token's frame arrives.

- **added per token**: arrival at the client minus the fake's write (loopback included:
  about 0.03 ms here, so this is an upper bound of what the server adds);
- **first token added**: (the fake begins answering - the client posted) + (the first
  token's arrival - its write): the server's own part of the time to first token.

Targets (exit 1 when missed), for every adapter: under 1 ms per token at the median, and
under 50 ms added to the first token at the median.

Run from the repo root (about half a minute)::

    .venv/bin/python bench/provider_bench.py
    .venv/bin/python bench/provider_bench.py --turns 10 --tokens 200
"""

from __future__ import annotations

import argparse
import re
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _measure import throwaway_database, verdict  # noqa: E402
from chat_bench import serve  # noqa: E402
from flask import Flask  # noqa: E402

from monark import create_app  # noqa: E402
from monark.chat.runtime import set_llm_provider  # noqa: E402
from tests import factories  # noqa: E402
from tests.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.fake_gemini import FakeGemini  # noqa: E402
from tests.fake_openai import FakeOpenAI  # noqa: E402
from tests.llm_script import Say, Script  # noqa: E402
from tests.test_providers import use_provider  # noqa: E402

MARK = re.compile(rb"t\d{6}")
TOKEN_FRAME = re.compile(rb'hx-swap="beforeend">((?:t\d{6} ?)+)</hx-partial>')
PER_TOKEN_MS, FIRST_TOKEN_MS = 1.0, 50.0
CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)"')


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class Recording:
    """A fake's output stream that notes when each marked token (and the answer) went out."""

    def __init__(self, wfile: Any, times: Timings):
        self.wfile = wfile
        self.times = times

    def write(self, data: bytes) -> int:
        written = self.wfile.write(data)
        self.wfile.flush()
        at = now_ns()
        self.times.began = self.times.began or at
        for marker in MARK.findall(data):
            self.times.sent.setdefault(marker.decode(), at)
        return written

    def flush(self) -> None:
        self.wfile.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wfile, name)


@dataclass
class Timings:
    began: int = 0
    sent: dict[str, int] = field(default_factory=dict)


def timed(cls: type, times: Timings) -> Any:
    """The fake, with its handlers writing through ``Recording``."""

    class Timed(cls):  # type: ignore[misc, valid-type]
        def _handler(self):
            handler = super()._handler()

            class Recorded(handler):  # type: ignore[misc, valid-type]
                def setup(self) -> None:
                    super().setup()
                    self.wfile = Recording(self.wfile, times)

            return Recorded

    return Timed()


class Endless(Script):
    """Every step: ``tokens`` marked words."""

    def __init__(self, tokens: int):
        super().__init__()
        self.tokens = tokens
        self.n = 0

    def next(self) -> list:
        words = []
        for _ in range(self.tokens):
            self.n += 1
            words.append(f"t{self.n:06d}")
        return [Say(" ".join(words))]


def post(port: int, cookie: str, csrf: str, text: str) -> tuple[int, dict[str, int]]:
    """POST /chat/stream on a raw socket; when it was sent, and each marker's arrival."""
    body = urlencode({"text": text, "csrf_token": csrf}).encode()
    head = (
        f"POST /chat/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
        f"Cookie: session={cookie}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    arrivals: dict[str, int] = {}
    buf = bytearray()
    scanned = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(head + body)
        posted = now_ns()
        while data := sock.recv(65536):
            at = now_ns()
            buf += data
            for match in TOKEN_FRAME.finditer(buf, scanned):
                for marker in MARK.findall(match.group(1)):
                    arrivals.setdefault(marker.decode(), at)
                scanned = match.end()
    return posted, arrivals


def sign_in(app: Flask, port: int) -> tuple[str, str]:
    import httpx2

    client = httpx2.Client(base_url=f"http://127.0.0.1:{port}")
    page = client.get("/login").text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    client.post(
        "/login",
        data={"email": "member@acme.test", "password": factories.PASSWORD, "csrf_token": token},
    )
    csrf = CSRF_META.search(client.get("/models").text).group(1)
    return client.cookies["session"], csrf


@dataclass
class Result:
    provider: str
    per_token: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)


def measure(app: Flask, port: int, org_id: int, name: str, cls: type, base: Any, args) -> Result:
    times = Timings()
    fake = timed(cls, times).start()
    fake.script = Endless(args.tokens)
    fake.chunk_delay = 0.005
    result = Result(name)
    try:
        with app.app_context():
            set_llm_provider(None, app)
            use_provider(app, org_id, name, base(fake))
        cookie, csrf = sign_in(app, port)
        post(port, cookie, csrf, "warm up")  # imports the SDK, builds its client
        for turn in range(args.turns):
            times.began, times.sent = 0, {}
            posted, arrivals = post(port, cookie, csrf, f"turn {turn}")
            tokens = sorted(times.sent, key=times.sent.get)
            if len(arrivals) < len(tokens) or not tokens:
                raise SystemExit(f"{name}: {len(arrivals)} of {len(tokens)} tokens arrived")
            result.per_token += [(arrivals[m] - times.sent[m]) / 1e6 for m in tokens]
            first = tokens[0]
            result.first.append(
                ((times.began - posted) + (arrivals[first] - times.sent[first])) / 1e6
            )
    finally:
        fake.stop()
    return result


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=100)
    args = parser.parse_args(argv)
    fakes = {
        "anthropic": (FakeAnthropic, lambda f: f.url),
        "openai": (FakeOpenAI, lambda f: f.url + "/v1"),
        "gemini": (FakeGemini, lambda f: f.url),
    }

    def build(url: str) -> Flask:
        return create_app(
            {
                "SQLALCHEMY_DATABASE_URI": url,
                "SECRET_KEY": "bench",
                "PASSWORD_HASH_METHOD": factories.FAST_HASH,
                "CHAT_LLM_ALLOW_PRIVATE": True,
                "CHAT_LLM_MAX_RETRIES": 0,
            }
        )

    results = []
    with throwaway_database("", build) as (app, _log), serve(app) as port:
        with app.app_context():
            org_id = factories.make_world().a.org.id
        for name, (cls, base) in fakes.items():
            print(f"  {name} ...", flush=True)
            results.append(measure(app, port, org_id, name, cls, base, args))
    return report(results, args)


def report(results: list[Result], args) -> int:
    print()
    print(
        f"per provider: {args.turns} turns x {args.tokens} tokens, a token every 5 ms, "
        "through POST /chat/stream"
    )
    head = (
        f"   {'provider':<10} {'added/token med ms':>18} {'p99 ms':>8} "
        f"{'first token added med ms':>24} {'max ms':>8}"
    )
    print(head)
    print("   " + "-" * (len(head) - 3))
    checks = []
    for r in results:
        med, p99 = statistics.median(r.per_token), pct(r.per_token, 0.99)
        first_med, first_max = statistics.median(r.first), max(r.first)
        print(f"   {r.provider:<10} {med:18.3f} {p99:8.3f} {first_med:24.1f} {first_max:8.1f}")
        checks.append(
            (
                f"{r.provider}: under {PER_TOKEN_MS:g} ms per token (got {med:.3f})",
                med < PER_TOKEN_MS,
            )
        )
        checks.append(
            (
                f"{r.provider}: under {FIRST_TOKEN_MS:g} ms added to the first token "
                f"(got {first_med:.1f})",
                first_med < FIRST_TOKEN_MS,
            )
        )
    return verdict(checks)


if __name__ == "__main__":
    sys.exit(main())
