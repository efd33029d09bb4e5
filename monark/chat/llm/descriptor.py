"""What a provider is and how it is reached. A descriptor imports its adapter's module by
name (``ADAPTERS``) as it builds one, so an SDK loads only when first talked to."""

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
    # An endpoint the org chose on a deployment kept to public hosts: only checked addresses.
    public_only: bool = False
    # One the org named: nothing of the deployment's goes there (its key, its env's headers).
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
        """The adapter for ``config`` (its module imported now, its SDK at its first client)."""
        module, name = ADAPTERS[self.adapter]
        return getattr(import_module(module), name)(self, config)

    def endpoint(self, config: ProviderConfig) -> str | None:
        """``config``'s own base URL, else this provider's default (None: neither is set)."""
        return config.base_url or self.default_base_url
