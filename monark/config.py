"""Configuration read from the environment, with overrides for tests.

Each variable is written once, with its default, in a table (``_ASSISTANT``, ``_DEPLOYMENT``);
the default's type says how its value is read (``_read``).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# The assistant's name when the deployment sets none (or a blank one).
DEFAULT_ASSISTANT_NAME = "Chrysa"


def _duration(name: str, default: str) -> float:
    """Seconds from ``7d``, ``36h``, ``90m``, ``600s`` or a plain number of seconds."""
    raw = (os.environ.get(name) or default).strip().lower()
    unit = _UNITS.get(raw[-1:], 0)
    try:
        seconds = float(raw[:-1] if unit else raw) * (unit or 1)
    except ValueError:
        seconds = -1
    if not seconds > 0:
        raise RuntimeError(f"{name} must be a positive duration such as 7d, 36h or 600 (seconds).")
    return seconds


@dataclass(frozen=True, slots=True)
class Duration:
    """A default written as a duration (``7d``, ``36h``, ``90m``, ``600s``), read as seconds."""

    text: str


Default = str | bool | int | float | Duration


def _read(name: str, default: Default) -> Any:
    """The variable ``name`` as its default's type (a blank one: the default)."""
    if isinstance(default, Duration):
        return _duration(name, default.text)
    raw = os.environ.get(name, "").strip()
    if not raw or isinstance(default, str):
        return raw or default
    if isinstance(default, bool):
        return raw.lower() in {"1", "true", "yes", "on"}
    try:
        return type(default)(raw)
    except ValueError:
        kind = "a whole number" if isinstance(default, int) else "a number"
        raise RuntimeError(f"{name} must be {kind}, such as {default}.") from None


def _environment(defaults: dict[str, Default]) -> dict[str, Any]:
    """Each variable of ``defaults`` read from the environment (``_read``)."""
    return {name: _read(name, default) for name, default in defaults.items()}


def _database_url(instance_path: str) -> str:
    url = os.environ.get("DATABASE_URL", "").strip()
    if not url:
        return "sqlite:///" + str(Path(instance_path) / "monark.db")
    # psycopg 3 is the driver; accept the common spellings of a PostgreSQL URL.
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def engine_options(url: str) -> dict[str, Any]:
    """Engine settings that suit the database behind ``url``."""
    # A database error's text leaves out its statement's values (a reply, a record's
    # fields, a token's hash): it reaches logs, which are read by more people than the data.
    private = {"hide_parameters": True}
    if url.startswith("sqlite"):
        # Wait up to 15 s for another writer instead of failing with "database is locked".
        return {**private, "connect_args": {"timeout": 15}}
    return {**private, "pool_pre_ping": True}


