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
from dataclasses import dataclass, replace
from typing import Any

from pydantic import Field, ValidationError
from sqlalchemy import select

from monark.chat.llm.providers import ProviderConfig, ProviderDescriptor, endpoint_of, get_provider
from monark.chat.llm.types import LlmMessage, LlmRequest, ProviderError, TextBlock, TextDelta
from monark.chat.models import OrgAiSettings
from monark.core.crypto import SecretUnreadable, decrypt, encrypt
from monark.core.errors import ValidationFailed
from monark.core.events import record_event
from monark.core.net import UnsafeAddress, check_url, public_addresses
from monark.core.rbac import Principal
from monark.core.schemas import StrictModel
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
    config = ProviderConfig(
        provider=provider,  # type: ignore[arg-type]
        model=model,
        api_key=key,
        base_url=base_url,
        connect_timeout=float(app_config.get("CHAT_LLM_CONNECT_TIMEOUT", 10)),
        read_timeout=float(app_config.get("CHAT_LLM_TIMEOUT", 60)),
        max_retries=int(app_config.get("CHAT_LLM_MAX_RETRIES", 2)),
    )
    if problem is None and descriptor is not None:
        org_chose = bool(own.base_url or (own.provider and not same))
        problem = endpoint_problem(config, descriptor, app_config, org_chose)
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


# ---- an admin's form ---------------------------------------------------------------------

NO_CHANGE = "(unchanged)"
SETTING_FIELDS = ("provider", "model", "base_url", "max_steps", "max_tokens")


class AiSettingsForm(StrictModel):
    """The settings an admin sends; empty means "as the deployment has it"."""

    provider: str = Field("", max_length=40)
    model: str = Field("", max_length=120)
    api_key: str = Field("", max_length=500)  # write-only: never shown again
    clear_key: bool = False
    base_url: str = Field("", max_length=500)
    max_steps: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)


def parse_form(data: Mapping[str, Any], app_config: Mapping[str, Any]) -> AiSettingsForm:
    """The form checked; ``ValidationFailed`` names each bad field."""
    raw = {k: (v.strip() if isinstance(v, str) else v) for k, v in data.items()}
    for number in ("max_steps", "max_tokens"):
        if raw.get(number) == "":
            raw[number] = None
    try:
        form = AiSettingsForm.model_validate(raw)
    except ValidationError as err:
        raise ValidationFailed.from_pydantic(err, "The AI settings are invalid.") from None
    problems = []
    if form.provider and get_provider(form.provider) is None:
        problems.append({"field": "provider", "message": "Choose a provider from the list."})
    top = caps(app_config)
    if form.max_steps and form.max_steps > top.max_steps:
        problems.append({"field": "max_steps", "message": f"At most {top.max_steps}."})
    if form.max_tokens and form.max_tokens > top.max_tokens:
        problems.append({"field": "max_tokens", "message": f"At most {top.max_tokens}."})
    if form.base_url:
        try:
            check_url(form.base_url)
        except UnsafeAddress as err:
            problems.append({"field": "base_url", "message": str(err)})
    if problems:
        raise ValidationFailed("The AI settings are invalid.", problems)
    return form


def save(principal: Principal, form: AiSettingsForm, app_config: Mapping[str, Any]) -> list[str]:
    """Store an org's AI settings; the names of the fields that changed (audited, never a
    value). The key is encrypted, kept when none is given, removed on ``clear_key``."""
    principal.require("org.manage")
    stored = org_settings(principal.org_id)
    if stored is None:
        stored = OrgAiSettings(org_id=principal.org_id)
        db.session.add(stored)
    changed = []
    for name in SETTING_FIELDS:
        value = getattr(form, name) or None
        if getattr(stored, name) != value:
            setattr(stored, name, value)
            changed.append(name)
    if form.clear_key and stored.api_key_encrypted:
        stored.api_key_encrypted = None
        changed.append("api_key")
    elif form.api_key:
        stored.api_key_encrypted = encrypt(app_config, form.api_key)
        changed.append("api_key")
    if changed:
        stored.updated_by_id = principal.user_id
        record_event(
            principal, "org.ai_settings.updated", "org", principal.org_id, {"fields": changed}
        )
    db.session.commit()
    return changed


def form_config(
    principal: Principal, form: AiSettingsForm, app_config: Mapping[str, Any]
) -> ResolvedAi:
    """What the form would resolve to, were it saved (a Test, a model list): its own key if
    typed, else the saved one, else the deployment's."""
    principal.require("org.manage")
    resolved = resolve(principal.org_id, app_config)
    descriptor = get_provider(form.provider) if form.provider else resolved.descriptor
    if descriptor is None:
        return replace(resolved, problem="Choose a provider.")
    same = descriptor.id == resolved.config.provider
    key = form.api_key or ("" if form.clear_key else resolved.config.api_key if same else "")
    key = key or _env_key(descriptor, app_config)
    base_url = form.base_url or (resolved.config.base_url if same else None)
    config = replace(
        resolved.config,
        provider=descriptor.id,
        model=form.model or (resolved.config.model if same else descriptor.default_model),
        api_key=key,
        base_url=base_url or None,
        read_timeout=min(resolved.config.read_timeout, 20.0),
        max_retries=0,
    )
    problem = endpoint_problem(config, descriptor, app_config, org_chose=True)
    return ResolvedAi(config, descriptor, resolved.limits, problem)


def endpoint_problem(
    config: ProviderConfig,
    descriptor: ProviderDescriptor,
    app_config: Mapping[str, Any],
    org_chose: bool,
) -> str | None:
    """Why the server must not call the endpoint an org chose (a private address), or None."""
    endpoint = endpoint_of(config)
    if not org_chose or not endpoint or app_config.get("CHAT_LLM_ALLOW_PRIVATE"):
        return None
    return unsafe_url(endpoint, app_config)


def test_connection(resolved: ResolvedAi) -> tuple[bool, str]:
    """Send a tiny request with these settings; whether it answered, in plain words."""
    if resolved.problem or resolved.descriptor is None:
        return False, resolved.problem or "Choose a provider."
    adapter = resolved.descriptor.create(resolved.config)
    problem = getattr(adapter, "problem", lambda: None)()
    if problem:
        return False, problem
    request = LlmRequest(
        model=resolved.config.model,
        system="You are checking a connection. Reply with the word OK.",
        messages=[LlmMessage("user", (TextBlock("Are you there?"),))],
        tools=[],
        max_tokens=16,
    )
    text: list[str] = []
    for event in adapter.stream(request):
        if isinstance(event, ProviderError):
            return False, f"{resolved.descriptor.label} answered with an error: {event.message}"
        if isinstance(event, TextDelta):
            text.append(event.text)
    said = " ".join("".join(text).split())[:80] or "(an empty reply)"
    model = resolved.config.model or "its default model"
    return True, f"Connected: {resolved.descriptor.label} ({model}) answered “{said}”."


def model_catalogue(resolved: ResolvedAi) -> list[str]:
    """The provider's models for these settings (empty when it cannot list them)."""
    if resolved.problem or resolved.descriptor is None:
        return []
    adapter = resolved.descriptor.create(resolved.config)
    listing = getattr(adapter, "models", None)
    if listing is None or getattr(adapter, "problem", lambda: None)():
        return []
    try:
        return list(listing())[:500]
    except Exception:  # a catalogue is a convenience: a free-text model always works
        return []
