"""Configuration read from the environment, with overrides for tests."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


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
    if url.startswith("sqlite"):
        # Wait up to 15 s for another writer instead of failing with "database is locked".
        return {"connect_args": {"timeout": 15}}
    return {"pool_pre_ping": True}


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


def _assistant_config() -> dict[str, Any]:
    """The assistant's settings (its provider, limits, long conversations, turns)."""
    return {
        # Each provider's deployment key (ANTHROPIC_API_KEY, OPENAI_API_KEY, …), used when an
        # org sets none of its own: every ``*_API_KEY`` of the environment.
        **{name: value for name, value in os.environ.items() if name.endswith("_API_KEY")},
        "ANTHROPIC_API_KEY": os.environ.get("ANTHROPIC_API_KEY", ""),
        "CHAT_LLM_PROVIDER": os.environ.get("CHAT_LLM_PROVIDER", "anthropic"),
        "CHAT_LLM_MODEL": os.environ.get("CHAT_LLM_MODEL", "claude-sonnet-5-5"),
        "CHAT_LLM_MAX_TOKENS": int(os.environ.get("CHAT_LLM_MAX_TOKENS", "4096")),
        # The deployment's provider endpoint (an OpenAI-compatible or local server, say).
        "CHAT_LLM_BASE_URL": os.environ.get("CHAT_LLM_BASE_URL", "").strip(),
        # Model steps per turn; an org may set its own, up to the caps.
        "CHAT_MAX_STEPS": int(os.environ.get("CHAT_MAX_STEPS", "8")),
        "CHAT_MAX_STEPS_CAP": int(os.environ.get("CHAT_MAX_STEPS_CAP", "32")),
        "CHAT_LLM_MAX_TOKENS_CAP": int(os.environ.get("CHAT_LLM_MAX_TOKENS_CAP", "32768")),
        # Let an org point its model at loopback or private addresses (a model on this host
        # or network); off: an org admin must not make the server probe the network.
        "CHAT_LLM_ALLOW_PRIVATE": _bool("CHAT_LLM_ALLOW_PRIVATE", False),
        # Secrets at rest (orgs' provider keys): comma-separated, the first encrypts, any
        # decrypts (rotation: see README); empty: SECRET_KEY.
        "ENCRYPTION_KEYS": os.environ.get("ENCRYPTION_KEYS", "").strip(),
        # Long conversations (``monark.chat.compaction``). The model's context window in
        # tokens; 0: the provider's own (its descriptor says it: 200k for Anthropic, …). Set
        # it for a model with a smaller window than its provider's usual one (a local model);
        # it applies to turns on CHAT_LLM_PROVIDER (an org's own provider keeps its window).
        "CHAT_CONTEXT_WINDOW": int(os.environ.get("CHAT_CONTEXT_WINDOW", "0")),
        # Shares of that window: past the first, older tool results reach the model as
        # one-line stubs; past the second, the oldest turns are replaced by a summary the
        # model writes. The stored messages keep everything either way.
        "CHAT_CONTEXT_STUB_AT": float(os.environ.get("CHAT_CONTEXT_STUB_AT", "0.5")),
        "CHAT_CONTEXT_COMPACT_AT": float(os.environ.get("CHAT_CONTEXT_COMPACT_AT", "0.75")),
        # Seconds: to connect to the model, and of silence from it before the step fails.
        "CHAT_LLM_CONNECT_TIMEOUT": float(os.environ.get("CHAT_LLM_CONNECT_TIMEOUT", "10")),
        "CHAT_LLM_TIMEOUT": float(os.environ.get("CHAT_LLM_TIMEOUT", "60")),
        # The SDK's own retries of overloaded and failed requests (with backoff).
        "CHAT_LLM_MAX_RETRIES": int(os.environ.get("CHAT_LLM_MAX_RETRIES", "2")),
        # Provider clients (one per key and endpoint in use) a process keeps open; the least
        # recently used beyond this is closed once no reply streams on it.
        "CHAT_LLM_CLIENT_CACHE": int(os.environ.get("CHAT_LLM_CLIENT_CACHE", "64")),
        # A running turn renews its lease about every second; a turn whose process died
        # frees its conversation when the lease runs out.
        "CHAT_TURN_LEASE_SECONDS": float(os.environ.get("CHAT_TURN_LEASE_SECONDS", "8")),
        # A turn with no sign of life this long (a tool or a lock that hangs) is no longer
        # renewed: its conversation is freed when the lease runs out.
        "CHAT_TURN_STALL_SECONDS": float(os.environ.get("CHAT_TURN_STALL_SECONDS", "300")),
        # Redis for the turns' progress (redis://host:6379/0), so a watcher on one instance
        # follows a turn running on another; empty: in this process only.
        "CHAT_BROKER_URL": os.environ.get("CHAT_BROKER_URL", "").strip(),
        # How long a proposed write waits for a decision: older, it expires (nothing runs).
        "CHAT_APPROVAL_TTL": _duration("CHAT_APPROVAL_TTL", "7d"),
        # How long an "Allow <tool> for this conversation" holds without activity in the
        # conversation: idle longer, it lapses (each write asks again).
        "CHAT_ALLOWANCE_IDLE": _duration("CHAT_ALLOWANCE_IDLE", "1h"),
        # How long an open panel waits on one connection for another member's decision on
        # what it shows waiting for them (it connects again after).
        "CHAT_AWAIT_SECONDS": _duration("CHAT_AWAIT_SECONDS", "25s"),
        # How long one tool call may run (reads and writes): past it, its statement is
        # stopped, its writes are rolled back and the model reads that it timed out.
        "CHAT_TOOL_TIMEOUT": _duration("CHAT_TOOL_TIMEOUT", "15s"),
        # Characters of JSON one stored tool result keeps, and one block of a card shows
        # (its arguments, its result): past them, cut with a marker saying what was left out.
        "CHAT_TOOL_RESULT_MAX": int(os.environ.get("CHAT_TOOL_RESULT_MAX", "100000")),
        "CHAT_CARD_MAX": int(os.environ.get("CHAT_CARD_MAX", "20000")),
        "CHAT_AI_AGENT_ENABLED": _bool("CHAT_AI_AGENT_ENABLED", True),
        "MONARK_ASSISTANT_NAME": os.environ.get("MONARK_ASSISTANT_NAME", DEFAULT_ASSISTANT_NAME),
    }


