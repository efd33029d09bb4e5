"""Domain events: one row per mutation, added to the caller's transaction."""

from __future__ import annotations

from typing import Any

from monark.core.models import Event
from monark.core.rbac import Principal
from monark.extensions import db


def record_event(
    principal: Principal,
    type: str,
    subject_type: str,
    subject_id: int | None,
    payload: dict[str, Any] | None = None,
) -> Event:
    """Add an event row to the session; it commits or rolls back with the mutation.

    Payloads hold ids and field names, never field values or message content.
    """
    if principal.actor_kind == "assistant":
        actor_id, on_behalf_of = principal.user_id, principal.user_id
    else:
        actor_id, on_behalf_of = principal.actor_id, None
    event = Event(
        org_id=principal.org_id,
        type=type,
        actor_kind=principal.actor_kind,
        actor_id=actor_id,
        on_behalf_of_id=on_behalf_of,
        conversation_id=principal.conversation_id,
        subject_type=subject_type,
        subject_id=subject_id,
        payload=payload or {},
    )
    db.session.add(event)
    return event
