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

from monark.chat.llm.providers import ProviderConfig, ProviderDescriptor, endpoint_of, get_provider
from monark.chat.models import OrgAiSettings
from monark.core.crypto import SecretUnreadable, decrypt
from monark.core.net import Unresolvable, UnsafeAddress, public_addresses
from monark.extensions import db

DEFAULT_STEPS, DEFAULT_TOKENS = 8, 4096
MIN_KEY = 8  # shorter is no real key, and could not be told apart from text to redact


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
    problem: str | None = None  # for everyone (the chat says it)
    detail: str | None = None  # the whole reason, for admins (addresses and settings)

    @property
    def admin_problem(self) -> str | None:
        return self.detail or self.problem


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
    return resolve_row(stored if stored is not None else OrgAiSettings(), app_config)


def _own_endpoint(
    url: str | None, descriptor: ProviderDescriptor | None, deployment_url: str | None
) -> str | None:
    """The org's base URL, or None when it names none of its own: empty, the vendor's
    default endpoint (as the form prefills it), or the deployment's own."""
    if not url:
        return None
    same = url.rstrip("/").lower()
    default = (descriptor.default_base_url or "") if descriptor else ""
    if same in (default.rstrip("/").lower(), (deployment_url or "").rstrip("/").lower()):
        return None
    return url


def resolve_row(
    own: OrgAiSettings, app_config: Mapping[str, Any], typed_key: str = ""
) -> ResolvedAi:
    """Settings (stored, or a form's draft) over the deployment's.

    The deployment's key only ever goes to the deployment's endpoints: the vendor's own,
    or ``CHAT_LLM_BASE_URL``. An org that names an endpoint of its own brings its own key,
    so no admin can have the server send the deployment's key to an address they chose.
    """
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
    deployment_url = app_config.get("CHAT_LLM_BASE_URL") if same else None
    own_endpoint = _own_endpoint(own.base_url, descriptor, deployment_url)
    org_chose = bool(own_endpoint or (own.provider and not same))
    problem = None
    key = typed_key
    if descriptor is None:
        problem = f"Unknown model provider '{provider}'. An admin picks one in Settings."
    else:
        model = model or descriptor.default_model
        try:
            if not key and own.api_key_encrypted:
                key = decrypt(app_config, own.api_key_encrypted)
        except SecretUnreadable as err:
            problem = f"{err} An admin enters the key again in Settings."
        if not key and not own_endpoint:
            key = _env_key(descriptor, app_config)
    allow_private = bool(app_config.get("CHAT_LLM_ALLOW_PRIVATE"))
    config = ProviderConfig(
        provider=provider,  # type: ignore[arg-type]
        model=model,
        api_key=key,
        base_url=own_endpoint or deployment_url or None,
        connect_timeout=float(app_config.get("CHAT_LLM_CONNECT_TIMEOUT", 10)),
        read_timeout=float(app_config.get("CHAT_LLM_TIMEOUT", 60)),
        max_retries=int(app_config.get("CHAT_LLM_MAX_RETRIES", 2)),
        public_only=org_chose and not allow_private,
        org_endpoint=bool(own_endpoint),
    )
    detail = None
    if problem is None and descriptor is not None and config.public_only:
        detail = unsafe_url(endpoint_of(config) or "", app_config)
        if detail:
            problem = "The org's model endpoint is not allowed here: an admin checks Settings."
    return ResolvedAi(config, descriptor, limits, problem, detail)


def unsafe_url(url: str, app_config: Mapping[str, Any]) -> str | None:
    """Why the server must not call ``url`` (an org's endpoint), or None. A host that does
    not resolve now is no reason: the request fails on its own, and is checked again then."""
    if not url or app_config.get("CHAT_LLM_ALLOW_PRIVATE"):
        return None
    try:
        public_addresses(url, "CHAT_LLM_ALLOW_PRIVATE")
    except Unresolvable:
        return None
    except UnsafeAddress as err:
        return f"The endpoint {url} cannot be used: {err}"
    return None