def _spend_config() -> dict[str, Any]:
    """Spend (``monark.settings.budgets``): prices, and budgets' defaults and ceilings."""
    env = os.environ.get
    return {
        # A TOML price table over the shipped one (``monark/chat/llm/prices.toml``, same
        # form); empty: the shipped one alone.
        "PRICES_FILE": env("PRICES_FILE", "").strip(),
        # An org's budget when its admins set none (empty: none): US dollars a month, tokens
        # a month (of models without a price), and a member's daily cap in each.
        "BUDGET_MONTHLY_COST": env("BUDGET_MONTHLY_COST", "").strip(),
        "BUDGET_MONTHLY_TOKENS": env("BUDGET_MONTHLY_TOKENS", "").strip(),
        "BUDGET_USER_DAILY_COST": env("BUDGET_USER_DAILY_COST", "").strip(),
        "BUDGET_USER_DAILY_TOKENS": env("BUDGET_USER_DAILY_TOKENS", "").strip(),
        # The most an org's admins may set (empty: no ceiling); a monthly budget above it
        # is refused, and a stored one counts as the ceiling.
        "BUDGET_COST_CEILING": env("BUDGET_COST_CEILING", "").strip(),
        "BUDGET_TOKENS_CEILING": env("BUDGET_TOKENS_CEILING", "").strip(),
    }


