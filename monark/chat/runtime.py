"""The chat module's runtime, one per app: its tool executor and its model provider.

The host installs its executor when it builds the app (``install``); the provider is built
from the app's config on first use, so a deployment without a key starts normally and the
SDK is imported only when someone talks to the assistant. Both live on the app
(``app.extensions``), not in module globals: two apps in one process (tests, say) keep
their own, and a provider per org can come from here later.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, current_app

from monark.chat.llm import build_provider
from monark.chat.llm.types import LlmProvider
from monark.chat.tools import ChatToolExecutor, NoTools

_KEY = "monark.chat"


@dataclass
class ChatRuntime:
    executor: ChatToolExecutor = field(default_factory=NoTools)
    provider: LlmProvider | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def install(app: Flask, executor: ChatToolExecutor) -> None:
    """Give ``app`` the host's tool executor (called by the app factory)."""
    app.extensions[_KEY] = ChatRuntime(executor)


def runtime(app: Flask | None = None) -> ChatRuntime:
    """The app's runtime (one with no tools if the host installed none)."""
    app = app or current_app._get_current_object()  # type: ignore[attr-defined]
    found = app.extensions.get(_KEY)
    if found is None:
        found = app.extensions.setdefault(_KEY, ChatRuntime())
    return found


def tool_executor() -> ChatToolExecutor:
    """The current app's tool executor."""
    return runtime().executor


def llm_provider(config: Any | None = None) -> LlmProvider:
    """The current app's provider, built from its config on first use."""
    state = runtime()
    if state.provider is None:
        with state.lock:
            if state.provider is None:
                state.provider = build_provider(
                    config if config is not None else current_app.config
                )
    return state.provider


def set_llm_provider(provider: LlmProvider | None, app: Flask | None = None) -> None:
    """Replace the app's provider (``None``: rebuild from config at next use)."""
    state = runtime(app)
    with state.lock:
        state.provider = provider


def provider_problem(config: Any | None = None) -> str | None:
    """What keeps the provider from answering, if anything (say, no API key)."""
    check = getattr(llm_provider(config), "problem", None)
    return check() if check is not None else None
