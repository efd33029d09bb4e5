"""What a stored card showed of its target: the card as every storer keeps it (bounded to
``CHAT_CARD_MAX``, with the digest of its whole before side), and that digest, which the
decision paths compare with a card drawn again (the target changed since, or a member
reads it otherwise).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from monark.chat.calls import kept
from monark.core.settings import chat_settings

# The stored card's digest of its whole before side (``before_digest``), taken before the
# card is cut to ``CHAT_CARD_MAX``: a change past what the card kept is still a change.
BEFORE_DIGEST = "before_digest"


def kept_preview(preview: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What is stored of a card's preview: ``kept`` within ``CHAT_CARD_MAX``, with the
    digest of its whole before side. Every preview a call stores is this."""
    if preview is None:
        return None
    digest = before_digest(preview)
    shown = kept(dict(preview), chat_settings().card_max)
    return {**shown, BEFORE_DIGEST: digest}


def _before_side(preview: Mapping[str, Any]) -> list[Any]:
    """What a card shows of the target as it was: the headline naming it, and each
    field's before (and whether the write would leave it as it is)."""
    changes = [
        [str(c.get("field")), c.get("before"), bool(c.get("unchanged"))]
        for c in preview.get("changes") or []
        if isinstance(c, Mapping) and ("before" in c or c.get("unchanged"))
    ]
    return [preview.get("headline"), changes]


def before_digest(preview: Mapping[str, Any]) -> str:
    """A digest of a card's before side, whole: the one it was stored with, or for a card
    stored without one, of what it kept."""
    stored = preview.get(BEFORE_DIGEST)
    if isinstance(stored, str):
        return stored
    side = json.dumps(_before_side(preview), ensure_ascii=True, sort_keys=True, default=repr)
    return hashlib.sha256(side.encode()).hexdigest()
