"""The chat runtime, one per app (two apps in a process keep their own): what the host
installs, and the model providers, each built on first use."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from flask import Flask, current_app

from monark.chat.executor import AlwaysAsk, ChatToolExecutor, NoTools, ProposalGate
from monark.chat.host import AccessGate, Closed, Meter, PromptBuilder
from monark.chat.llm.common import UnavailableProvider, close_provider
from monark.chat.llm.providers import ProviderConfig, ProviderDescriptor
from monark.chat.llm.types import LlmProvider
from monark.core.rbac import Principal
from monark.core.settings import chat_settings

_KEY = "monark.chat"


class AdapterCache:
    """Adapters by configuration, the most recent kept, each dropped closed after its turns."""

    def __init__(self) -> None:
        self._adapters: OrderedDict[ProviderConfig, LlmProvider] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self, config: ProviderConfig, create: Callable[[ProviderConfig], LlmProvider], limit: int
    ) -> LlmProvider:
        """The adapter for ``config`` (made now if need be), keeping at most ``limit``."""
        dropped: list[LlmProvider] = []
        with self._lock:
            adapter = self._adapters.get(config)
            if adapter is not None:
                self._adapters.move_to_end(config)
                return adapter
            adapter = self._adapters[config] = create(config)
            while len(self._adapters) > max(1, limit):
                dropped.append(self._adapters.popitem(last=False)[1])
        for old in dropped:  # outside the lock: a close may wait for its adapter's lock
            close_provider(old)
        return adapter

    def clear(self) -> None:
        """Drop (and close) every adapter."""
        with self._lock:
            dropped = list(self._adapters.values())
            self._adapters.clear()
        for old in dropped:
            close_provider(old)


@dataclass(frozen=True)
class Limits:
    """How far a turn goes: its model steps, and the tokens of each reply."""

    max_steps: int
    max_tokens: int


@dataclass(frozen=True)
class ResolvedAi:
    """What a turn of an org runs with; ``problem`` says why it cannot, if it cannot."""

    config: ProviderConfig
    descriptor: ProviderDescriptor | None
    limits: Limits
    problem: str | None = None  # for everyone (the chat says it)
    detail: str | None = None  # the whole reason, for admins (addresses and settings)
    # For the host's meter and spend check alone: the model's price, the org's budget.
    price: object = None
    budget: object = None

    @property
    def admin_problem(self) -> str | None:
        return self.detail or self.problem


# The host's: which model an org's turns talk to (None: the deployment's), and why a
# principal's spend closes the assistant (given ``ResolvedAi.budget``), or None.
Resolver = Callable[[int | None], ResolvedAi]
SpendCheck = Callable[[Principal, object], str | None]


def no_limit(principal: Principal, budget: object = None) -> str | None:
    """The spend check of a host that installed none: nothing is capped."""
    return None


def no_model(org_id: int | None) -> ResolvedAi:
    """The resolver of a host that installed none: no model to talk to."""
    chat = chat_settings()
    config = ProviderConfig(
        chat.llm_provider,  # type: ignore[arg-type]
        chat.llm_model,
        connect_timeout=chat.llm_connect_timeout,
        read_timeout=chat.llm_timeout,
        max_retries=chat.llm_max_retries,
    )
    limits = Limits(chat.max_steps, chat.llm_max_tokens)
    return ResolvedAi(config, None, limits, "No model provider is set.")


@dataclass
class ChatRuntime:
    """What the host installs (each default: closed, or nothing), and the providers made."""

    executor: ChatToolExecutor = field(default_factory=NoTools)
    gate: ProposalGate = field(default_factory=AlwaysAsk)
    resolve: Resolver = no_model
    access: AccessGate = field(default_factory=Closed)
    prompt: PromptBuilder = field(default_factory=Closed)
    spend: SpendCheck = no_limit
    meter: Meter = field(default_factory=Closed)
    # A provider for every org (tests, benchmarks); None: each org's own, as configured.
    override: LlmProvider | None = None
    adapters: AdapterCache = field(default_factory=AdapterCache)
    lock: threading.Lock = field(default_factory=threading.Lock)


def install(app: Flask, installed: ChatRuntime) -> None:
    """Give ``app`` the host's runtime (called by the app factory)."""
    app.extensions[_KEY] = installed


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


def _adapter(resolved: ResolvedAi, limit: int) -> LlmProvider:
    if resolved.problem or resolved.descriptor is None:
        return UnavailableProvider(resolved.problem or "No model provider is set.")
    return runtime().adapters.get(resolved.config, resolved.descriptor.create, limit)


def provider_for(org_id: int | None) -> tuple[LlmProvider, ResolvedAi]:
    """The provider an org's turn talks to, and what it was resolved from."""
    resolved = runtime().resolve(org_id)
    override = runtime().override
    if override is not None:
        return override, resolved
    return _adapter(resolved, chat_settings().llm_client_cache), resolved


def llm_provider() -> LlmProvider:
    """The deployment's provider (no org's settings)."""
    return provider_for(None)[0]


def set_llm_provider(provider: LlmProvider | None, app: Flask | None = None) -> None:
    """Use ``provider`` for every org (``None``: each org's own again)."""
    state = runtime(app)
    with state.lock:
        state.override = provider
        state.adapters.clear()


def provider_problem(org_id: int | None = None) -> str | None:
    """What keeps an org's provider from answering, if anything (say, no API key)."""
    check = getattr(provider_for(org_id)[0], "problem", None)
    return check() if check is not None else None
