"""Browser tests: the app on a loopback port, Debian's Chromium driven by Playwright, and the
real AnthropicProvider talking to the fake Messages API."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here is of the ``browser`` tier (``make test-fast`` leaves it out)."""
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def chromium():
    from playwright.sync_api import expect, sync_playwright

    # Assertions wait for what they expect as long as page actions do (Playwright's 5 s is
    # short for a whole turn on a machine that runs both databases' suites, four test
    # processes and their Chromiums, side by side). A passing wait ends when its state shows.
    expect.set_options(timeout=20_000)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class Session:
    """A signed-in browser page plus the network log of every request it made."""

    def __init__(self, page, base: str, requests: list[str], errors: list[str]):
        self.page = page
        self.base = base
        self.requests = requests
        self.errors = errors

    def goto(self, path: str) -> None:
        self.page.goto(self.base + path)

    def login(self, email: str, password: str) -> Session:
        self.goto("/login")
        self.page.get_by_label("Email").fill(email)
        self.page.get_by_label("Password").fill(password)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_url(f"{self.base}/models")
        return self

    def foreign_requests(self) -> list[str]:
        own = urlsplit(self.base).netloc
        return [u for u in self.requests if urlsplit(u).netloc not in (own, "")]

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


@pytest.fixture
def browse(chromium, live_server, fake_anthropic) -> Iterator:
    """``browse(email)`` opens a signed-in page; pages close after the test."""
    contexts = []

    def _open(
        email: str, password: str | None = None, base: str | None = None, **context_options
    ) -> Session:
        from tests.factories import PASSWORD

        context = chromium.new_context(**context_options)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(20_000)
        requests: list[str] = []
        errors: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on(
            "console",
            lambda m: errors.append(m.text) if m.type == "error" else None,
        )
        session = Session(page, base or live_server, requests, errors)
        return session.login(email, password or PASSWORD)

    yield _open
    for context in contexts:
        context.close()


class CuttableProxy:
    """A TCP proxy in front of the app whose open connections can be cut at once, as a
    proxy or a network change does to a long response."""

    def __init__(self, target: str):
        import socket
        import threading

        self.target = urlsplit(target)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections: list = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((self.target.hostname, self.target.port))
            with self.lock:
                self.connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source, sink) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(2)

    def cut(self) -> None:
        """Reset every connection open now (new ones go through as before)."""
        import socket
        import struct

        with self.lock:
            connections, self.connections = self.connections, []
        for sock in connections:
            try:
                # A reset, not a clean close: the browser sees the stream break off.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                # shutdown() wakes the thread blocked reading it (close() alone would not).
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            except OSError:
                pass

    def close(self) -> None:
        self.cut()
        self.listener.close()


@pytest.fixture
def proxy(live_server) -> Iterator[CuttableProxy]:
    cuttable = CuttableProxy(live_server)
    yield cuttable
    cuttable.close()