def load_config(instance_path: str) -> dict[str, Any]:
    """Build the Flask config mapping from environment variables."""
    return {
        # Empty: create_app falls back on a random key kept in the instance folder.
        "SECRET_KEY": os.environ.get("SECRET_KEY", "").strip(),
        "SQLALCHEMY_DATABASE_URI": _database_url(instance_path),
        "SESSION_COOKIE_HTTPONLY": True,
        "SESSION_COOKIE_SAMESITE": "Lax",
        "SESSION_COOKIE_SECURE": _bool("SESSION_COOKIE_SECURE", False),
        "REMEMBER_COOKIE_HTTPONLY": True,
        "REMEMBER_COOKIE_SAMESITE": "Lax",
        "MAX_CONTENT_LENGTH": int(os.environ.get("MAX_CONTENT_LENGTH", str(1024 * 1024))),
        "WTF_CSRF_ENABLED": True,
        "WTF_CSRF_TIME_LIMIT": None,
        "PASSWORD_HASH_METHOD": os.environ.get("PASSWORD_HASH_METHOD", "scrypt"),
        # How many reverse proxies sit in front (their X-Forwarded-* headers are trusted):
        # client addresses for the sign-in throttle, https links in invitations.
        "TRUSTED_PROXIES": int(os.environ.get("TRUSTED_PROXIES", "0")),
        **_assistant_config(),
        **_spend_config(),
        # records_query: seconds one statement may run, and rows one answer shows.
        "RECORDS_QUERY_TIMEOUT": float(os.environ.get("RECORDS_QUERY_TIMEOUT", "3")),
        "RECORDS_QUERY_MAX_ROWS": int(os.environ.get("RECORDS_QUERY_MAX_ROWS", "200")),
        # ... and how big one answer is (bytes of JSON, whatever its first row), how long
        # one value it shows (characters), how many columns it may have.
        "RECORDS_QUERY_MAX_BYTES": int(os.environ.get("RECORDS_QUERY_MAX_BYTES", "20000")),
        "RECORDS_QUERY_MAX_VALUE": int(os.environ.get("RECORDS_QUERY_MAX_VALUE", "4000")),
        "RECORDS_QUERY_MAX_COLUMNS": int(os.environ.get("RECORDS_QUERY_MAX_COLUMNS", "200")),
        # Automations: how deep runs may trigger runs, and how many runs one change may set
        # off in all, however the chain branches.
        "AUTOMATION_MAX_DEPTH": int(os.environ.get("AUTOMATION_MAX_DEPTH", "5")),
        "AUTOMATION_MAX_RUNS": int(os.environ.get("AUTOMATION_MAX_RUNS", "50")),
        # Whether webhooks may reach loopback and private addresses (off: an org admin must
        # not probe the network).
        "AUTOMATION_WEBHOOK_ALLOW_PRIVATE": _bool("AUTOMATION_WEBHOOK_ALLOW_PRIVATE", False),
        # How long a run (with its steps) is kept: older ones are pruned every hour.
        "AUTOMATION_RUN_RETENTION": _duration("AUTOMATION_RUN_RETENTION", "90d"),
        # The job queue (``monark.core.jobs``): redis://host:6379/0 to share it between
        # machines; sqlite:///path for a file of your choice; empty: a SQLite file beside a
        # SQLite database (else in the instance folder).
        "JOBS_URL": os.environ.get("JOBS_URL", "").strip(),
        # Threads of the consumer ``flask run`` starts in its own process.
        "JOBS_WORKERS": int(os.environ.get("JOBS_WORKERS", "2")),
        # Minutes between sweeps for committed events whose work never ran (1-60).
        "JOBS_SWEEP_MINUTES": int(os.environ.get("JOBS_SWEEP_MINUTES", "1")),
        # Webhooks (``automations.webhooks``): tries in all, the first retry's delay, how
        # much longer each next one waits, and the random share added or taken (6 tries over
        # about 2 hours by default: 1, 3, 9, 27 and 81 minutes apart).
        "WEBHOOK_MAX_ATTEMPTS": int(os.environ.get("WEBHOOK_MAX_ATTEMPTS", "6")),
        "WEBHOOK_RETRY_SECONDS": float(os.environ.get("WEBHOOK_RETRY_SECONDS", "60")),
        "WEBHOOK_RETRY_FACTOR": float(os.environ.get("WEBHOOK_RETRY_FACTOR", "3")),
        "WEBHOOK_RETRY_JITTER": float(os.environ.get("WEBHOOK_RETRY_JITTER", "0.1")),
        # A run's lease, renewed at each step: a run whose worker died is settled after it.
        "AUTOMATION_RUN_LEASE_SECONDS": float(
            os.environ.get("AUTOMATION_RUN_LEASE_SECONDS", "120")
        ),
        # Sweeps of one event before it is given up (its runs keep failing to start).
        "AUTOMATION_SWEEP_ATTEMPTS": int(os.environ.get("AUTOMATION_SWEEP_ATTEMPTS", "5")),
    }
