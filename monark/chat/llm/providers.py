"""The model providers Monark can talk to, one descriptor each, in ``PROVIDER_IDS`` order
(the config check, the settings form and its validation are built from that one tuple)."""

from __future__ import annotations

from monark.chat.llm.descriptor import PROVIDER_IDS, ProviderConfig, ProviderDescriptor

_COMPATIBLE = "automatic prefix caching, where the vendor offers it"

PROVIDERS: tuple[ProviderDescriptor, ...] = (
    ProviderDescriptor(
        "anthropic",
        "Anthropic",
        "anthropic",
        key_env="ANTHROPIC_API_KEY",
        default_base_url="https://api.anthropic.com",
        context_window=200_000,
        caching="three cache breakpoints: system prompt, tools, conversation so far",
        default_model="claude-sonnet-5-5",
    ),
    ProviderDescriptor(
        "openai",
        "OpenAI",
        "openai",
        key_env="OPENAI_API_KEY",
        default_base_url="https://api.openai.com/v1",
        token_param="max_completion_tokens",
        caching="automatic prefix caching (the cached share is stored per reply)",
        default_model="gpt-5",
    ),
    ProviderDescriptor(
        "gemini",
        "Google Gemini",
        "gemini",
        key_env="GEMINI_API_KEY",
        default_base_url="https://generativelanguage.googleapis.com",
        token_param="max_output_tokens",
        context_window=1_000_000,
        caching="implicit caching (the cached share is stored per reply)",
        default_model="gemini-2.5-flash",
    ),
    ProviderDescriptor(
        "openai_compatible",
        "OpenAI-compatible (any base URL)",
        "openai",
        needs_key=False,
        caching=_COMPATIBLE,
    ),
    ProviderDescriptor(
        "groq",
        "Groq",
        "openai",
        key_env="GROQ_API_KEY",
        default_base_url="https://api.groq.com/openai/v1",
        caching=_COMPATIBLE,
    ),
    ProviderDescriptor(
        "mistral",
        "Mistral",
        "openai",
        key_env="MISTRAL_API_KEY",
        default_base_url="https://api.mistral.ai/v1",
        caching=_COMPATIBLE,
    ),
    ProviderDescriptor(
        "deepseek",
        "DeepSeek",
        "openai",
        key_env="DEEPSEEK_API_KEY",
        default_base_url="https://api.deepseek.com/v1",
        caching="automatic context caching (the cached share is stored per reply)",
    ),
    ProviderDescriptor(
        "together",
        "Together AI",
        "openai",
        key_env="TOGETHER_API_KEY",
        default_base_url="https://api.together.xyz/v1",
        caching=_COMPATIBLE,
    ),
    ProviderDescriptor(
        "openrouter",
        "OpenRouter",
        "openai",
        key_env="OPENROUTER_API_KEY",
        default_base_url="https://openrouter.ai/api/v1",
        caching="the routed vendor's own caching",
    ),
    ProviderDescriptor(
        "xai",
        "xAI",
        "openai",
        key_env="XAI_API_KEY",
        default_base_url="https://api.x.ai/v1",
        caching=_COMPATIBLE,
    ),
    ProviderDescriptor(
        "ollama",
        "Ollama (local)",
        "openai",
        needs_key=False,
        default_base_url="http://localhost:11434/v1",
        caching="none (a local model)",
        local=True,
    ),
    ProviderDescriptor(
        "lmstudio",
        "LM Studio (local)",
        "openai",
        needs_key=False,
        default_base_url="http://localhost:1234/v1",
        caching="none (a local model)",
        local=True,
    ),
    ProviderDescriptor(
        "vllm",
        "vLLM (local)",
        "openai",
        needs_key=False,
        default_base_url="http://localhost:8000/v1",
        caching="vLLM's automatic prefix caching, when enabled",
        local=True,
    ),
)
_BY_ID = {p.id: p for p in PROVIDERS}
assert tuple(_BY_ID) == PROVIDER_IDS, "PROVIDERS must follow PROVIDER_IDS"


def get_provider(provider_id: str) -> ProviderDescriptor | None:
    """The descriptor of ``provider_id`` (None for an id nobody knows)."""
    return _BY_ID.get(provider_id)  # type: ignore[call-overload]


def endpoint_of(config: ProviderConfig) -> str | None:
    """The endpoint a configuration talks to (``ProviderDescriptor.endpoint``)."""
    descriptor = get_provider(config.provider)
    return descriptor.endpoint(config) if descriptor else config.base_url
