"""Webhook signatures by the Standard Webhooks spec (``standardwebhooks``, its reference
library): ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` headers, HMAC-SHA256
with the automation's ``whsec_…`` secret.

Each automation has its own secret, kept encrypted (``core.crypto``) and shown in clear once,
to the admin who made or rotated it. A rotation keeps the old secret for
``ROTATION_OVERLAP``: until then every message carries a signature by each (the spec allows
several, space-separated), so a receiver still holding the old one goes on verifying.
"""

from __future__ import annotations

import base64
import secrets
from datetime import datetime, timedelta

from standardwebhooks.webhooks import Webhook

from monark.automations.models import Automation
from monark.core import crypto
from monark.core.models import as_utc, utcnow

PREFIX = "whsec_"
SECRET_BYTES = 24  # 192 bits, as the spec's examples
ROTATION_OVERLAP = timedelta(hours=24)


def new_secret() -> str:
    """A fresh ``whsec_…`` secret."""
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def message_id() -> str:
    """A ``webhook-id``: the same for every try of one message."""
    return "msg_" + secrets.token_urlsafe(18)


def rotate(automation: Automation) -> str:
    """Give ``automation`` a new secret (the old one signs on for ``ROTATION_OVERLAP``); the
    new secret in clear, for the caller to show once. The caller commits."""
    fresh = new_secret()
    if automation.webhook_secret is not None:
        automation.webhook_secret_previous = automation.webhook_secret
        automation.webhook_secret_previous_until = utcnow() + ROTATION_OVERLAP
    automation.webhook_secret = crypto.encrypt(fresh)
    return fresh


def ensure_secret(automation: Automation) -> None:
    """Give ``automation`` a secret if it has none (a webhook is never sent unsigned)."""
    if automation.webhook_secret is None:
        automation.webhook_secret = crypto.encrypt(new_secret())


def signing_secrets(automation: Automation, now: datetime | None = None) -> list[str]:
    """The secrets a message is signed with now: the current one, and the previous one
    while its overlap lasts."""
    now = now or utcnow()
    found = []
    if automation.webhook_secret is not None:
        found.append(crypto.decrypt(automation.webhook_secret))
    until = as_utc(automation.webhook_secret_previous_until)
    if automation.webhook_secret_previous is not None and until is not None and now < until:
        found.append(crypto.decrypt(automation.webhook_secret_previous))
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
