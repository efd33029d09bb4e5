"""Secrets shown once and stored as a digest: API keys and invitation links.

Both are a prefix and random bytes, handed out in clear only when made, found again by the
SHA-256 digest of what their holder presents, and revoked the same way.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import select

from monark.core.errors import NotFound
from monark.core.events import record_event
from monark.core.models import ApiKey, Invite, utcnow
from monark.core.rbac import Principal
from monark.extensions import db

Revocable = TypeVar("Revocable", ApiKey, Invite)


@dataclass(frozen=True)
class TokenKind(Generic[Revocable]):
    """What differs between API keys and invitations when one is looked up and revoked."""

    model: type[Revocable]
    subject_type: str  # of its events
    revoked_event: str
    missing: str  # the message for an id the org does not have


API_KEYS = TokenKind(ApiKey, "api_key", "apikey.revoked", "No such API key.")
INVITES = TokenKind(Invite, "invite", "invite.revoked", "No such invitation.")


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
    kind: TokenKind[Revocable],
    row_id: int,
    payload: dict[str, Any] | None = None,
) -> Revocable:
    """Revoke the org's key or invitation ``row_id``, with its event; ``NotFound`` for any
    other. One that no longer works is left as it is."""
    model = kind.model
    row = db.session.scalar(
        select(model).where(model.id == row_id, model.org_id == principal.org_id)
    )
    if row is None:
        raise NotFound(kind.missing)
    if row.revocable:
        row.revoked_at = utcnow()
        record_event(principal, kind.revoked_event, kind.subject_type, row.id, payload)
    db.session.commit()
    return row
