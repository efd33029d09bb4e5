"""The assistant's SSE streaming: token latency, CPU per token, concurrent turns, memory.

Every part runs against the real app served by gunicorn (``--worker-class gthread --workers 1
--threads N``) as a subprocess on 127.0.0.1, with the real ``AnthropicProvider`` (the official
SDK) pointed at the fake Messages API of ``tests/fake_anthropic.py`` running in this process.
The database is a temporary SQLite file prepared with ``flask --app app db upgrade`` and
``flask --app app seed-demo``; the clients sign in as ada@acme.test (owner).

1. What the server adds between a provider token and the bytes on the socket.
   Every text_delta the fake sends carries a unique marker (``t000001 ``, ``t000002 ``, ...),
   and the fake records when it flushed each one. A raw-socket client posts to
   ``/chat/stream`` and records when each marker's SSE frame arrives. Both timestamps are
   taken in this process with ``time.clock_gettime_ns(CLOCK_MONOTONIC)`` (system-wide on
   Linux, so the clock is the same one whichever process reads it). The baseline is the same
   fake read directly by the same kind of raw client (fake -> client, no app); turns of the
   two paths alternate. App-added latency per token = (arrival - send, through the app)
   minus the baseline median. One stream at a time, one token every 5 ms, 100 tokens per
   turn, the first 50 ms after the request (a model's time to first token, short of any real
   one's), after a warm-up turn (the first turn imports the SDK). Tokens that come within one
   frame interval (25 ms) of the last frame go out together in the next (at a token every 5 ms
   most wait); a reply's first token never does. Also printed: the bytes of a text frame (the
   SSE frame, and on the wire with HTTP chunked framing), and tokens per frame.

2. CPU per streamed token. ``--cpu RATE:STREAMS,...`` (default 16 streams at 20 tokens a
   second, 8 at 200): that many turns stream long replies at once, and the gunicorn worker's
   CPU over a window in which they only stream (none starts or ends) is divided by the
   tokens delivered in it. Beside it, the SDK alone: one thread of this process reading the
   fake at the same rate as the adapter reads it (``Stream.raw_events``, each event's JSON),
   its thread CPU per token: the floor the official SDK sets. With py-spy installed (the
   dev extra) it also says where a token's CPU goes: the CPU of each worker thread by role
   (provider reader, turn, watcher, lease keeper), and py-spy's samples of the threads
   holding the GIL, counted by the code they are in (the SDK, the loop, the progress log,
   rendering, SSE and the socket, the database).

3. How many concurrent streaming turns one gunicorn process holds while the records page
   (``GET /models/tasks/records``, signed in, a full HTML page) keeps p95 under 200 ms.
   The fake streams 40 tokens at 50 ms, so a turn lasts ~2 s. At each level, that many
   client threads post turns back to back (each continues its own conversation) while
   another thread requests the records page every 75 ms. Printed per level: the records
   latency, the turns completed in the window and their duration, the token latency
   (fake send -> frame on the client's socket) of every stream, the CPU used by the
   gunicorn worker and by this process (in cores), its resident memory, and the errors,
   with the app's own error lines from gunicorn's log. Levels ramp 0 (records alone), 1,
   16, 32, 64, 96 and 128 and stop after the first failing level (p95 >= 200 ms or any
   error). The worker's CPU per streamed token here is its CPU beyond what the records
   probe alone costs at level 0, over the tokens delivered in the window: with 2 s turns it
   carries each turn's own cost (sending, storing, drawing), which part 2 leaves out.

   Each streaming turn holds one gunicorn request thread for its whole duration (plus a
   turn thread and a provider reader), so ``--threads`` (default 160) is set above the
   highest level and is not the limit measured here. With ``--threads T`` a process can
   stream at most T - 1 turns before pages queue behind them: ``--threads 8 --levels
   0,4,7,8`` shows it.

4. Memory: the worker's resident set idle (after the first parts) and at the busiest level
   of part 3, and from the two what one conversation that streams holds.

Targets (exit 1 when missed): a reply's first token is not held back (the app adds < 1 ms
at the median) and no token waits past a frame (< 25 ms added at the median); at most
0.3 ms of CPU per token at 20 tokens a second and 0.1 ms at 200; and the process holds at
least ``--min-streams`` (default 128) concurrent turns with the records page p95 under
200 ms and no errors.

The machine matters: the app is one Python process (one core's worth of Python at most)
and this process runs the fake provider and every client on the same machine; other load
on the machine shows up in the tails. ``--wal`` puts the SQLite file in WAL mode (which the
app does not do) to compare; ``--log FILE`` keeps gunicorn's log.

Run from the repo root (about five minutes)::

    .venv/bin/python bench/stream_bench.py
    .venv/bin/python bench/stream_bench.py --cpu 20:64,200:16 --levels 0,32,64 --wal
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import itertools
import json
import os
import re
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _measure import verdict  # noqa: E402

from tests.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.llm_script import Say, Script  # noqa: E402

VENV_BIN = ROOT / ".venv" / "bin"
HOST = "127.0.0.1"
EMAIL, PASSWORD = "ada@acme.test", "monark-demo"
RECORDS_PATH = "/models/tasks/records"
RECORDS_P95_MS = 200.0
ADDED_MEDIAN_MS = 1.0  # a reply's first token: never held back
FRAME_MS = 25.0  # what comes within one frame interval goes out as one frame
FIRST_TOKEN_S = 0.05  # the fake's time to a reply's first token
# CPU per streamed token, at (tokens a second per stream): at most (ms).
CPU_TARGETS = {20: 0.3, 200: 0.1}

MARKER = re.compile(r"t\d{6}")
# A token's frame through the app, and through the fake directly.
# (A frame through the app may carry several tokens that came faster than it was written.)
APP_FRAME = re.compile(rb">((?:t\d{6} ?)+)</hx-partial>\n\n")
FAKE_FRAME = re.compile(rb'"text": "(t\d{6}) ?"\}\}\n\n')
DONE = re.compile(rb'event: done\ndata: \{"conversation_id": (\d+|null), "status": "(\w+)"')
CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')
CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)"')
SESSION_COOKIE = re.compile(r"\bsession=([^;]+)")


def now_ns() -> int:
    """CLOCK_MONOTONIC: one system-wide clock on Linux, whichever process reads it."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ---- the fake provider, instrumented ----------------------------------------------------


