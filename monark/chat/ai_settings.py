"""Which model an org's assistant talks to: the org's own settings, over the deployment's.

An admin may set the org's provider, model, key (encrypted at rest, never shown again),
base URL and limits; whatever the org leaves unset comes from the deployment's environment
(``CHAT_LLM_PROVIDER``, ``CHAT_LLM_MODEL``, the vendor's key variable, ``CHAT_LLM_BASE_URL``,
``CHAT_MAX_STEPS``, ``CHAT_LLM_MAX_TOKENS``), and an org's limits stay within the
deployment's caps. A base URL an org sets is a request the server makes: it must reach a
public host unless the deployment allows private ones (``CHAT_LLM_ALLOW_PRIVATE``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from monark.chat.llm.providers import ProviderConfig, ProviderDescriptor, get_provider
from monark.chat.models import OrgAiSettings
from monark.core.crypto import SecretUnreadable, decrypt
from monark.core.net import UnsafeAddress, public_addresses
from monark.extensions import db

DEFAULT_STEPS, DEFAULT_TOKENS = 8, 4096


@dataclass(frozen=True)
class Limits:
    max_steps: int
    max_tokens: int


@dataclass(frozen=True)
class ResolvedAi:
    """What a turn of an org runs with; ``problem`` says why it cannot, if it cannot."""

    config: ProviderConfig
    descriptor: ProviderDescriptor | None
    limits: Limits
    problem: str | None = None


def caps(app_config: Mapping[str, Any]) -> Limits:
    """The deployment's highest limits an org may set."""
    return Limits(
        int(app_config.get("CHAT_MAX_STEPS_CAP", 32)),
        int(app_config.get("CHAT_LLM_MAX_TOKENS_CAP", 32_768)),
    )


def _env_key(descriptor: ProviderDescriptor, app_config: Mapping[str, Any]) -> str:
    if not descriptor.key_env:
        return ""
    return str(app_config.get(descriptor.key_env) or os.environ.get(descriptor.key_env) or "")


def org_settings(org_id: int) -> OrgAiSettings | None:
    """The org's stored settings, if it has any."""
    return db.session.scalar(select(OrgAiSettings).where(OrgAiSettings.org_id == org_id))


def resolve(org_id: int | None, app_config: Mapping[str, Any]) -> ResolvedAi:
    """The provider configuration and limits of an org's turns (the deployment's alone
    for ``org_id`` None)."""
    stored = org_settings(org_id) if org_id is not None else None
    own = stored if stored is not None else OrgAiSettings()
    deployment = str(app_config.get("CHAT_LLM_PROVIDER") or "anthropic").lower()
    provider = own.provider or deployment
    descriptor = get_provider(provider)
    same = provider == deployment  # the deployment's model, key and URL are for its provider
    model = own.model or (app_config.get("CHAT_LLM_MODEL") if same else "") or ""
    top = caps(app_config)
    limits = Limits(
        min(own.max_steps or int(app_config.get("CHAT_MAX_STEPS", DEFAULT_STEPS)), top.max_steps),
        min(
            own.max_tokens or int(app_config.get("CHAT_LLM_MAX_TOKENS", DEFAULT_TOKENS)),
            top.max_tokens,
        ),
    )
    problem = None
    key = ""
    if descriptor is None:
        problem = f"Unknown model provider '{provider}'. An admin picks one in Settings."
    else:
        model = model or descriptor.default_model
        try:
            key = decrypt(app_config, own.api_key_encrypted) if own.api_key_encrypted else ""
        except SecretUnreadable as err:
            problem = f"{err} An admin enters the key again in Settings."
        key = key or _env_key(descriptor, app_config)
    base_url = own.base_url or (app_config.get("CHAT_LLM_BASE_URL") if same else None) or None
    if own.base_url and problem is None:
        problem = unsafe_url(own.base_url, app_config)
    config = ProviderConfig(
        provider=provider,  # type: ignore[arg-type]
        model=model,
        api_key=key,
        base_url=base_url,
        connect_timeout=float(app_config.get("CHAT_LLM_CONNECT_TIMEOUT", 10)),
        read_timeout=float(app_config.get("CHAT_LLM_TIMEOUT", 60)),
        max_retries=int(app_config.get("CHAT_LLM_MAX_RETRIES", 2)),
    )
    return ResolvedAi(config, descriptor, limits, problem)


def unsafe_url(url: str, app_config: Mapping[str, Any]) -> str | None:
    """Why the server must not call ``url`` (an org's base URL), or None."""
    if app_config.get("CHAT_LLM_ALLOW_PRIVATE"):
        return None
    try:
        public_addresses(url, "CHAT_LLM_ALLOW_PRIVATE")
    except UnsafeAddress as err:
        return f"The base URL cannot be used: {err}"
    return None
