"""Where each hit leads (needs an app context: ``url_for``)."""

from __future__ import annotations

from flask import url_for

from monark.search.services import Hit


def url_of(hit: Hit) -> str:
    """The page of what a hit found; a conversation's is the panel's thread of it."""
    if hit.kind == "record":
        return url_for("records.record_detail", key=hit.model_key, record_id=hit.object_id)
    if hit.kind == "wiki":
        return url_for("wiki.page", page_id=hit.object_id)
    if hit.kind == "automation":
        return url_for("automations.detail", automation_id=hit.object_id)
    return url_for("assistant.conversation", conversation_id=hit.conversation_id)
