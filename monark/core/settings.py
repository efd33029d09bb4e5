"""The deployment's settings, read once from the app's config into one frozen object.

``monark.config`` reads the environment and holds every default; ``create_app`` builds a
``Settings`` from the result (``install``) and keeps it on the app; code reads it through
``settings()``. Nothing else reads ``app.config`` for these values, and no default is
written a second time. Tests that need another value install a changed copy
(``dataclasses.replace``), as a deployment would start with another environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from flask import Flask, current_app

from monark.config import DEFAULT_ASSISTANT_NAME

_KEY = "monark.settings"
# A provider's deployment key is any ``*_API_KEY`` of the config (ANTHROPIC_API_KEY, …).
KEY_SUFFIX = "_API_KEY"


@dataclass(frozen=True, slots=True)
class ChatSettings:
    """The assistant's settings: its provider, limits, long conversations, turns, approvals."""

    llm_provider: str
    llm_model: str
    llm_max_tokens: int
    llm_base_url: str
    max_steps: int
    max_steps_cap: int
    llm_max_tokens_cap: int
    llm_allow_private: bool
    context_window: int
    context_stub_at: float
    context_compact_at: float
    llm_connect_timeout: float
    llm_timeout: float
    llm_max_retries: int
    llm_client_cache: int
    turn_lease_seconds: float
    turn_stall_seconds: float
    broker_url: str
    approval_ttl: float
    allowance_idle: float
    await_seconds: float
    tool_timeout: float
    tool_result_max: int
    card_max: int
    ai_agent_enabled: bool
    assistant_name: str
    # The deployment's key of each provider, by its variable's name.
    provider_keys: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ChatSettings:
        """Read from a config that ``monark.config.load_config`` filled."""
        return cls(
            llm_provider=str(config["CHAT_LLM_PROVIDER"] or "").strip().lower(),
            llm_model=str(config["CHAT_LLM_MODEL"] or ""),
            llm_max_tokens=int(config["CHAT_LLM_MAX_TOKENS"]),
            llm_base_url=str(config["CHAT_LLM_BASE_URL"] or "").strip(),
            max_steps=int(config["CHAT_MAX_STEPS"]),
            max_steps_cap=int(config["CHAT_MAX_STEPS_CAP"]),
            llm_max_tokens_cap=int(config["CHAT_LLM_MAX_TOKENS_CAP"]),
            llm_allow_private=bool(config["CHAT_LLM_ALLOW_PRIVATE"]),
            context_window=int(config["CHAT_CONTEXT_WINDOW"] or 0),
            context_stub_at=float(config["CHAT_CONTEXT_STUB_AT"]),
            context_compact_at=float(config["CHAT_CONTEXT_COMPACT_AT"]),
            llm_connect_timeout=float(config["CHAT_LLM_CONNECT_TIMEOUT"]),
            llm_timeout=float(config["CHAT_LLM_TIMEOUT"]),
            llm_max_retries=int(config["CHAT_LLM_MAX_RETRIES"]),
            llm_client_cache=int(config["CHAT_LLM_CLIENT_CACHE"]),
            turn_lease_seconds=float(config["CHAT_TURN_LEASE_SECONDS"]),
            turn_stall_seconds=float(config["CHAT_TURN_STALL_SECONDS"]),
            broker_url=str(config["CHAT_BROKER_URL"] or "").strip(),
            approval_ttl=float(config["CHAT_APPROVAL_TTL"]),
            allowance_idle=float(config["CHAT_ALLOWANCE_IDLE"]),
            await_seconds=float(config["CHAT_AWAIT_SECONDS"]),
            tool_timeout=float(config["CHAT_TOOL_TIMEOUT"]),
            tool_result_max=int(config["CHAT_TOOL_RESULT_MAX"]),
            card_max=int(config["CHAT_CARD_MAX"]),
            ai_agent_enabled=bool(config["CHAT_AI_AGENT_ENABLED"]),
            assistant_name=str(config["MONARK_ASSISTANT_NAME"] or "").strip()
            or DEFAULT_ASSISTANT_NAME,
            provider_keys={
                name: str(value or "")
                for name, value in config.items()
                if isinstance(name, str) and name.endswith(KEY_SUFFIX)
            },
        )

    def provider_key(self, name: str | None) -> str:
        """The deployment's key in the variable ``name`` ("" when unset)."""
        return self.provider_keys.get(name, "") if name else ""


