"""What a model provider is (``ProviderDescriptor``) and how one is reached
(``ProviderConfig``): the types the catalogue (``llm.providers``) and the adapters share.

The adapters import this module, never the catalogue: the catalogue imports them (each
only when its adapter is first built) and fills ``FACTORIES``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from monark.chat.llm.types import LlmProvider

ProviderId = Literal[
    "anthropic",
    "openai",
    "gemini",
    "openai_compatible",
    "groq",
    "mistral",
    "deepseek",
    "together",
    "openrouter",
    "xai",
    "ollama",
    "lmstudio",
    "vllm",
]
PROVIDER_IDS: tuple[ProviderId, ...] = ProviderId.__args__  # type: ignore[attr-defined]
TokenParam = Literal["max_tokens", "max_completion_tokens", "max_output_tokens"]


@dataclass(frozen=True)
class ProviderConfig:
    """What one provider is reached with: an org's settings or the deployment's."""

    provider: ProviderId
    model: str
    api_key: str = field(default="", repr=False)  # never printed
    base_url: str | None = None
    # The deployment's (``CHAT_LLM_CONNECT_TIMEOUT``, ``CHAT_LLM_TIMEOUT``, its retries).
    connect_timeout: float = field(kw_only=True)
    read_timeout: float = field(kw_only=True)
    max_retries: int = field(kw_only=True)
    # An endpoint the org chose, on a deployment that keeps to public hosts: every request
    # connects only to the public addresses checked for it (``chat.llm.common``).
    public_only: bool = False
    # The org named this endpoint itself: nothing of the deployment's goes there (its key,
    # or headers an SDK picks up from the server's environment).
    org_endpoint: bool = False


@dataclass(frozen=True)
class ProviderDescriptor:
    id: ProviderId
    label: str
    adapter: Literal["anthropic", "openai", "gemini"]
    needs_key: bool = True
    key_env: str | None = None  # the deployment's key, when an org sets none
    default_base_url: str | None = None  # prefilled for OpenAI-compatible vendors
    token_param: TokenParam = "max_tokens"
    context_window: int = 128_000
    caching: str = "automatic prefix caching where the vendor offers it"
    local: bool = False  # runs on the deployment's own machine or network
    default_model: str = ""

    def create(self, config: ProviderConfig) -> LlmProvider:
        """The adapter for ``config`` (its SDK is imported now, and only now)."""
        return FACTORIES[self.adapter](self, config)

    def endpoint(self, config: ProviderConfig) -> str | None:
        """Where ``config`` sends its requests: its own base URL, else the vendor's."""
        return config.base_url or self.default_base_url

    def summary(self) -> dict[str, Any]:
        """What a settings page or an admin's JSON may show: no code, no secrets."""
        return {
            "id": self.id,
            "label": self.label,
            "needs_key": self.needs_key,
            "key_env": self.key_env,
            "default_base_url": self.default_base_url,
            "token_param": self.token_param,
            "context_window": self.context_window,
            "caching": self.caching,
            "local": self.local,
            "default_model": self.default_model,
        }


# Each adapter's factory, by ``ProviderDescriptor.adapter``; ``llm.providers`` fills it.
FACTORIES: dict[str, Callable[[ProviderDescriptor, ProviderConfig], LlmProvider]] = {}
