"""Secrets kept at rest (an org's model provider key), encrypted with Fernet.

The keys come from the deployment: ``ENCRYPTION_KEYS``, a comma-separated list of secrets,
the first of which encrypts and any of which decrypts (``MultiFernet``), so a key can be
rotated without a moment when old values cannot be read: put the new secret first, run
``flask rotate-secrets`` (everything is encrypted anew with it), then drop the old one.
Without ``ENCRYPTION_KEYS`` the app's ``SECRET_KEY`` is the one secret. Each secret becomes
a Fernet key through HKDF-SHA256, so any string of enough entropy will do.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from monark.core.settings import settings


class SecretUnreadable(Exception):
    """A stored secret that none of the deployment's keys opens (the key was dropped)."""


def _fernet(secret: str) -> Fernet:
    derived = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"monark-secrets", info=b"fernet"
    ).derive(secret.encode())
    return Fernet(base64.urlsafe_b64encode(derived))


def secret_box() -> MultiFernet:
    """The deployment's keys: ``ENCRYPTION_KEYS`` (first encrypts), else ``SECRET_KEY``."""
    known = settings()
    secrets = known.encryption_keys or (known.secret_key,)
    return MultiFernet([_fernet(s) for s in secrets])


def encrypt(text: str) -> str:
    """``text`` encrypted with the deployment's first key."""
    return secret_box().encrypt(text.encode()).decode()


def decrypt(token: str) -> str:
    """A stored secret in clear; ``SecretUnreadable`` when no key of the deployment opens it."""
    try:
        return secret_box().decrypt(token.encode()).decode()
    except InvalidToken:
        which = "ENCRYPTION_KEYS" if settings().encryption_keys else "SECRET_KEY"
        raise SecretUnreadable(
            f"A stored key cannot be read with this deployment's {which} (was it changed?)."
        ) from None


def rotate(token: str) -> str:
    """A stored secret encrypted anew with the first key (any listed key may open it)."""
    return secret_box().rotate(token.encode()).decode()