@dataclass(frozen=True, slots=True)
class QuerySettings:
    """``records_query``'s limits: seconds, rows, bytes, one value's length, columns."""

    seconds: float
    max_rows: int
    max_bytes: int
    max_value: int
    max_columns: int


def _amount(config: Mapping[str, Any], name: str, whole: bool = False) -> Decimal | None:
    """A positive amount from the config (None when unset); a wrong one stops the start."""
    raw = str(config.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = Decimal(raw)
    except InvalidOperation:
        value = Decimal(-1)
    if not value.is_finite() or value <= 0 or value > SPEND_MAX or (whole and value != int(value)):
        kind = "a whole number" if whole else "an amount"
        raise RuntimeError(f"{name} must be {kind} above 0 and at most {SPEND_MAX}.")
    return value


# Above this, a budget or a ceiling is a typo (dollars or tokens alike).
SPEND_MAX = Decimal(10) ** 12


@dataclass(frozen=True, slots=True)
class SpendSettings:
    """Prices and budgets: the deployment's price file, its default budgets and ceilings."""

    prices_file: str = ""
    monthly_cost: Decimal | None = None
    monthly_tokens: Decimal | None = None
    user_daily_cost: Decimal | None = None
    user_daily_tokens: Decimal | None = None
    cost_ceiling: Decimal | None = None
    tokens_ceiling: Decimal | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SpendSettings:
        """Read and check the ``PRICES_FILE`` and ``BUDGET_*`` keys."""
        return cls(
            prices_file=str(config.get("PRICES_FILE") or "").strip(),
            monthly_cost=_amount(config, "BUDGET_MONTHLY_COST"),
            monthly_tokens=_amount(config, "BUDGET_MONTHLY_TOKENS", whole=True),
            user_daily_cost=_amount(config, "BUDGET_USER_DAILY_COST"),
            user_daily_tokens=_amount(config, "BUDGET_USER_DAILY_TOKENS", whole=True),
            cost_ceiling=_amount(config, "BUDGET_COST_CEILING"),
            tokens_ceiling=_amount(config, "BUDGET_TOKENS_CEILING", whole=True),
        )


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the app reads of its configuration after start."""

    secret_key: str
    # Secrets at rest: the first encrypts, any decrypts; empty: ``secret_key`` alone.
    encryption_keys: tuple[str, ...]
    chat: ChatSettings
    query: QuerySettings
    spend: SpendSettings = field(default_factory=SpendSettings)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Settings:
        """Read from a config that ``monark.config.load_config`` filled."""
        listed = str(config.get("ENCRYPTION_KEYS") or "").split(",")
        return cls(
            secret_key=str(config["SECRET_KEY"]),
            encryption_keys=tuple(k.strip() for k in listed if k.strip()),
            chat=ChatSettings.from_config(config),
            query=QuerySettings(
                seconds=float(config["RECORDS_QUERY_TIMEOUT"]),
                max_rows=int(config["RECORDS_QUERY_MAX_ROWS"]),
                max_bytes=int(config["RECORDS_QUERY_MAX_BYTES"]),
                max_value=int(config["RECORDS_QUERY_MAX_VALUE"]),
                max_columns=int(config["RECORDS_QUERY_MAX_COLUMNS"]),
            ),
            spend=SpendSettings.from_config(config),
        )


def install(app: Flask, value: Settings | None = None) -> Settings:
    """Keep ``value`` (by default: read from ``app.config``) as the app's settings."""
    value = value if value is not None else Settings.from_config(app.config)
    app.extensions[_KEY] = value
    return value


def settings(app: Flask | None = None) -> Settings:
    """The settings of ``app`` (by default the current one)."""
    found = (app if app is not None else current_app).extensions[_KEY]
    return found  # type: ignore[no-any-return]


def chat_settings(app: Flask | None = None) -> ChatSettings:
    """The assistant's part of them."""
    return settings(app).chat


def spend_settings(app: Flask | None = None) -> SpendSettings:
    """Prices and budgets."""
    return settings(app).spend
