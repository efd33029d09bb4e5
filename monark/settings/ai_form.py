"""An admin's form of the org's AI settings: checked, saved (the key encrypted, never shown
again), tried (a test call, the provider's model list). What the settings mean for a turn
is ``settings.ai_provider``."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import Field, ValidationError

from monark.chat.llm.common import close_provider
from monark.chat.llm.providers import endpoint_of, get_provider
from monark.chat.llm.types import LlmMessage, LlmRequest, ProviderError, TextBlock, TextDelta
from monark.core.crypto import encrypt
from monark.core.errors import ValidationFailed
from monark.core.events import record_event
from monark.core.net import UnsafeAddress, check_url
from monark.core.rbac import Principal
from monark.core.schemas import StrictModel
from monark.extensions import db
from monark.settings.ai_provider import (
    MIN_KEY,
    ResolvedAi,
    caps,
    org_settings,
    resolve_row,
)
from monark.settings.models import OrgAiSettings
from monark.settings.prices import FIELDS as PRICE_FIELDS
from monark.settings.prices import Price, PriceError, parse_amount, parse_price

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
    # The org's own price of its model (US dollars per million tokens); all empty: the
    # price table's.
    price_input: str = Field("", max_length=40)
    price_output: str = Field("", max_length=40)
    price_cache_write: str = Field("", max_length=40)
    price_cache_read: str = Field("", max_length=40)

    def price(self) -> Price | None:
        """The typed price (checked by ``parse_form``), or None when left empty."""
        values = {name: getattr(self, f"price_{name}") for name in PRICE_FIELDS}
        return parse_price(values, "price") if any(values.values()) else None


def _price_problems(form: AiSettingsForm) -> list[dict[str, str]]:
    """Each bad price field, by name (all four are needed once one is typed)."""
    values = {name: getattr(form, f"price_{name}") for name in PRICE_FIELDS}
    if not any(values.values()):
        return []
    problems = []
    for name, value in values.items():
        try:
            parse_amount(value, f"price_{name}")
        except PriceError as err:
            problems.append({"field": f"price_{name}", "message": str(err).split(": ", 1)[-1]})
    return problems


def parse_form(data: Mapping[str, Any]) -> AiSettingsForm:
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
    top = caps()
    if form.max_steps and form.max_steps > top.max_steps:
        problems.append({"field": "max_steps", "message": f"At most {top.max_steps}."})
    if form.max_tokens and form.max_tokens > top.max_tokens:
        problems.append({"field": "max_tokens", "message": f"At most {top.max_tokens}."})
    if any(unicodedata.category(ch)[0] in "CZ" and ch != " " for ch in form.model):
        problems.append({"field": "model", "message": "Leave control characters out."})
    if form.api_key and not (
        form.api_key.isascii() and form.api_key.isprintable() and " " not in form.api_key
    ):
        problems.append(
            {
                "field": "api_key",
                "message": "An API key is plain ASCII without spaces: paste it as the provider "
                "gave it.",
            }
        )
    elif form.api_key and len(form.api_key) < MIN_KEY:
        problems.append({"field": "api_key", "message": "That is too short to be an API key."})
    problems += _price_problems(form)
    if form.base_url:
        try:
            check_url(form.base_url)
        except UnsafeAddress as err:
            problems.append({"field": "base_url", "message": str(err)})
    if not problems:
        # The endpoint the org's turns would call, checked now as it will be at each call.
        draft = OrgAiSettings(provider=form.provider or None, base_url=form.base_url or None)
        resolved = resolve_row(draft)
        if resolved.detail:
            problems.append({"field": "base_url", "message": resolved.detail})
    if problems:
        raise ValidationFailed("The AI settings are invalid.", problems)
    return form


def save(principal: Principal, form: AiSettingsForm) -> list[str]:
    """Store an org's AI settings; the names of the fields that changed (audited, never a
    value). The key is encrypted, kept when none is given, removed on ``clear_key``."""
    principal.require("org.manage")
    stored = org_settings(principal.org_id)
    if stored is None:
        stored = OrgAiSettings(org_id=principal.org_id)
        db.session.add(stored)
    moving = stored.api_key_encrypted and not _same_endpoint(stored, form)
    if moving and not form.api_key and not form.clear_key:
        raise ValidationFailed(
            "The AI settings are invalid.",
            [
                {
                    "field": "api_key",
                    "message": "The provider or base URL changed: type the key again (a saved "
                    "key only goes where it was saved for), or tick Remove.",
                }
            ],
        )
    changed = []
    for name in SETTING_FIELDS:
        value = getattr(form, name) or None
        if getattr(stored, name) != value:
            setattr(stored, name, value)
            changed.append(name)
    price = form.price()
    # Kept with the provider and model it prices: another model the org picks later is not.
    target = resolve_row(stored).config if price is not None else None
    prices = (
        {"provider": target.provider, "model": target.model, **price.as_dict()}
        if price is not None and target is not None
        else None
    )
    if stored.prices != prices:
        stored.prices = prices
        changed.append("prices")
    if form.api_key:  # a new key replaces the old one, removed or not
        stored.api_key_encrypted = encrypt(form.api_key)
        changed.append("api_key")
    elif form.clear_key and stored.api_key_encrypted:
        stored.api_key_encrypted = None
        changed.append("api_key")
    if changed:
        stored.updated_by_id = principal.user_id
        record_event(
            principal, "org.ai_settings.updated", "org", principal.org_id, {"fields": changed}
        )
    db.session.commit()
    return changed


def _endpoint_of(settings: OrgAiSettings | AiSettingsForm) -> tuple:
    """Where settings send their requests: the provider and the endpoint it resolves to."""
    draft = OrgAiSettings(provider=settings.provider or None, base_url=settings.base_url or None)
    config = resolve_row(draft).config
    return config.provider, endpoint_of(config)


def _same_endpoint(stored: OrgAiSettings, form: AiSettingsForm) -> bool:
    """Whether the form still sends to where the saved key was saved for: a saved key is
    never sent anywhere else (an admin could otherwise read it with a server of theirs)."""
    return _endpoint_of(stored) == _endpoint_of(form)


def form_config(principal: Principal, form: AiSettingsForm) -> ResolvedAi:
    """What the form would resolve to, were it saved (a Test, a model list): its fields as
    typed, its key if typed, else the saved one unless it is being removed."""
    principal.require("org.manage")
    stored = org_settings(principal.org_id)
    keeps = stored is not None and not form.clear_key and _same_endpoint(stored, form)
    draft = OrgAiSettings(
        provider=form.provider or None,
        model=form.model or None,
        base_url=form.base_url or None,
        api_key_encrypted=stored.api_key_encrypted if keeps else None,
    )
    if form.provider and get_provider(form.provider) is None:
        resolved = resolve_row(OrgAiSettings())
        return replace(resolved, problem="Choose a provider from the list.")
    resolved = resolve_row(draft, typed_key=form.api_key)
    config = replace(
        resolved.config, read_timeout=min(resolved.config.read_timeout, 20.0), max_retries=0
    )
    return replace(resolved, config=config)


def test_connection(resolved: ResolvedAi) -> tuple[bool, str]:
    """Send a tiny request with these settings; whether it answered, in plain words."""
    if resolved.problem or resolved.descriptor is None:
        return False, resolved.admin_problem or "Choose a provider."
    adapter = resolved.descriptor.create(resolved.config)
    try:
        return _ask(adapter, resolved)
    finally:
        close_provider(adapter)  # made for this check alone: its client goes with it


def _ask(adapter: Any, resolved: ResolvedAi) -> tuple[bool, str]:
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
            return False, f"{resolved.descriptor.label}: {event.message}"
        if isinstance(event, TextDelta):
            text.append(event.text)
    said = " ".join("".join(text).split())[:80] or "(an empty reply)"
    model = resolved.config.model or "its default model"
    return True, f"Connected: {resolved.descriptor.label} ({model}) answered “{said}”."


def model_catalogue(resolved: ResolvedAi) -> tuple[list[str], str | None]:
    """The provider's models for these settings, or why there are none to offer (a
    free-text model name always works)."""
    if resolved.problem or resolved.descriptor is None:
        return [], resolved.admin_problem or "Choose a provider."
    adapter = resolved.descriptor.create(resolved.config)
    listing = getattr(adapter, "models", None)
    if listing is None:
        return [], f"{resolved.descriptor.label} has no model list: type the model's name."
    if problem := getattr(adapter, "problem", lambda: None)():
        return [], problem
    try:
        return list(listing())[:500], None
    except Exception as err:  # a list is a convenience: say why, and go on
        return [], f"{resolved.descriptor.label} did not list its models: {adapter._said(err)}"
    finally:
        close_provider(adapter)  # made for this list alone (no client was made before)