def instance_secret_key(instance_path: str) -> str:
    """A random key made once and kept in ``instance/secret_key`` (mode 0600).

    Used when ``SECRET_KEY`` is not set, so that no deployment ever runs with a key that is
    published in the source. Instances that share sessions (several machines behind a load
    balancer) must set ``SECRET_KEY`` to one value instead.
    """
    path = Path(instance_path) / "secret_key"
    if not path.exists():
        # Written aside, then linked into place: two workers starting at once agree on one.
        tmp = path.with_name(f".secret_key.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # a filesystem without hard links: last writer wins, still atomic
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    key = path.read_text().strip()
    if len(key) < 32:
        raise RuntimeError(f"{path} holds no usable key; delete it to make a new one.")
    return key


# The assistant's variables and their defaults (each read as its default's type).
_ASSISTANT: dict[str, Default] = {
    "ANTHROPIC_API_KEY": "",
    "CHAT_LLM_PROVIDER": "anthropic",
    "CHAT_LLM_MODEL": "claude-sonnet-5-5",
    "CHAT_LLM_MAX_TOKENS": 4096,
    # The deployment's provider endpoint (an OpenAI-compatible or local server, say).
    "CHAT_LLM_BASE_URL": "",
    # Model steps per turn; an org may set its own, up to the caps.
    "CHAT_MAX_STEPS": 8,
    "CHAT_MAX_STEPS_CAP": 32,
    "CHAT_LLM_MAX_TOKENS_CAP": 32768,
    # Let an org point its model at loopback or private addresses (a model on this host
    # or network); off: an org admin must not make the server probe the network.
    "CHAT_LLM_ALLOW_PRIVATE": False,
    # Secrets at rest (orgs' provider keys): comma-separated, the first encrypts, any
    # decrypts (rotation: see README); empty: SECRET_KEY.
    "ENCRYPTION_KEYS": "",
    # Long conversations (``monark.chat.compaction``). The model's context window in
    # tokens; 0: the provider's own (its descriptor says it: 200k for Anthropic, …). Set
    # it for a model with a smaller window than its provider's usual one (a local model);
    # it applies to turns on CHAT_LLM_PROVIDER (an org's own provider keeps its window).
    "CHAT_CONTEXT_WINDOW": 0,
    # Shares of that window: past the first, older tool results reach the model as
    # one-line stubs; past the second, the oldest turns are replaced by a summary the
    # model writes. The stored messages keep everything either way.
    "CHAT_CONTEXT_STUB_AT": 0.5,
    "CHAT_CONTEXT_COMPACT_AT": 0.75,
    # Seconds: to connect to the model, and of silence from it before the step fails.
    "CHAT_LLM_CONNECT_TIMEOUT": 10.0,
    "CHAT_LLM_TIMEOUT": 60.0,
    # The SDK's own retries of overloaded and failed requests (with backoff).
    "CHAT_LLM_MAX_RETRIES": 2,
    # Provider clients (one per key and endpoint in use) a process keeps open; the least
    # recently used beyond this is closed once no reply streams on it.
    "CHAT_LLM_CLIENT_CACHE": 64,
    # A running turn renews its lease about every second; a turn whose process died
    # frees its conversation when the lease runs out.
    "CHAT_TURN_LEASE_SECONDS": 8.0,
    # A turn with no sign of life this long (a tool or a lock that hangs) is no longer
    # renewed: its conversation is freed when the lease runs out.
    "CHAT_TURN_STALL_SECONDS": 300.0,
    # Redis for the turns' progress (redis://host:6379/0), so a watcher on one instance
    # follows a turn running on another; empty: in this process only.
    "CHAT_BROKER_URL": "",
    # How long a proposed write waits for a decision: older, it expires (nothing runs).
    "CHAT_APPROVAL_TTL": Duration("7d"),
    # How long an "Allow <tool> for this conversation" holds without activity in the
    # conversation: idle longer, it lapses (each write asks again).
    "CHAT_ALLOWANCE_IDLE": Duration("1h"),
    # How long an open panel waits on one connection for another member's decision on
    # what it shows waiting for them (it connects again after).
    "CHAT_AWAIT_SECONDS": Duration("25s"),
    # How long one tool call may run (reads and writes): past it, its statement is
    # stopped, its writes are rolled back and the model reads that it timed out.
    "CHAT_TOOL_TIMEOUT": Duration("15s"),
    # Characters of JSON one stored tool result keeps, and one block of a card shows
    # (its arguments, its result): past them, cut with a marker saying what was left out.
    "CHAT_TOOL_RESULT_MAX": 100000,
    "CHAT_CARD_MAX": 20000,
    "CHAT_AI_AGENT_ENABLED": True,
    "MONARK_ASSISTANT_NAME": DEFAULT_ASSISTANT_NAME,
}


# The deployment's other variables and their defaults (each read as its default's type).
_DEPLOYMENT: dict[str, Default] = {
    # Empty: create_app falls back on a random key kept in the instance folder.
    "SECRET_KEY": "",
    "SESSION_COOKIE_SECURE": False,
    "MAX_CONTENT_LENGTH": 1024 * 1024,
    "PASSWORD_HASH_METHOD": "scrypt",
    # How many reverse proxies sit in front (their X-Forwarded-* headers are trusted):
    # client addresses for the sign-in limits, https links in invitations.
    "TRUSTED_PROXIES": 0,
    # records_query: seconds one statement may run, and rows one answer shows.
    "RECORDS_QUERY_TIMEOUT": 3.0,
    "RECORDS_QUERY_MAX_ROWS": 200,
    # ... and how big one answer is (bytes of JSON, whatever its first row), how long
    # one value it shows (characters), how many columns it may have.
    "RECORDS_QUERY_MAX_BYTES": 20000,
    "RECORDS_QUERY_MAX_VALUE": 4000,
    "RECORDS_QUERY_MAX_COLUMNS": 200,
    # Megabytes of copied rows each process keeps for the next records_query (a copy is
    # reused while its models' records and its caller's rights are unchanged; the least
    # recently used goes first); 0: every query copies its rows afresh.
    "RECORDS_QUERY_CACHE_MB": 256,
    # How far a record list's total is counted: exact up to this many matches, past it
    # "more than" this many (counting a million matches takes most of a second).
    "RECORDS_LIST_TOTAL_CAP": 1000,
    # Automations: how deep runs may trigger runs, and how many runs one change may set
    # off in all, however the chain branches.
    "AUTOMATION_MAX_DEPTH": 5,
    "AUTOMATION_MAX_RUNS": 50,
    # Whether webhooks may reach loopback and private addresses (off: an org admin must
    # not probe the network).
    "AUTOMATION_WEBHOOK_ALLOW_PRIVATE": False,
    # How long a run (with its steps) is kept: older ones are pruned every hour.
    "AUTOMATION_RUN_RETENTION": Duration("90d"),
    # The job queue (``monark.core.jobs``): redis://host:6379/0 to share it between
    # machines; sqlite:///path for a file of your choice; empty: a SQLite file beside a
    # SQLite database (else in the instance folder).
    "JOBS_URL": "",
    # Threads of the consumer ``flask run`` starts in its own process.
    "JOBS_WORKERS": 2,
    # Minutes between sweeps for committed events whose work never ran (1-60).
    "JOBS_SWEEP_MINUTES": 1,
    # Webhooks (``automations.webhooks``): tries in all, the first retry's delay, how
    # much longer each next one waits, and the random share added or taken (6 tries over
    # about 2 hours by default: 1, 3, 9, 27 and 81 minutes apart).
    "WEBHOOK_MAX_ATTEMPTS": 6,
    "WEBHOOK_RETRY_SECONDS": 60.0,
    "WEBHOOK_RETRY_FACTOR": 3.0,
    "WEBHOOK_RETRY_JITTER": 0.1,
    # A run's lease, renewed at each step: a run whose worker died is settled after it.
    "AUTOMATION_RUN_LEASE_SECONDS": 120.0,
    # Sweeps of one event before it is given up (its runs keep failing to start).
    "AUTOMATION_SWEEP_ATTEMPTS": 5,
}


def _assistant_config() -> dict[str, Any]:
    """The assistant's settings (its provider, limits, long conversations, turns)."""
    return {
        # Each provider's deployment key (ANTHROPIC_API_KEY, OPENAI_API_KEY, …), used when an
        # org sets none of its own: every ``*_API_KEY`` of the environment.
        **{name: value for name, value in os.environ.items() if name.endswith("_API_KEY")},
        **_environment(_ASSISTANT),
    }


# Rate limits (Flask-Limiter's own ``RATELIMIT_*`` variables, then ours) and /metrics; the
# ranges are checked by ``core.settings``.
_LIMITS: dict[str, Default] = {
    # Where the counts live: memory:// (each process counts alone) or redis://host:6379/0
    # (shared by every worker and instance).
    "RATELIMIT_STORAGE_URI": "memory://",
    "RATELIMIT_KEY_PREFIX": "monark",
    "RATELIMIT_ENABLED": True,
    # Failed sign-ins within the window: one email from one address, one address
    # whatever the email, one email from anywhere (high: no lock-out by strangers).
    "LIMIT_SIGNIN_FAILURES": 10,
    "LIMIT_SIGNIN_IP_FAILURES": 50,
    "LIMIT_SIGNIN_ACCOUNT_FAILURES": 100,
    "LIMIT_SIGNIN_WINDOW": Duration("15m"),
    # Per minute: turns a user starts (messages, retries), decisions a user takes on cards
    # (Confirm, Reject, Allow, Confirm selected: counted apart, so that confirming a run of
    # cards leaves the messages' count alone; each starts a continuation, hence a limit),
    # calls of one API key (/api/v1, so MCP too), records_query calls of one principal; and
    # turns running at once in one org. 0 turns a limit off.
    "LIMIT_MESSAGES_PER_MINUTE": 20,
    "LIMIT_DECISIONS_PER_MINUTE": 120,
    "LIMIT_API_PER_MINUTE": 300,
    "LIMIT_QUERIES_PER_MINUTE": 30,
    "LIMIT_TURNS_PER_ORG": 10,
    # /metrics: off unless a bearer token is set or it has a bind of its own
    # (host:port, served by gunicorn's master-side exporter, no token).
    "METRICS_TOKEN": "",
    "METRICS_BIND": "",
}


# Accounts (``monark.core.two_factor``): the issuer an authenticator app lists a code under.
_ACCOUNTS: dict[str, Default] = {
    "TOTP_ISSUER": "Monark",
}


# Mail (``monark.core.mail``) and its defaults (each read as its default's type).
_MAIL: dict[str, Default] = {
    # smtp://user:pass@host:587 (STARTTLS with ``?starttls=1``) or smtps://user:pass@host:465;
    # empty: each message is written to instance/outbox as an .eml file (and shown at
    # /dev/outbox under ``flask run``).
    "MAIL_URL": "",
    "MAIL_FROM": "Monark <monark@localhost>",
    # Where links in mail point (https://monark.example.com); empty: the address the
    # request that sends the mail came to (trust it only behind a proxy that fixes Host).
    "PUBLIC_URL": "",
    # The outbox folder used without MAIL_URL; empty: instance/outbox.
    "MAIL_OUTBOX": "",
    # Tries of one message in all, and the first retry's delay (each next one waits
    # three times longer): a server that is down or says "try later" (4xx) is tried again.
    "MAIL_MAX_ATTEMPTS": 5,
    "MAIL_RETRY_SECONDS": 60.0,
    "MAIL_TIMEOUT": 15.0,
}


# Notifications (``monark.notifications``): the bell, mail and the digest.
_NOTIFICATIONS: dict[str, Default] = {
    # How often an open page asks for the bell's unread count (paused while the tab is
    # hidden, asked again as it shows).
    "NOTIFICATIONS_POLL": Duration("30s"),
    # The hour (0-23) of each member's own clock after which their daily digest goes out.
    "NOTIFICATIONS_DIGEST_HOUR": 7,
    # Failed runs in a row of one automation that notify its owner (once per streak).
    "NOTIFICATIONS_FAILED_RUNS": 3,
}


# Spend (``monark.settings.budgets``): prices, and budgets' defaults and ceilings (blank: none;
# the amounts are checked by ``core.settings``).
_SPEND: dict[str, Default] = {
    # A TOML price table over the shipped one (``monark/settings/prices.toml``, same
    # form); empty: the shipped one alone.
    "PRICES_FILE": "",
    # An org's budget when its admins set none (empty: none): US dollars a month, tokens
    # a month (of models without a price), and a member's daily cap in each.
    "BUDGET_MONTHLY_COST": "",
    "BUDGET_MONTHLY_TOKENS": "",
    "BUDGET_USER_DAILY_COST": "",
    "BUDGET_USER_DAILY_TOKENS": "",
    # The most an org's admins may set (empty: no ceiling); a monthly budget above it
    # is refused, and a stored one counts as the ceiling.
    "BUDGET_COST_CEILING": "",
    "BUDGET_TOKENS_CEILING": "",
}


def load_config(instance_path: str) -> dict[str, Any]:
    """Build the Flask config mapping from environment variables."""
    return {
        "SQLALCHEMY_DATABASE_URI": _database_url(instance_path),
        "SESSION_COOKIE_HTTPONLY": True,
        "SESSION_COOKIE_SAMESITE": "Lax",
        "REMEMBER_COOKIE_HTTPONLY": True,
        "REMEMBER_COOKIE_SAMESITE": "Lax",
        "WTF_CSRF_ENABLED": True,
        "WTF_CSRF_TIME_LIMIT": None,
        **_environment(_DEPLOYMENT),
        **_assistant_config(),
        **_environment(_LIMITS),
        **_environment(_MAIL),
        **_environment(_NOTIFICATIONS),
        **_environment(_SPEND),
        **_environment(_ACCOUNTS),
    }
