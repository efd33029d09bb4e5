"""Provider resolution: built on first use, cached, replaceable for tests and other hosts."""

from __future__ import annotations

import threading
from typing import Any

from monark.chat.llm.types import LlmProvider

_lock = threading.Lock()
_provider: LlmProvider | None = None


def get_llm_provider(config: dict[str, Any]) -> LlmProvider:
    """The process's provider, built from ``config`` on first use."""
    global _provider
    if _provider is None:
        with _lock:
            if _provider is None:
                _provider = _build(config)
    return _provider


def provider_problem(config: dict[str, Any]) -> str | None:
    """What keeps the configured provider from answering, if anything (say, no API key)."""
    check = getattr(get_llm_provider(config), "problem", None)
    return check() if check is not None else None


def set_llm_provider(provider: LlmProvider | None) -> None:
    """Replace the provider (``None`` forgets it, so the next use rebuilds from config)."""
    global _provider
    with _lock:
        _provider = provider


def _build(config: dict[str, Any]) -> LlmProvider:
    name = (config.get("CHAT_LLM_PROVIDER") or "anthropic").lower()
    if name == "anthropic":
        from monark.chat.llm.anthropic import AnthropicProvider

        return AnthropicProvider(
            api_key=config.get("ANTHROPIC_API_KEY") or "",
            connect_timeout=float(config.get("CHAT_LLM_CONNECT_TIMEOUT", 10)),
            read_timeout=float(config.get("CHAT_LLM_TIMEOUT", 60)),
            max_retries=int(config.get("CHAT_LLM_MAX_RETRIES", 2)),
        )
    from monark.chat.llm.unavailable import UnavailableProvider

    return UnavailableProvider(f"Unknown CHAT_LLM_PROVIDER '{name}'. Use 'anthropic'.")
