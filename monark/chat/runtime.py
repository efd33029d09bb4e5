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

from monark.chat.ai_settings import ResolvedAi, resolve
from monark.chat.llm.providers import ProviderConfig
from monark.chat.llm.types import LlmProvider
from monark.chat.llm.unavailable import UnavailableProvider
from monark.chat.tools import ChatToolExecutor, NoTools

_KEY = "monark.chat"


@dataclass
class ChatRuntime:
    executor: ChatToolExecutor = field(default_factory=NoTools)
    # A provider for every org (tests, benchmarks); None: each org's own, as configured.
    override: LlmProvider | None = None
    adapters: dict[ProviderConfig, LlmProvider] = field(default_factory=dict)
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


def _adapter(resolved: ResolvedAi) -> LlmProvider:
    if resolved.problem or resolved.descriptor is None:
        return UnavailableProvider(resolved.problem or "No model provider is set.")
    state = runtime()
    adapter = state.adapters.get(resolved.config)
    if adapter is None:
        with state.lock:
            adapter = state.adapters.get(resolved.config)
            if adapter is None:
                adapter = state.adapters[resolved.config] = resolved.descriptor.create(
                    resolved.config
                )
    return adapter


def provider_for(org_id: int | None, config: Any | None = None) -> tuple[LlmProvider, ResolvedAi]:
    """The provider an org's turn talks to (its own settings over the deployment's), and
    what it was resolved from; adapters are built once per configuration and kept."""
    resolved = resolve(org_id, config if config is not None else current_app.config)
    override = runtime().override
    return (override if override is not None else _adapter(resolved)), resolved


def llm_provider(config: Any | None = None) -> LlmProvider:
    """The deployment's provider (no org's settings)."""
    return provider_for(None, config)[0]


def set_llm_provider(provider: LlmProvider | None, app: Flask | None = None) -> None:
    """Use ``provider`` for every org (``None``: each org's own again)."""
    state = runtime(app)
    with state.lock:
        state.override = provider
        state.adapters.clear()


def provider_problem(org_id: int | None = None, config: Any | None = None) -> str | None:
    """What keeps an org's provider from answering, if anything (say, no API key)."""
    check = getattr(provider_for(org_id, config)[0], "problem", None)
    return check() if check is not None else None
