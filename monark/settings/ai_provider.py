"""Which model an org's assistant talks to: the org's own settings, over the deployment's
(the resolver the app factory installs in the chat runtime, ``chat.runtime.install``).

An admin may set the org's provider, model, key (encrypted at rest, never shown again),
base URL and limits; whatever the org leaves unset comes from the deployment's environment
(``CHAT_LLM_PROVIDER``, ``CHAT_LLM_MODEL``, the vendor's key variable, ``CHAT_LLM_BASE_URL``,
``CHAT_MAX_STEPS``, ``CHAT_LLM_MAX_TOKENS``), and an org's limits stay within the
deployment's caps. A base URL an org sets is a request the server makes: it must reach a
public host unless the deployment allows private ones (``CHAT_LLM_ALLOW_PRIVATE``).
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import select

from monark.chat.llm.providers import ProviderConfig, ProviderDescriptor, endpoint_of, get_provider
from monark.chat.runtime import Limits, ResolvedAi
from monark.core.crypto import SecretUnreadable, decrypt
from monark.core.models import Org
from monark.core.net import Unresolvable, UnsafeAddress, public_addresses
from monark.core.settings import chat_settings, spend_settings
from monark.extensions import db
from monark.settings.budgets import limits_of
from monark.settings.models import OrgAiSettings, OrgBudget
from monark.settings.prices import Price, PriceError, parse_price, price_table

MIN_KEY = 8  # shorter is no real key, and could not be told apart from text to redact


def caps() -> Limits:
    """The deployment's highest limits an org may set."""
    chat = chat_settings()
    return Limits(chat.max_steps_cap, chat.llm_max_tokens_cap)


def org_settings(org_id: int) -> OrgAiSettings | None:
    """The org's stored settings, if it has any."""
    return db.session.scalar(select(OrgAiSettings).where(OrgAiSettings.org_id == org_id))


def resolve(org_id: int | None) -> ResolvedAi:
    """The provider configuration and limits of an org's turns (the deployment's alone
    for ``org_id`` None), and its budget: both read in one statement, once a turn, so a
    turn of an org without a budget never reads its spend (``budgets.spend_check``)."""
    if org_id is None:
        return resolve_row(OrgAiSettings())
    stored, budget = db.session.execute(
        select(OrgAiSettings, OrgBudget)
        .select_from(Org)
        .outerjoin(OrgAiSettings, OrgAiSettings.org_id == Org.id)
        .outerjoin(OrgBudget, OrgBudget.org_id == Org.id)
        .where(Org.id == org_id)
    ).one_or_none() or (None, None)
    resolved = resolve_row(stored if stored is not None else OrgAiSettings())
    return replace(resolved, budget=limits_of(budget))


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


def resolve_row(own: OrgAiSettings, typed_key: str = "") -> ResolvedAi:
    """Settings (stored, or a form's draft) over the deployment's.

    The deployment's key only ever goes to the deployment's endpoints: the vendor's own,
    or ``CHAT_LLM_BASE_URL``. An org that names an endpoint of its own brings its own key,
    so no admin can have the server send the deployment's key to an address they chose.
    """
    chat = chat_settings()
    provider = own.provider or chat.llm_provider
    descriptor = get_provider(provider)
    same = provider == chat.llm_provider  # the deployment's model, key and URL are its provider's
    model = own.model or (chat.llm_model if same else "")
    top = caps()
    limits = Limits(
        min(own.max_steps or chat.max_steps, top.max_steps),
        min(own.max_tokens or chat.llm_max_tokens, top.max_tokens),
    )
    deployment_url = chat.llm_base_url if same else None
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
                key = decrypt(own.api_key_encrypted)
        except SecretUnreadable as err:
            problem = f"{err} An admin enters the key again in Settings."
        if not key and not own_endpoint:
            key = chat.provider_key(descriptor.key_env)
    config = ProviderConfig(
        provider=provider,  # type: ignore[arg-type]
        model=model,
        api_key=key,
        base_url=own_endpoint or deployment_url or None,
        connect_timeout=chat.llm_connect_timeout,
        read_timeout=chat.llm_timeout,
        max_retries=chat.llm_max_retries,
        public_only=org_chose and not chat.llm_allow_private,
        org_endpoint=bool(own_endpoint),
    )
    detail = None
    if problem is None and descriptor is not None and config.public_only:
        detail = unsafe_url(endpoint_of(config) or "")
        if detail:
            problem = "The org's model endpoint is not allowed here: an admin checks Settings."
    return ResolvedAi(config, descriptor, limits, problem, detail, price_of(own, provider, model))


def price_of(own: OrgAiSettings, provider: str, model: str) -> Price | None:
    """The org's own price of its model, else the price table's (the deployment's file over
    the shipped one), else None: its replies' cost is unknown."""
    stored = dict(own.prices or {})
    # Kept with the model it was set for: another model the org switches to is not priced so.
    if stored and (stored.pop("provider", None), stored.pop("model", None)) == (provider, model):
        try:
            return parse_price(stored, "prices")
        except PriceError:  # checked when saved; a stored one gone wrong is no price
            return None
    return price_table(spend_settings().prices_file).get(provider, model)


def unsafe_url(url: str) -> str | None:
    """Why the server must not call ``url`` (an org's endpoint), or None. A host that does
    not resolve now is no reason: the request fails on its own, and is checked again then."""
    if not url or chat_settings().llm_allow_private:
        return None
    try:
        public_addresses(url, "CHAT_LLM_ALLOW_PRIVATE")
    except Unresolvable:
        return None
    except UnsafeAddress as err:
        return f"The endpoint {url} cannot be used: {err}"
    return None