class MarkedScript(Script):
    """Never runs out: every step is one text of ``tokens`` uniquely marked words."""

    def __init__(self, tokens: int):
        super().__init__()
        self.tokens = tokens
        self._ids = itertools.count(1)

    def next(self) -> list:
        with self._lock:
            ids = [next(self._ids) for _ in range(self.tokens)]
        return [Say(" ".join(f"t{i:06d}" for i in ids))]  # pieces "t000001 ", "t000002 ", …


class TimedFake(FakeAnthropic):
    """The fake Messages API, noting when each marked text_delta was flushed to its socket."""

    def __init__(self, tokens: int, chunk_delay: float):
        super().__init__(MarkedScript(tokens), chunk_delay)
        self.sent: dict[str, int] = {}
        self.recording = False

    def _send(self, handler: Any, event: str, data: dict) -> None:
        if event == "content_block_start" and self.chunk_delay:
            # A model takes a while to its first token (real ones hundreds of ms); meanwhile
            # the app draws the empty reply, which a first token sent at once would wait for.
            time.sleep(FIRST_TOKEN_S)
        super()._send(handler, event, data)
        if self.recording and event == "content_block_delta":
            match = MARKER.search(data["delta"].get("text", ""))
            if match:
                self.sent[match.group()] = now_ns()

    def configure(self, tokens: int, chunk_delay: float, recording: bool) -> None:
        self.script.tokens = tokens  # type: ignore[attr-defined]
        self.chunk_delay = chunk_delay
        self.recording = recording
        self.sent.clear()
        self.requests.clear()
        self.headers.clear()


