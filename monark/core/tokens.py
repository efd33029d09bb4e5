"""Secrets shown once and stored as a digest: API keys and invitation links.

Both are a prefix and random bytes, handed out in clear only when made, found again by the
SHA-256 digest of what their holder presents, and revoked the same way.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any, TypeVar

from sqlalchemy import select

from monark.core.errors import NotFound
from monark.core.events import record_event
from monark.core.models import ApiKey, Invite, utcnow
from monark.core.rbac import Principal
from monark.extensions import db

Revocable = TypeVar("Revocable", ApiKey, Invite)


def new_token(prefix: str, nbytes: int) -> str:
    """A fresh secret: ``prefix`` and ``nbytes`` random bytes, URL-safe."""
    return prefix + secrets.token_urlsafe(nbytes)


def token_digest(token: str) -> str:
    """What is stored of a token: its SHA-256, in hex."""
    # Tokens carry 192 or more random bits, so a fast hash is safe; a slow KDF would only
    # cost latency.
    return hashlib.sha256(token.encode()).hexdigest()


def revoke(
    principal: Principal,
    model: type[Revocable],
    row_id: int,
    *,
    missing: str,
    event: str,
    subject_type: str,
    payload: dict[str, Any] | None = None,
) -> Revocable:
    """Revoke the org's key or invitation ``row_id``, with its event; ``NotFound`` (saying
    ``missing``) for any other. One that no longer works is left as it is."""
    row = db.session.scalar(
        select(model).where(model.id == row_id, model.org_id == principal.org_id)
    )
    if row is None:
        raise NotFound(missing)
    if row.revocable:
        row.revoked_at = utcnow()
        record_event(principal, event, subject_type, row.id, payload)
    db.session.commit()
    return row
