"""What a provider is and how it is reached: its id, its descriptor, its configuration.

The adapters (``anthropic``, ``openai_chat``, ``gemini``) read these; ``providers`` lists
one descriptor per provider and builds the adapters, so no adapter imports the module that
imports it. A descriptor builds its adapter with the factory it is given (``providers``
gives each its adapter's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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
    # Builds the adapter (``providers`` imports the adapter's module then, and only then).
    factory: Callable[[ProviderDescriptor, ProviderConfig], LlmProvider] = field(
        kw_only=True, repr=False, compare=False
    )

    def create(self, config: ProviderConfig) -> LlmProvider:
        """The adapter for ``config`` (its SDK is imported when it first needs a client)."""
        return self.factory(self, config)

    def endpoint(self, config: ProviderConfig) -> str | None:
        """The endpoint ``config`` talks to: its own base URL first, this provider's default
        otherwise (None: the OpenAI-compatible generic with no URL set)."""
        return config.base_url or self.default_base_url
