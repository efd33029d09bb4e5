"""API keys: ``mrk_`` + random, shown once, stored as a SHA-256 digest."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from monark.core.errors import ValidationFailed
from monark.core.events import save_new
from monark.core.models import ApiKey, Membership, as_utc, utcnow
from monark.core.rbac import ROLES, Principal
from monark.core.tokens import API_KEYS, new_token, revoke, token_digest
from monark.extensions import db

KEY_PREFIX = "mrk_"
# Writing last_used_at on every call would make each read a write; a minute is precise enough.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def list_keys(principal: Principal) -> list[ApiKey]:
    """The org's keys, newest first."""
    principal.require("apikeys.manage")
    stmt = select(ApiKey).where(ApiKey.org_id == principal.org_id).order_by(ApiKey.id.desc())
    return list(db.session.scalars(stmt))


def create_key(
    principal: Principal, name: str, role: str, writes_need_approval: bool = True
) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the plaintext token, which is never stored.

    A new key's writes wait for a member's approval unless asked otherwise."""
    principal.require("apikeys.manage")
    name = (name or "").strip()
    problems = []
    if not name or len(name) > 120:
        problems.append({"field": "name", "message": "Give the key a name (1-120 characters)."})
    if role not in ROLES:
        problems.append({"field": "role", "message": f"Choose one of: {', '.join(ROLES)}."})
    elif ROLES.index(role) < ROLES.index(principal.role):  # type: ignore[arg-type]
        problems.append({"field": "role", "message": "A key cannot have a higher role than yours."})
    if problems:
        raise ValidationFailed("The key is invalid.", problems)
    token = new_token(KEY_PREFIX, 32)
    key = ApiKey(
        org_id=principal.org_id,
        name=name,
        role=role,
        prefix=token[:10],
        key_hash=token_digest(token),
        created_by_id=principal.user_id,
        writes_need_approval=writes_need_approval,
    )
    payload = {"writes_need_approval": writes_need_approval}
    return save_new(
        principal, key, "apikey.created", "api_key", payload, id_key="api_key_id"
    ), token


def revoke_key(principal: Principal, key_id: int) -> ApiKey:
    """Revoke a key of the org; revoking twice is harmless."""
    principal.require("apikeys.manage")
    return revoke(principal, API_KEYS, key_id, {"api_key_id": key_id})


def _weaker(role: str, other: str) -> str:
    return role if ROLES.index(role) >= ROLES.index(other) else other  # type: ignore[arg-type]


def authenticate_key(token: str) -> Principal | None:
    """The principal for a live key, or ``None`` for an unknown or revoked one.

    A key never outranks its creator: it acts with the weaker of its own role and the
    creator's current role in the org, and stops working when the creator leaves.
    """
    if not token.startswith(KEY_PREFIX):
        return None
    key = db.session.scalar(select(ApiKey).where(ApiKey.key_hash == token_digest(token)))
    if key is None or key.revoked_at is not None:
        return None
    principal = _key_principal(key)
    if principal is None:
        return None
    now = utcnow()
    last = as_utc(key.last_used_at)
    if last is None or now - last > LAST_USED_RESOLUTION:
        key.last_used_at = now
        db.session.commit()
    return principal


def _key_principal(key: ApiKey) -> Principal | None:
    """A live key's principal: the weaker of its role and its creator's (None once the
    creator left the org)."""
    creator_role = db.session.scalar(
        select(Membership.role).where(
            Membership.user_id == key.created_by_id, Membership.org_id == key.org_id
        )
    )
    if creator_role is None:
        return None
    return Principal.for_api_key(key.id, key.org_id, _weaker(key.role, creator_role))


def key_principal(org_id: int, key_id: int) -> Principal | None:
    """The principal key ``key_id`` of the org acts as now (None when revoked, or when its
    creator left): an approved write of the key runs as this."""
    key = db.session.get(ApiKey, key_id)
    if key is None or key.org_id != org_id or key.revoked_at is not None:
        return None
    return _key_principal(key)
