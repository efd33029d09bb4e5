"""The deployment's settings, read once from the app's config into one frozen object.

``monark.config`` reads the environment and holds every default; ``create_app`` builds a
``Settings`` from the result (``install``) and keeps it on the app; code reads it through
``settings()``. Nothing else reads ``app.config`` for these values, and no default is
written a second time. Tests that need another value install a changed copy
(``dataclasses.replace``), as a deployment would start with another environment. A
setting's config key comes from its field's name (``_fields_of``), so no key is listed twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from flask import Flask, current_app

from monark.config import DEFAULT_ASSISTANT_NAME

_KEY = "monark.settings"
# A provider's deployment key is any ``*_API_KEY`` of the config (ANTHROPIC_API_KEY, …).
KEY_SUFFIX = "_API_KEY"


# How a config value becomes a setting of each declared type (a blank or missing number: 0).
_AS: dict[str, Callable[[Any], Any]] = {
    "str": lambda value: str(value or "").strip(),
    "int": lambda value: int(value or 0),
    "float": lambda value: float(value or 0),
    "bool": bool,
}


def _fields_of(cls: type, config: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Each plain field of the dataclass ``cls`` read from its config key, as its declared
    type: ``prefix`` + its name in capitals, unless its metadata names another ``key``."""
    return {
        f.name: _AS[str(f.type)](config[f.metadata.get("key", prefix + f.name.upper())])
        for f in fields(cls)
        if str(f.type) in _AS
    }


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
    assistant_name: str = field(metadata={"key": "MONARK_ASSISTANT_NAME"})
    # The deployment's key of each provider, by its variable's name.
    provider_keys: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ChatSettings:
        """Read from a config that ``monark.config.load_config`` filled."""
        values = _fields_of(cls, config, "CHAT_")
        values["llm_provider"] = values["llm_provider"].lower()
        values["assistant_name"] = values["assistant_name"] or DEFAULT_ASSISTANT_NAME
        return cls(
            **values,
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
    """``records_query``'s limits: seconds, rows, bytes, one value's length, columns; and
    the megabytes of copied rows a process keeps for the next query (0: none)."""

    seconds: float = field(metadata={"key": "RECORDS_QUERY_TIMEOUT"})
    max_rows: int
    max_bytes: int
    max_value: int
    max_columns: int
    cache_mb: int = 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> QuerySettings:
        """Read from a config that ``monark.config.load_config`` filled (the cache's size
        checked, naming its key)."""
        values = _fields_of(cls, config, "RECORDS_QUERY_")
        values["cache_mb"] = _bounded(config, "RECORDS_QUERY_CACHE_MB", 0)
        return cls(**values)


# The largest value a limit may take: a larger one is a typo (or no limit, which is 0).
LIMIT_CEILING = 1_000_000


def _bounded(config: Mapping[str, Any], key: str, low: int) -> int:
    """``config[key]`` as a whole number in [low, LIMIT_CEILING], or an error naming it."""
    raw = config[key]
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = None
    if (
        value is None
        or (isinstance(raw, float) and raw != value)
        or not low <= value <= LIMIT_CEILING
    ):
        raise ValueError(
            f"{key} must be a whole number from {low} to {LIMIT_CEILING}, not {raw!r}."
        )
    return value


@dataclass(frozen=True, slots=True)
class LimitSettings:
    """Rate limits (``monark.core.ratelimit``; 0: off) and /metrics (``monark.core.metrics``)."""

    enabled: bool
    storage_uri: str
    key_prefix: str
    signin_failures: int
    signin_ip_failures: int
    signin_account_failures: int
    signin_window: int  # seconds
    messages_per_minute: int
    decisions_per_minute: int
    api_per_minute: int
    queries_per_minute: int
    turns_per_org: int
    metrics_token: str
    metrics_bind: str

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LimitSettings:
        """Read and check (absurd or negative values are refused, naming the key)."""
        window = config["LIMIT_SIGNIN_WINDOW"]
        if not isinstance(window, int | float) or not 1 <= window <= 86400:
            raise ValueError(f"LIMIT_SIGNIN_WINDOW must be 1 second to 1 day, not {window!r}.")
        return cls(
            enabled=bool(config["RATELIMIT_ENABLED"]),
            storage_uri=str(config["RATELIMIT_STORAGE_URI"] or "memory://"),
            key_prefix=str(config["RATELIMIT_KEY_PREFIX"] or ""),
            signin_failures=_bounded(config, "LIMIT_SIGNIN_FAILURES", 1),
            signin_ip_failures=_bounded(config, "LIMIT_SIGNIN_IP_FAILURES", 1),
            signin_account_failures=_bounded(config, "LIMIT_SIGNIN_ACCOUNT_FAILURES", 1),
            signin_window=int(window),
            messages_per_minute=_bounded(config, "LIMIT_MESSAGES_PER_MINUTE", 0),
            decisions_per_minute=_bounded(config, "LIMIT_DECISIONS_PER_MINUTE", 0),
            api_per_minute=_bounded(config, "LIMIT_API_PER_MINUTE", 0),
            queries_per_minute=_bounded(config, "LIMIT_QUERIES_PER_MINUTE", 0),
            turns_per_org=_bounded(config, "LIMIT_TURNS_PER_ORG", 0),
            metrics_token=str(config["METRICS_TOKEN"] or ""),
            metrics_bind=str(config["METRICS_BIND"] or ""),
        )


@dataclass(frozen=True, slots=True)
class MailSettings:
    """Mail: the SMTP server of ``MAIL_URL`` (none: the outbox folder), sender, links, tries."""

    host: str  # "" when no MAIL_URL: mail goes to the outbox folder
    port: int
    username: str
    password: str
    ssl: bool  # smtps:// (TLS from the first byte)
    starttls: bool  # smtp://…?starttls=1
    sender: str
    public_url: str  # where links in mail point; "": the sending request's own address
    outbox: str  # the outbox folder; "": the instance folder's ``outbox``
    max_attempts: int
    retry_seconds: float
    timeout: float

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> MailSettings:
        """Read from a config that ``monark.config.load_config`` filled."""
        url = str(config.get("MAIL_URL") or "").strip()
        parts = urlsplit(url)
        if url and (parts.scheme not in ("smtp", "smtps") or not parts.hostname):
            raise RuntimeError("MAIL_URL must be smtp://user:pass@host:port or smtps://….")
        try:
            port = parts.port if url else None
        except ValueError:
            raise RuntimeError("MAIL_URL has a port that is not a number.") from None
        flag = parse_qs(parts.query).get("starttls", [""])[0].lower()
        return cls(
            host=parts.hostname or "",
            port=port or (465 if parts.scheme == "smtps" else 25),
            username=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            ssl=parts.scheme == "smtps",
            starttls=flag in ("1", "true", "yes", "on"),
            sender=str(config["MAIL_FROM"]),
            public_url=str(config["PUBLIC_URL"] or "").rstrip("/"),
            outbox=str(config.get("MAIL_OUTBOX") or ""),
            max_attempts=max(int(config["MAIL_MAX_ATTEMPTS"]), 1),
            retry_seconds=max(float(config["MAIL_RETRY_SECONDS"]), 0.0),
            timeout=float(config["MAIL_TIMEOUT"]),
        )


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
class NotificationSettings:
    """The bell's poll, the digest's hour (UTC) and a failing automation's streak."""

    poll_seconds: float = 30.0
    digest_hour: int = 7
    failed_runs: int = 3

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> NotificationSettings:
        """Read and check the ``NOTIFICATIONS_*`` keys."""
        hour = int(config.get("NOTIFICATIONS_DIGEST_HOUR", cls.digest_hour))
        if not 0 <= hour <= 23:
            raise RuntimeError("NOTIFICATIONS_DIGEST_HOUR must be an hour from 0 to 23.")
        return cls(
            poll_seconds=max(float(config.get("NOTIFICATIONS_POLL", cls.poll_seconds)), 0.5),
            digest_hour=hour,
            failed_runs=max(int(config.get("NOTIFICATIONS_FAILED_RUNS", cls.failed_runs)), 1),
        )


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the app reads of its configuration after start."""

    secret_key: str
    # Secrets at rest: the first encrypts, any decrypts; empty: ``secret_key`` alone.
    encryption_keys: tuple[str, ...]
    chat: ChatSettings
    query: QuerySettings
    limits: LimitSettings
    mail: MailSettings
    # The issuer an authenticator app shows a two-factor code under (``TOTP_ISSUER``).
    totp_issuer: str
    # How far a record list's total is counted (``RECORDS_LIST_TOTAL_CAP``): past it, the
    # list says "more than" this many.
    list_total_cap: int = 1000
    spend: SpendSettings = field(default_factory=SpendSettings)
    notifications: NotificationSettings = field(default_factory=NotificationSettings)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Settings:
        """Read from a config that ``monark.config.load_config`` filled."""
        listed = str(config.get("ENCRYPTION_KEYS") or "").split(",")
        return cls(
            secret_key=str(config["SECRET_KEY"]),
            encryption_keys=tuple(k.strip() for k in listed if k.strip()),
            chat=ChatSettings.from_config(config),
            query=QuerySettings.from_config(config),
            limits=LimitSettings.from_config(config),
            mail=MailSettings.from_config(config),
            spend=SpendSettings.from_config(config),
            notifications=NotificationSettings.from_config(config),
            totp_issuer=_issuer(config),
            list_total_cap=_bounded(config, "RECORDS_LIST_TOTAL_CAP", 1),
        )


def _issuer(config: Mapping[str, Any]) -> str:
    issuer = str(config["TOTP_ISSUER"]).strip()
    # A colon separates issuer and account in the otpauth label; apps show some 60 characters.
    if not issuer or ":" in issuer or len(issuer) > 60:
        raise RuntimeError("TOTP_ISSUER must be 1-60 characters, without a colon.")
    return issuer


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
