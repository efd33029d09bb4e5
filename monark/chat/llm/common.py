"""What every provider adapter shares."""

from __future__ import annotations


def redact(text: str, secret: str) -> str:
    """``text`` without ``secret``: a provider's error may echo what it was sent (a key)."""
    if secret and len(secret) >= 4 and secret in text:
        text = text.replace(secret, "[redacted]")
    return text