# ---- the app under gunicorn -------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def run_flask(args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(
        [str(VENV_BIN / "flask"), "--app", "app", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise SystemExit(f"flask {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


@contextlib.contextmanager
def gunicorn(env: dict[str, str], threads: int, log_path: Path) -> Iterator[tuple[int, int]]:
    port = free_port()
    command = [
        str(VENV_BIN / "gunicorn"),
        "--worker-class",
        "gthread",
        "--workers",
        "1",
        "--threads",
        str(threads),
        "--bind",
        f"{HOST}:{port}",
        "--timeout",
        "120",
        "app:app",
    ]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"gunicorn exited with {proc.returncode}:\n{log_path.read_text()}")
            try:
                conn = http.client.HTTPConnection(HOST, port, timeout=2)
                conn.request("GET", "/login")
                conn.getresponse().read()
                conn.close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("gunicorn did not answer within 30 s") from None
                time.sleep(0.1)
        yield port, proc.pid
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


# ---- clients ------------------------------------------------------------------------------


@dataclass
class Auth:
    cookie: str
    csrf: str


def sign_in(port: int) -> Auth:
    conn = http.client.HTTPConnection(HOST, port, timeout=10)

    def fetch(method: str, path: str, cookie: str, body: str | None = None):
        headers = {"Cookie": f"session={cookie}"} if cookie else {}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        text = response.read().decode()
        match = SESSION_COOKIE.search(response.getheader("Set-Cookie") or "")
        return response.status, text, match.group(1) if match else cookie

    _, page, cookie = fetch("GET", "/login", "")
    form = urlencode(
        {"email": EMAIL, "password": PASSWORD, "csrf_token": CSRF_INPUT.search(page).group(1)}
    )
    status, _, cookie = fetch("POST", "/login", cookie, form)
    if status != 302:
        raise SystemExit(f"sign-in as {EMAIL} answered {status}")
    status, page, cookie = fetch("GET", RECORDS_PATH, cookie)
    meta = CSRF_META.search(page)
    if status != 200 or meta is None:
        raise SystemExit(f"GET {RECORDS_PATH} answered {status} (or without a CSRF token)")
    conn.close()
    return Auth(cookie, meta.group(1))


@dataclass
class Reply:
    raw: bytes
    arrivals: dict[str, int]  # marker -> arrival time (ns)
    frames: list[tuple[str, int, int]]  # marker, frame start, frame end offsets in raw


def raw_post(
    port: int, path: str, headers: dict[str, str], body: bytes, frame: re.Pattern | None, timeout
) -> Reply:
    """POST over a plain socket (Connection: close) and read to EOF, timestamping markers."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {HOST}:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in {**headers, "Content-Length": str(len(body))}.items()]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    buf = bytearray()
    arrivals: dict[str, int] = {}
    frames: list[tuple[str, int, int]] = []
    scanned = 0
    deadline = time.monotonic() + timeout
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(request)
        while True:
            data = sock.recv(65536)
            arrived = now_ns()
            if not data:
                break
            buf += data
            if frame is not None:
                for match in frame.finditer(buf, scanned):
                    start = buf.rfind(b"data: ", 0, match.start())
                    for marker in MARKER.findall(match.group(1).decode()):
                        arrivals[marker] = arrived
                        frames.append((marker, start, match.end()))
                    scanned = match.end()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no end of response within {timeout} s")
    return Reply(bytes(buf), arrivals, frames)


def post_turn(
    port: int,
    auth: Auth,
    text: str,
    conversation_id: int | None,
    frame: re.Pattern | None = None,
    timeout: float = 60,
) -> tuple[Reply, int | None, str]:
    """One turn through POST /chat/stream: (reply, conversation id, status or error)."""
    body = urlencode(
        {
            "text": text,
            "conversation_id": "" if conversation_id is None else str(conversation_id),
            "page_route": RECORDS_PATH,
            "page_model": "tasks",
        }
    ).encode()
    headers = {
        "Cookie": f"session={auth.cookie}",
        "X-CSRFToken": auth.csrf,
        "HX-Request": "true",
        "Accept": "text/event-stream",
        "Content-Type": "application/x-www-form-urlencoded",
    }
    reply = raw_post(port, "/chat/stream", headers, body, frame, timeout)
    head = reply.raw.split(b"\r\n", 1)[0].decode(errors="replace")
    if not head.startswith("HTTP/1.1 200"):
        return reply, conversation_id, f"HTTP {head[9:]}"
    done = DONE.search(reply.raw)
    if done is None:
        return reply, conversation_id, "no done event"
    cid = None if done.group(1) == b"null" else int(done.group(1))
    return reply, cid, done.group(2).decode()


def direct_turn(fake_port: int, frame: re.Pattern) -> Reply:
    """The fake read directly (the baseline path)."""
    body = json.dumps(
        {
            "model": "bench",
            "max_tokens": 1024,
            "stream": True,
            "messages": [{"role": "user", "content": "Count."}],
        }
    ).encode()
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    return raw_post(fake_port, "/v1/messages", headers, body, frame, 60)


# ---- 1. token latency ----------------------------------------------------------------------


@dataclass
class TokenResult:
    tokens: int
    baseline_ms: list[float]
    app_ms: list[float]
    added_ms: list[float]
    first_added_ms: list[float]  # each reply's first token
    first_alone: float  # share of replies whose first frame carries only the first token
    tokens_per_frame: float
    sse_bytes: float
    wire_bytes: float
    fake_bytes: float
    chunk_delay_ms: float


def measure_tokens(port: int, auth: Auth, fake: TimedFake, turns: int, tokens: int) -> TokenResult:
    delay = 0.005
    fake.configure(tokens, delay, recording=False)
    _, cid, status = post_turn(port, auth, "warm up", None, APP_FRAME)  # imports the SDK
    if status != "done":
        raise SystemExit(f"warm-up turn failed: {status}")
    fake_port = int(fake.url.rsplit(":", 1)[1])
    direct_turn(fake_port, FAKE_FRAME)
    fake.configure(tokens, delay, recording=True)
    baseline: list[float] = []
    through_app: list[float] = []
    first_tokens: list[float] = []
    alone = 0
    frame_count = 0
    sse_sizes: list[int] = []
    wire_sizes: list[int] = []
    fake_sizes: list[int] = []
    for turn in range(turns):
        direct = direct_turn(fake_port, FAKE_FRAME)
        if len(direct.arrivals) != tokens:
            raise SystemExit(f"baseline turn saw {len(direct.arrivals)} of {tokens} tokens")
        for marker, arrived in direct.arrivals.items():
            baseline.append((arrived - fake.sent[marker]) / 1e6)
        fake_sizes += [end - start for _, start, end in direct.frames]

        reply, cid, status = post_turn(port, auth, f"count {turn}", cid, APP_FRAME)
        if status != "done" or len(reply.arrivals) != tokens:
            raise SystemExit(f"app turn: {status}, {len(reply.arrivals)} of {tokens} tokens")
        for marker, arrived in reply.arrivals.items():
            through_app.append((arrived - fake.sent[marker]) / 1e6)
        first = min(reply.arrivals)  # markers count up: the reply's first token
        first_tokens.append((reply.arrivals[first] - fake.sent[first]) / 1e6)
        first_end = next(end for marker, _, end in reply.frames if marker == first)
        alone += sum(1 for _, _, end in reply.frames if end == first_end) == 1
        frame_count += len({end for _, _, end in reply.frames})
        sse_sizes += list({end: end - start for _, start, end in reply.frames}.values())
        ends = sorted({end for _, _, end in reply.frames})  # a frame may carry several
        wire_sizes += [b - a for a, b in itertools.pairwise(ends)]
    fake.configure(tokens, 0.0, recording=False)
    base = statistics.median(baseline)
    first_added = [t - base for t in first_tokens]
    return TokenResult(
        tokens=len(through_app),
        baseline_ms=baseline,
        app_ms=through_app,
        added_ms=[t - base for t in through_app],
        first_added_ms=first_added,
        first_alone=alone / turns,
        tokens_per_frame=len(through_app) / max(1, frame_count),
        sse_bytes=statistics.median(sse_sizes),
        wire_bytes=statistics.median(wire_sizes),
        fake_bytes=statistics.median(fake_sizes),
        chunk_delay_ms=delay * 1000,
    )


# ---- 2. CPU per streamed token ------------------------------------------------------------

# Where a token's CPU goes, by the frames py-spy samples while the GIL is held: the first
# of these a stack names (innermost frame first) takes the sample.
COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    ("SDK event parsing + provider socket", ("anthropic/", "httpx2/", "httpcore2/", "h11/")),
    ("rendering (templates, Markdown)", ("jinja2/", "markdown_it/", "markupsafe/", "markdown.py")),
    ("database", ("sqlalchemy/", "sqlite3/", "psycopg/")),
    ("SSE encoding + client socket", ("gunicorn/", "werkzeug/", "flask/", "assistant/stream.py")),
    ("progress log + broker", ("core/broker.py", "turn/progress.py", "turn/run.py")),
    ("lease keeper, partial saves", ("turn/keeper.py", "turn/lease.py")),
    ("the loop (reader hand-off, frames)", ("chat/streaming.py", "chat/loop.py", "chat/llm/")),
]
ROLES = {  # a worker thread, by what its stack names
    "_pump": "provider reader (SDK, provider socket)",
    "run_turn": "turn (the loop, progress-log appends)",
    "watch_turn": "watcher (log reads, SSE, client socket)",
    "LeaseKeeper": "lease keeper (renewals, partial saves)",
}


@dataclass
class Steady:
    rate: int  # tokens a second per stream, asked of the fake
    streams: int
    window: float
    tokens: int = 0  # delivered in the window
    frames: int = 0
    app_cpu: float = 0.0  # worker CPU seconds in the window
    roles: Counter = field(default_factory=Counter)  # CPU seconds per thread role
    components: Counter = field(default_factory=Counter)  # py-spy samples per component
    sdk_floor_ms: float = 0.0  # the SDK alone, reading the same stream
    errors: Counter = field(default_factory=Counter)

    @property
    def cpu_ms(self) -> float:
        return self.app_cpu * 1000 / self.tokens if self.tokens else float("inf")


def worker_pid(master_pid: int) -> int:
    with open(f"/proc/{master_pid}/task/{master_pid}/children") as f:
        return int(f.read().split()[0])


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` (VmRSS), in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def py_spy() -> Path | None:
    found = VENV_BIN / "py-spy"
    return found if found.exists() else None


def thread_roles(pid: int) -> dict[int, str]:
    """Each thread of ``pid`` and its role, from one ``py-spy dump``."""
    spy = py_spy()
    if spy is None:
        return {}
    dump = subprocess.run([str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True)
    roles: dict[int, str] = {}
    for block in dump.stdout.split("\nThread ")[1:]:
        tid = int(block.split()[0], 0)
        roles[tid] = next((role for key, role in ROLES.items() if key in block), "other")
    return roles


def thread_cpu(pid: int, tids: list[int]) -> dict[int, float]:
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in tids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
            out[tid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def components(raw: Path) -> Counter:
    """py-spy's raw (collapsed) stacks, each sample counted for its component."""
    counts: Counter = Counter()
    if not raw.exists():
        return counts
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")[::-1]  # innermost first
        name = next(
            (
                label
                for frame in frames
                for label, keys in COMPONENTS
                if any(key in frame for key in keys)
            ),
            "other (threads, waits)",
        )
        counts[name] += int(n)
    return counts


def sdk_floor(fake: TimedFake, rate: int, seconds: float) -> float:
    """Thread CPU (ms) per token of the SDK alone reading the fake at ``rate`` tokens a
    second, as the adapter reads it (``Stream.raw_events`` and each event's JSON)."""
    import anthropic

    tokens = max(20, int(rate * seconds))
    fake.configure(tokens, 1 / rate, recording=False)
    client = anthropic.Anthropic(api_key="test", base_url=fake.url, max_retries=0)
    result: list[float] = []

    def read() -> None:
        stream = client.messages.create(
            model="bench",
            max_tokens=1024,
            messages=[{"role": "user", "content": "Count."}],
            stream=True,
        )
        start = time.thread_time()
        count = 0
        for event in anthropic.Stream.raw_events(stream.response):
            if event.event and event.data:
                event.json()
                count += event.event == "content_block_delta"
        result.append((time.thread_time() - start) * 1000 / max(1, count))

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(seconds + 60)
    client.close()
    return result[0] if result else float("nan")


def run_steady(
    port: int, master_pid: int, auth: Auth, fake: TimedFake, streams: int, rate: int, window: float
) -> Steady:
    """``streams`` turns streaming ``rate`` tokens a second each, for longer than the
    window: the worker's CPU over the window (no turn starts or ends in it), per token."""
    result = Steady(rate, streams, window)
    ramp = 1.0
    tokens = int((ramp + 1.5 + window + 3.0) * rate)
    fake.configure(tokens, 1 / rate, recording=True)
    replies: list[Reply] = []
    lock = threading.Lock()

    def one(delay: float) -> None:
        time.sleep(delay)
        try:
            reply, _, status = post_turn(
                port, auth, "count", None, APP_FRAME, timeout=tokens / rate + 60
            )
        except OSError as err:
            status, reply = f"{type(err).__name__}: {err}", None
        with lock:
            if reply is not None:
                replies.append(reply)
            if status != "done":
                result.errors[status[:80]] += 1

    threads = [
        threading.Thread(target=one, args=(ramp * i / streams,), daemon=True)
        for i in range(streams)
    ]
    begin = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(max(0.0, begin + ramp + 1.5 - time.monotonic()))
    worker = worker_pid(master_pid)
    roles = thread_roles(worker)
    spy = py_spy()
    raw = Path(tempfile.gettempdir()) / f"monark-stream-bench-{os.getpid()}-{rate}.txt"
    profiler = None
    if spy is not None:  # samples only while a thread holds the GIL: a measure of CPU
        command = [str(spy), "record", "--pid", str(worker), "--duration", str(int(window))]
        command += ["--rate", "200", "--gil", "--nonblocking", "--format", "raw", "-o", str(raw)]
        profiler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start_ns, cpu0, per0 = now_ns(), cpu_seconds(master_pid), thread_cpu(worker, list(roles))
    time.sleep(window)
    end_ns, cpu1, per1 = now_ns(), cpu_seconds(master_pid), thread_cpu(worker, list(roles))
    result.app_cpu = cpu1 - cpu0
    for tid, spent in per1.items():
        result.roles[roles[tid]] += spent - per0.get(tid, spent)
    if profiler is not None:
        profiler.wait(60)
        result.components = components(raw)
        raw.unlink(missing_ok=True)
    for thread in threads:
        thread.join(tokens / rate + 90)
    for reply in replies:
        arrived = reply.arrivals
        result.frames += len({end for m, _, end in reply.frames if start_ns <= arrived[m] < end_ns})
        result.tokens += sum(1 for t in reply.arrivals.values() if start_ns <= t < end_ns)
    result.sdk_floor_ms = sdk_floor(fake, rate, 4.0)
    return result


# ---- 3. concurrent turns ------------------------------------------------------------------


@dataclass
class Level:
    streams: int
    records_ms: list[float] = field(default_factory=list)
    records_errors: Counter = field(default_factory=Counter)
    turns: list[tuple[float, float]] = field(default_factory=list)  # (end time, duration s)
    turn_errors: Counter = field(default_factory=Counter)
    tokens: list[tuple[int, float]] = field(default_factory=list)  # (arrival ns, latency ms)
    window: tuple[float, float] = (0.0, 0.0)  # time.monotonic(), i.e. CLOCK_MONOTONIC
    app_cpu: float = 0.0  # gunicorn worker CPU, in cores, over the window
    bench_cpu: float = 0.0  # this process (fake provider and clients), in cores
    rss_mb: float = 0.0  # the worker's resident memory at the window's end

    @property
    def errors(self) -> int:
        return sum(self.records_errors.values()) + sum(self.turn_errors.values())

    @property
    def p95(self) -> float:
        return percentile(self.records_ms, 0.95) if self.records_ms else float("inf")

    @property
    def median(self) -> float:
        return statistics.median(self.records_ms) if self.records_ms else float("inf")

    @property
    def window_turns(self) -> list[float]:
        start, end = self.window
        return [d for t, d in self.turns if start <= t <= end]

    @property
    def window_token_ms(self) -> list[float]:
        start, end = self.window
        return [ms for arrived, ms in self.tokens if start <= arrived / 1e9 <= end]

    @property
    def ok(self) -> bool:
        return self.p95 < RECORDS_P95_MS and self.errors == 0

    def cpu_ms_per_token(self, idle_cpu: float, window: float) -> float | None:
        """The worker's CPU per streamed token, beyond what the records probe alone costs."""
        tokens = len(self.window_token_ms)
        if not tokens:
            return None
        return max(0.0, self.app_cpu - idle_cpu) * window * 1000 / tokens


def streamer(
    port: int, auth: Auth, sent: dict[str, int], level: Level, lock, stop, start_at, hard_end
):
    """Post turns back to back until ``stop`` (bounded by time and by count)."""
    time.sleep(max(0.0, start_at - time.monotonic()))
    cid = None
    for n in range(200):
        if stop.is_set() or time.monotonic() > hard_end:
            return
        t0 = time.monotonic()
        reply = None
        try:
            reply, cid, status = post_turn(port, auth, f"turn {n}", cid, APP_FRAME, timeout=60)
        except OSError as err:
            status = f"{type(err).__name__}: {err}"
        t1 = time.monotonic()
        with lock:
            if reply is not None:
                level.tokens += [
                    (arrived, (arrived - sent[marker]) / 1e6)
                    for marker, arrived in reply.arrivals.items()
                    if marker in sent
                ]
            if status == "done":
                level.turns.append((t1, t1 - t0))
            else:
                level.turn_errors[status[:80]] += 1
        if status != "done":
            time.sleep(0.2)  # do not spin against a refusing server


def records_probe(port: int, auth: Auth, level: Level, start: float, end: float, interval: float):
    """GET the records page every ``interval`` seconds between ``start`` and ``end``."""
    time.sleep(max(0.0, start - time.monotonic()))
    conn: http.client.HTTPConnection | None = None
    next_at = start
    for _ in range(int((end - start) / interval) + 2):
        if time.monotonic() >= end:
            break
        if conn is None:
            conn = http.client.HTTPConnection(HOST, port, timeout=30)
        t0 = time.perf_counter()
        try:
            conn.request("GET", RECORDS_PATH, headers={"Cookie": f"session={auth.cookie}"})
            response = conn.getresponse()
            response.read()
            elapsed = (time.perf_counter() - t0) * 1000
            if response.status == 200:
                level.records_ms.append(elapsed)
            else:
                level.records_errors[f"records HTTP {response.status}"] += 1
        except OSError as err:
            level.records_errors[f"records {type(err).__name__}: {err}"[:80]] += 1
            conn.close()
            conn = None
        next_at = max(next_at + interval, time.monotonic())
        time.sleep(max(0.0, next_at - time.monotonic()))
    if conn is not None:
        conn.close()


def cpu_seconds(master_pid: int) -> float:
    """CPU time (user + system) used so far by gunicorn's worker processes."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    with open(f"/proc/{master_pid}/task/{master_pid}/children") as f:
        children = f.read().split()
    for pid in children:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def run_level(
    port: int,
    master_pid: int,
    auth: Auth,
    fake: TimedFake,
    streams: int,
    window: float,
    interval: float,
) -> Level:
    level = Level(streams)
    lock = threading.Lock()
    stop = threading.Event()
    ramp = 2.0  # starts spread over one turn's length, so the turns do not run in lockstep
    begin = time.monotonic()
    measure_from = begin + ramp + 1.0
    measure_to = measure_from + window
    level.window = (measure_from, measure_to)
    threads = [
        threading.Thread(
            target=streamer,
            args=(
                port,
                auth,
                fake.sent,
                level,
                lock,
                stop,
                begin + ramp * i / max(1, streams),
                measure_to + 5,
            ),
            daemon=True,
        )
        for i in range(streams)
    ]
    probe = threading.Thread(
        target=records_probe,
        args=(port, auth, level, measure_from, measure_to, interval),
        daemon=True,
    )
    for thread in [*threads, probe]:
        thread.start()
    time.sleep(max(0.0, measure_from - time.monotonic()))
    app0, bench0 = cpu_seconds(master_pid), time.process_time()
    time.sleep(max(0.0, measure_to - time.monotonic()))
    app1, bench1 = cpu_seconds(master_pid), time.process_time()
    level.rss_mb = rss_mb(worker_pid(master_pid))
    level.app_cpu = (app1 - app0) / window
    level.bench_cpu = (bench1 - bench0) / window
    probe.join(window + ramp + 60)
    stop.set()
    for thread in threads:
        thread.join(70)
    return level


def log_errors(log_path: Path, seen: int) -> tuple[list[str], int]:
    """New error lines in gunicorn's log since offset ``seen``."""
    text = log_path.read_text(errors="replace")
    new = text[seen:]
    lines = [
        line.strip()
        for line in new.splitlines()
        if re.search(r"Error|Exception|Timeout|locked|WORKER TIMEOUT", line)
    ]
    return lines, len(text)


# ---- main ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=160, help="gunicorn --threads (160)")
    parser.add_argument(
        "--levels", default="0,1,16,32,64,96,128", help="concurrent turns to try, in order"
    )
    parser.add_argument(
        "--cpu",
        default="20:16,200:8",
        help="part 2: RATE:STREAMS pairs, tokens a second per stream and how many streams",
    )
    parser.add_argument("--window", type=float, default=8.0, help="seconds measured per level")
    parser.add_argument("--interval", type=float, default=0.075, help="records page period, s")
    parser.add_argument("--turns", type=int, default=6, help="turns per path for part 1")
    parser.add_argument("--tokens", type=int, default=100, help="tokens per turn for part 1")
    parser.add_argument(
        "--wal",
        action="store_true",
        help="put the SQLite file in WAL mode (a persistent pragma; the app does not set it)",
    )
    parser.add_argument("--log", help="copy gunicorn's log (with the app's tracebacks) here")
    parser.add_argument("--min-streams", type=int, default=128, help="target for part 3 (128)")
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if int(x) <= args.threads]

    fake = TimedFake(tokens=args.tokens, chunk_delay=0.0).start()
    try:
        with tempfile.TemporaryDirectory(prefix="monark-stream-bench-") as tmpdir:
            env = {
                **os.environ,
                "DATABASE_URL": f"sqlite:///{tmpdir}/bench.db",
                "SECRET_KEY": "bench",
                "ANTHROPIC_API_KEY": "test",
                "ANTHROPIC_BASE_URL": fake.url,
                "PYTHONUNBUFFERED": "1",
                # Many turns of one org and one user at once: what is measured is the
                # streaming path, not the rate limits (bench/limits_bench.py measures those).
                "RATELIMIT_ENABLED": "false",
                "LIMIT_TURNS_PER_ORG": "0",
            }
            t0 = time.perf_counter()
            run_flask(["db", "upgrade"], env)
            run_flask(["seed-demo"], env)
            if args.wal:
                with contextlib.closing(sqlite3.connect(f"{tmpdir}/bench.db")) as conn:
                    conn.execute("PRAGMA journal_mode=WAL")
            journal = "WAL" if args.wal else "rollback journal, the default"
            print(
                f"database: temporary SQLite ({journal}), "
                f"migrated and seeded in {time.perf_counter() - t0:.1f} s"
            )
            log_path = Path(tmpdir) / "gunicorn.log"
            with gunicorn(env, args.threads, log_path) as (port, master_pid):
                load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
                print(
                    f"gunicorn --worker-class gthread --workers 1 --threads {args.threads} "
                    f"on {HOST}:{port}; fake Anthropic on {fake.url}; {os.cpu_count()} CPUs, "
                    f"load average {load}"
                )
                auth = sign_in(port)
                print(f"part 1: {args.turns} turns x {args.tokens} tokens per path ...", flush=True)
                tokens = measure_tokens(port, auth, fake, args.turns, args.tokens)
                idle_rss = rss_mb(worker_pid(master_pid))
                steady: list[Steady] = []
                for pair in filter(None, args.cpu.split(",")):
                    rate, streams = (int(x) for x in pair.split(":"))
                    print(f"part 2: {streams} streams at {rate} tokens/s ...", flush=True)
                    steady.append(
                        run_steady(port, master_pid, auth, fake, streams, rate, args.window)
                    )
                print("part 3: ramping concurrent turns ...", flush=True)
                results: list[Level] = []
                seen = 0
                log_lines: dict[int, list[str]] = {}
                for streams in levels:
                    fake.configure(40, 0.05, recording=True)
                    level = run_level(
                        port, master_pid, auth, fake, streams, args.window, args.interval
                    )
                    results.append(level)
                    log_lines[streams], seen = log_errors(log_path, seen)
                    print(
                        f"  {streams:3d} streams: records p95 {level.p95:7.1f} ms, "
                        f"{len(level.window_turns)} turns, {level.errors} errors, "
                        f"app CPU {level.app_cpu:.0%}, bench CPU {level.bench_cpu:.0%}",
                        flush=True,
                    )
                    if not level.ok:
                        break
                if args.log:
                    Path(args.log).write_text(log_path.read_text(errors="replace"))
    finally:
        fake.stop()
    return report(args, tokens, steady, results, log_lines, idle_rss)


