"""Webhook signatures by the Standard Webhooks spec (``standardwebhooks``, its reference
library): ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` headers, HMAC-SHA256
with the automation's ``whsec_…`` secret.

Each automation has its own secret, kept encrypted (``core.crypto``) and shown in clear once,
to the admin who made or rotated it. The rule of a rotation:

* Every secret rotated out in the last ``ROTATION_OVERLAP`` (24 hours) still signs: each
  message carries a signature by the current secret and by each of them (the spec allows
  several, space-separated), so a receiver still holding any of them goes on verifying,
  however often the secret was rotated that day. At most ``MAX_RETIRED`` are kept (the
  newest), which bounds the header.
* A repeat of a rotation (the same form sent twice: a double click, a resubmitted page,
  carrying the form's one-off ``token``) within ``REPEAT_WINDOW`` rotates nothing and
  shows the same new secret again.

What was rotated out, when and by which form is kept encrypted in
``webhook_secret_previous`` (a JSON ``Retired`` state); ``webhook_secret_previous_until`` is
when the newest of them stops signing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from standardwebhooks.webhooks import Webhook

from monark.automations.models import Automation
from monark.core import crypto
from monark.core.models import as_utc, utcnow

PREFIX = "whsec_"
SECRET_BYTES = 24  # 192 bits, as the spec's examples
ROTATION_OVERLAP = timedelta(hours=24)
MAX_RETIRED = 8  # secrets rotated out that still sign: a small, bounded header
REPEAT_WINDOW = timedelta(minutes=10)  # a form sent again this soon repeats, never rotates


def new_secret() -> str:
    """A fresh ``whsec_…`` secret."""
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def message_id() -> str:
    """A ``webhook-id``: the same for every try of one message."""
    return "msg_" + secrets.token_urlsafe(18)


@dataclass(frozen=True)
class RetiredSecret:
    """A secret rotated out, and until when it still signs."""

    secret: str
    until: datetime


@dataclass(frozen=True)
class Retired:
    """What rotations left: the secrets still signing, newest first, and the last rotation
    (when, and the hash of its form's token) to know a repeat of it."""

    secrets: tuple[RetiredSecret, ...] = ()
    rotated_at: datetime | None = None
    token_hash: str | None = None

    def dumps(self) -> str:
        """As the JSON kept (encrypted)."""
        return json.dumps(
            {
                "secrets": [
                    {"secret": r.secret, "until": r.until.isoformat()} for r in self.secrets
                ],
                "rotated_at": self.rotated_at.isoformat() if self.rotated_at else None,
                "token": self.token_hash,
            }
        )


def retired(automation: Automation) -> Retired:
    """The automation's ``Retired`` state (one secret alone, as kept before there were
    several, reads as that one)."""
    if automation.webhook_secret_previous is None:
        return Retired()
    kept = crypto.decrypt(automation.webhook_secret_previous)
    until = as_utc(automation.webhook_secret_previous_until)
    if kept.startswith(PREFIX):
        return Retired((RetiredSecret(kept, until),) if until else ())
    data = json.loads(kept)
    return Retired(
        secrets=tuple(
            RetiredSecret(r["secret"], as_utc(datetime.fromisoformat(r["until"])))
            for r in data.get("secrets", [])
        ),
        rotated_at=as_utc(datetime.fromisoformat(data["rotated_at"]))
        if data.get("rotated_at")
        else None,
        token_hash=data.get("token"),
    )


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def form_token() -> str:
    """A one-off token for a Create/Rotate form: the same form sent twice repeats."""
    return secrets.token_urlsafe(16)


def is_repeat(automation: Automation, token: str | None, now: datetime | None = None) -> bool:
    """Whether a rotation carrying ``token`` repeats the last one (same form, sent again
    within ``REPEAT_WINDOW``)."""
    if not token or automation.webhook_secret is None:
        return False
    state, now = retired(automation), now or utcnow()
    return (
        state.token_hash == _hash(token)
        and state.rotated_at is not None
        and now - state.rotated_at < REPEAT_WINDOW
    )


def current_secret(automation: Automation) -> str:
    """The secret in clear (a repeated rotation shows it again)."""
    return crypto.decrypt(automation.webhook_secret)


def rotate(automation: Automation, token: str | None = None, now: datetime | None = None) -> str:
    """Give ``automation`` a new secret; every secret rotated out in the last
    ``ROTATION_OVERLAP`` signs on beside it. The new secret in clear, for the caller to show
    once. The caller commits."""
    now = now or utcnow()
    fresh, state = new_secret(), retired(automation)
    kept = [r for r in state.secrets if r.until > now]
    if automation.webhook_secret is not None:
        kept.insert(0, RetiredSecret(current_secret(automation), now + ROTATION_OVERLAP))
    kept = kept[:MAX_RETIRED]
    after = Retired(tuple(kept), rotated_at=now, token_hash=_hash(token) if token else None)
    automation.webhook_secret_previous = crypto.encrypt(after.dumps())
    automation.webhook_secret_previous_until = kept[0].until if kept else None
    automation.webhook_secret = crypto.encrypt(fresh)
    return fresh


def ensure_secret(automation: Automation) -> None:
    """Give ``automation`` a secret if it has none (a webhook is never sent unsigned)."""
    if automation.webhook_secret is None:
        automation.webhook_secret = crypto.encrypt(new_secret())


def signing_secrets(automation: Automation, now: datetime | None = None) -> list[str]:
    """The secrets a message is signed with now: the current one, and each one rotated out
    whose overlap lasts (none once ``webhook_secret_previous_until``, the newest's end, is
    past)."""
    now = now or utcnow()
    found = []
    if automation.webhook_secret is not None:
        found.append(current_secret(automation))
    last = as_utc(automation.webhook_secret_previous_until)
    if last is not None and now < last:
        found += [r.secret for r in retired(automation).secrets if now < r.until]
    return found


def headers(msg_id: str, body: str, keys: list[str], now: datetime | None = None) -> dict[str, str]:
    """The three Standard Webhooks headers of ``body`` sent now, signed with each key."""
    now = now or utcnow()
    signatures = " ".join(Webhook(key).sign(msg_id, now, body) for key in keys)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signatures,
    }
