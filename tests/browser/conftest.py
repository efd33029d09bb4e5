"""Browser tests: the app on a loopback port, Debian's Chromium driven by Playwright, and the
real AnthropicProvider talking to the fake Messages API."""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def chromium():
    from playwright.sync_api import sync_playwright

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

    def _open(email: str, password: str | None = None, **context_options) -> Session:
        from tests.factories import PASSWORD

        context = chromium.new_context(**context_options)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(10_000)
        requests: list[str] = []
        errors: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on(
            "console",
            lambda m: errors.append(m.text) if m.type == "error" else None,
        )
        return Session(page, live_server, requests, errors).login(email, password or PASSWORD)

    yield _open
    for context in contexts:
        context.close()