def report_steady(steady: list[Steady]) -> list[tuple[str, bool]]:
    """Part 2's table, where each rate's CPU goes, and its targets."""
    print()
    print("2. CPU per streamed token (the gunicorn worker's, over a window of steady streaming)")
    header = (
        f"   {'tokens/s':>8}  {'streams':>7}  {'got/s':>6}  {'tokens':>6}  {'per frame':>9}  "
        f"{'app CPU':>7}  {'CPU/token ms':>12}  {'SDK alone ms':>12}  {'target ms':>9}  result"
    )
    print(header)
    print("   " + "-" * (len(header) - 3))
    checks = []
    for run in steady:
        target = CPU_TARGETS.get(run.rate)
        ok = target is not None and run.cpu_ms <= target and not run.errors
        got = run.tokens / run.window / max(1, run.streams)
        print(
            f"   {run.rate:8d}  {run.streams:7d}  {got:6.0f}  {run.tokens:6d}  "
            f"{run.tokens / max(1, run.frames):9.1f}  {run.app_cpu / run.window:7.0%}  "
            f"{run.cpu_ms:12.3f}  {run.sdk_floor_ms:12.3f}  "
            f"{target if target is not None else '-':>9}  {'ok' if ok else 'FAIL'}"
        )
        for message, count in run.errors.most_common(3):
            print(f"            {count} x {message}")
        if target is not None:
            checks.append(
                (
                    f"at {run.rate} tokens/s, at most {target} ms of CPU per token "
                    f"(got {run.cpu_ms:.3f} ms; the SDK alone {run.sdk_floor_ms:.3f} ms)",
                    ok,
                )
            )
    for run in steady:
        if run.roles and run.tokens:
            print(f"   where a token's CPU goes at {run.rate} tokens/s, by thread (ms per token):")
            for role, spent in run.roles.most_common():
                print(f"     {spent * 1000 / run.tokens:7.3f}  {role}")
        total = sum(run.components.values())
        if total:
            print(f"   ... and by code, py-spy samples holding the GIL ({total}):")
            for name, count in run.components.most_common():
                print(f"     {count / total:6.1%}  {name}")
    if steady and not steady[0].roles:
        print("   (install py-spy, the dev extra, for where the CPU goes)")
    return checks


