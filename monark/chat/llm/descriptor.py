"""What a provider is and how it is reached: its id, its descriptor, its configuration.

The adapters (``anthropic``, ``openai_chat``, ``gemini``) read these; ``providers`` lists
one descriptor per provider. A descriptor builds its adapter, importing the adapter's module
by name then (``ADAPTERS``): no module imports an adapter, and an SDK is imported only when
an org first talks to its provider.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Literal

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
# Each adapter's module and class, imported when its first adapter is built.
ADAPTERS = {
    "anthropic": ("monark.chat.llm.anthropic", "AnthropicProvider"),
    "openai": ("monark.chat.llm.openai_chat", "OpenAIProvider"),
    "gemini": ("monark.chat.llm.gemini", "GeminiProvider"),
}


@dataclass(frozen=True)
class ProviderConfig:
    """What one provider is reached with: an org's settings or the deployment's."""

    provider: ProviderId
    model: str
    api_key: str = field(default="", repr=False)  # never printed
    base_url: str | None = None
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    max_retries: int = 2
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
        """The adapter for ``config``: its module imported now, and its SDK when it first
        needs a client."""
        module, name = ADAPTERS[self.adapter]
        return getattr(import_module(module), name)(self, config)

    def endpoint(self, config: ProviderConfig) -> str | None:
        """The endpoint ``config`` talks to: its own base URL first, this provider's default
        otherwise (None: the OpenAI-compatible generic with no URL set)."""
        return config.base_url or self.default_base_url
