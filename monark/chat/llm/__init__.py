"""The model provider layer: provider-neutral types (``types``) and one adapter per vendor,
each the only module importing its SDK, imported when first built. Which provider an app
uses, and when it is built, is the chat runtime's business (``monark.chat.runtime``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monark.chat.llm.types import LlmProvider


def build_provider(config: Mapping[str, Any]) -> LlmProvider:
    """The provider ``config`` names (``CHAT_LLM_PROVIDER``), with its settings."""
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