def report(
    args,
    tokens: TokenResult,
    steady: list[Steady],
    results: list[Level],
    log_lines: dict[int, list[str]],
    idle_rss: float,
) -> int:
    print()
    print(
        f"1. provider token -> bytes on the client's socket ({tokens.tokens} tokens, one stream, "
        f"a token every {tokens.chunk_delay_ms:.0f} ms)"
    )
    rows = [
        ("fake -> client (baseline, no app)", tokens.baseline_ms),
        ("fake -> app -> client", tokens.app_ms),
        ("added by the app (minus baseline median)", tokens.added_ms),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"   {'path':<{width}}  {'median ms':>9}  {'p99 ms':>7}  {'max ms':>7}")
    print(f"   {'-' * width}  {'-' * 9}  {'-' * 7}  {'-' * 7}")
    for name, values in rows:
        print(
            f"   {name:<{width}}  {statistics.median(values):9.3f}  "
            f"{percentile(values, 0.99):7.3f}  {max(values):7.3f}"
        )
    print(
        f"   bytes per text frame: {tokens.sse_bytes:.0f} B SSE frame, {tokens.wire_bytes:.0f} B "
        f"on the wire (chunked framing); the provider's frame: {tokens.fake_bytes:.0f} B"
    )
    print(
        f"   {tokens.tokens_per_frame:.1f} tokens per frame; a reply's first token: added "
        f"{statistics.median(tokens.first_added_ms):.3f} ms at the median "
        f"(max {max(tokens.first_added_ms):.3f} ms over {len(tokens.first_added_ms)} replies), "
        f"alone in its frame in {tokens.first_alone:.0%} of them"
    )

    steady_checks = report_steady(steady)
    print()
    print(
        f"3. concurrent streaming turns in one gunicorn gthread process (--threads {args.threads}),"
        f" 40 tokens x 50 ms per turn; records page every {args.interval * 1000:.0f} ms over "
        f"{args.window:.0f} s per level"
    )
    header = (
        f"   {'streams':>7}  {'records p95 ms':>14}  {'median ms':>9}  {'requests':>8}  "
        f"{'turns':>5}  {'turn s med/p95':>14}  {'token ms med/p99':>16}  {'app CPU':>7}  "
        f"{'CPU/token ms':>12}  {'bench CPU':>9}  {'RSS MB':>6}  {'errors':>6}  result"
    )
    print(header)
    print("   " + "-" * (len(header) - 3))
    idle_cpu = next((lv.app_cpu for lv in results if lv.streams == 0), 0.0)
    for level in results:
        per_token = level.cpu_ms_per_token(idle_cpu, args.window)
        cpu_token = f"{per_token:.2f}" if per_token is not None else "-"
        durations = level.window_turns
        turn = (
            f"{statistics.median(durations):.2f}/{percentile(durations, 0.95):.2f}"
            if durations
            else "-"
        )
        token_ms = level.window_token_ms
        token = (
            f"{statistics.median(token_ms):.1f}/{percentile(token_ms, 0.99):.1f}"
            if token_ms
            else "-"
        )
        print(
            f"   {level.streams:7d}  {level.p95:14.1f}  {level.median:9.1f}  "
            f"{len(level.records_ms):8d}  {len(durations):5d}  {turn:>14}  {token:>16}  "
            f"{level.app_cpu:7.0%}  {cpu_token:>12}  {level.bench_cpu:9.0%}  {level.rss_mb:6.0f}  "
            f"{level.errors:6d}  "
            f"{'ok' if level.ok else 'FAIL'}"
        )
        for message, count in (level.turn_errors + level.records_errors).most_common(3):
            print(f"            {count} x {message}")
        lines = log_lines.get(level.streams) or []
        for line, count in Counter(lines).most_common(3):
            print(f"            server log: {count} x {line[:110]}")
    held = 0
    for level in results:
        if not level.ok:
            break
        held = level.streams
    capped = all(lv.ok for lv in results)
    print(
        f"   held: {held} concurrent turns with records p95 < {RECORDS_P95_MS:.0f} ms"
        + (
            " (every level tried passed; raise --threads and --levels to go further)"
            if capped
            else ""
        )
    )

    print()
    print("4. memory (the worker's resident set)")
    print(f"   idle, after a turn: {idle_rss:.0f} MB")
    busiest = max((lv for lv in results if lv.streams), key=lambda lv: lv.streams, default=None)
    if busiest is not None:
        per = (busiest.rss_mb - idle_rss) / busiest.streams
        print(
            f"   at {busiest.streams} concurrent turns: {busiest.rss_mb:.0f} MB, so a conversation "
            f"that streams holds about {per * 1024:.0f} kB (its request, turn and reader threads, "
            "its progress log)"
        )
    added = statistics.median(tokens.added_ms)
    first = statistics.median(tokens.first_added_ms)
    checks = [
        (
            f"a reply's first token is not held back: alone in its frame in every reply (got "
            f"{tokens.first_alone:.0%}) and the app adds < {ADDED_MEDIAN_MS:.0f} ms at the "
            f"median (got {first:.3f} ms)",
            tokens.first_alone == 1 and first < ADDED_MEDIAN_MS,
        ),
        (
            f"tokens wait at most one frame: the app adds < {FRAME_MS:.0f} ms per token at the "
            f"median (got {added:.3f} ms)",
            added < FRAME_MS,
        ),
        (
            f"holds >= {args.min_streams} concurrent turns with records p95 < "
            f"{RECORDS_P95_MS:.0f} ms and no errors (got {held})",
            held >= args.min_streams,
        ),
        *steady_checks,
    ]
    return verdict(checks)


if __name__ == "__main__":
    sys.exit(main())
