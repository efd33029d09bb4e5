"""The audit log: the org's domain events, filtered, newest first, in keyset pages.

Plain functions over a Principal, no request access. Events name users, models and records
by id; a page comes with what its rows need to show names and links instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Select, select

from monark.chat.models import Conversation, ConversationKind
from monark.core.models import MAX_ID, ApiKey, Event, User
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records.models import Record, RecordModel
from monark.records.queries import members, reads

PAGE_SIZE = 50
# Every assistant message writes one: a busy assistant buries the rest unless hidden.
CHAT_MESSAGE_EVENT = "chat.message.created"


@dataclass(frozen=True)
class AuditFilters:
    """Which events to list: of one type, by one actor, without chat messages, older than
    ``before`` (the keyset cursor). Empty filters list everything."""

    event_type: str = ""
    # "user", "api_key", "assistant" or "automation" (None: anyone); ``actor_id`` narrows it
    # to one. A user's events include those they made through the assistant.
    actor_kind: str | None = None
    actor_id: int | None = None
    hide_chat: bool = False
    before: int | None = None


@dataclass
class AuditPage:
    """One page of events, and the names its rows show."""

    events: list[Event]
    next_before: int | None  # the cursor of the next (older) page
    users: dict[int, User] = field(default_factory=dict)  # actors and members named
    models: dict[int, str] = field(default_factory=dict)  # model id: name
    records: dict[int, str] = field(default_factory=dict)  # record id: its model's key
    keys: dict[int, str] = field(default_factory=dict)  # API key id: its name
    # An API key's held writes live in a conversation of its own, which nobody opens: a
    # member's decision there is named by the key's name, not by that conversation.
    key_conversations: dict[int, str] = field(default_factory=dict)
    # Events written for a private record the reader may not read: their content is hidden.
    withheld: set[int] = field(default_factory=set)


def _filtered(principal: Principal, filters: AuditFilters) -> Select[Any]:
    stmt = select(Event).where(Event.org_id == principal.org_id)
    if filters.event_type:
        stmt = stmt.where(Event.type == filters.event_type)
    if filters.hide_chat:
        stmt = stmt.where(Event.type != CHAT_MESSAGE_EVENT)
    if filters.actor_kind is not None:
        if filters.actor_kind == "user" and filters.actor_id is not None:
            stmt = stmt.where(Event.actor_kind.in_(("user", "assistant")))
        else:
            stmt = stmt.where(Event.actor_kind == filters.actor_kind)
        if filters.actor_id is not None:
            stmt = stmt.where(Event.actor_id == filters.actor_id)
    if filters.before is not None:
        stmt = stmt.where(Event.id < filters.before)
    return stmt


def audit_page(principal: Principal, filters: AuditFilters) -> AuditPage:
    """Events of the org newest first, ``PAGE_SIZE`` at a time, with the names they show."""
    principal.require("audit.view")
    stmt = _filtered(principal, filters).order_by(Event.id.desc()).limit(PAGE_SIZE + 1)
    rows = list(db.session.scalars(stmt))
    next_before = rows[PAGE_SIZE - 1].id if len(rows) > PAGE_SIZE else None
    page = AuditPage(events=rows[:PAGE_SIZE], next_before=next_before)
    page.users = _users(page.events)
    page.models = _model_names(principal, page.events)
    page.records = _record_models(principal, page.events)
    page.keys, page.key_conversations = _key_names(principal, page.events)
    page.withheld = {e.id for e in page.events if not readable_event(principal, e)}
    return page


# Payload keys that carry content rather than ids (an automation's note).
CONTENT_KEYS = ("note",)


def readable_event(principal: Principal, event: Event) -> bool:
    """Whether the principal may read the content of an event, which a run for a private
    record marks with its readers (``Principal.confined_to``): who may read that record."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    return reads(principal, payload.get("private_to"))


PAYLOAD_MEMBERS = (
    "user_id",
    "requested_by_id",
    "approved_by_id",
    "approver_id",
    "owner_id",
    "previous_owner_id",
    "private_to",
)
# Why an automation was switched off for its owner (``automations.ownership.Owner.lapse``),
# as the audit log's sentence ends.
LAPSES = {
    "no_owner": "it had no owner",
    "owner_left": "its owner{who} left the organization",
    "owner_lost_rights": "its owner{who} lost the right to manage automations",
}


def _users(events: list[Event]) -> dict[int, User]:
    ids = {e.actor_id for e in events if e.actor_kind in ("user", "assistant") and e.actor_id}
    # Member events name the member by id in their payload, and a write decided in the
    # Approvals inbox who asked for it or approved it: show the names instead.
    ids |= {
        e.payload[key]
        for e in events
        if isinstance(e.payload, dict)
        for key in PAYLOAD_MEMBERS
        if isinstance(e.payload.get(key), int)
    }
    if not ids:
        return {}
    return {u.id: u for u in db.session.scalars(select(User).where(User.id.in_(ids)))}


def _key_names(principal: Principal, events: list[Event]) -> tuple[dict[int, str], dict[int, str]]:
    """The names of the API keys acting or acted on, and of those whose held writes'
    conversations the events name (one query each, the org's own only)."""
    key_ids = {e.actor_id for e in events if e.actor_kind == "api_key" and e.actor_id}
    key_ids |= {e.subject_id for e in events if e.subject_type == "api_key" and e.subject_id}
    conversation_ids = {e.conversation_id for e in events if e.conversation_id}
    held = {}
    if conversation_ids:
        rows = db.session.execute(
            select(Conversation.id, Conversation.api_key_id).where(
                Conversation.org_id == principal.org_id,
                Conversation.kind == ConversationKind.API,
                Conversation.id.in_(conversation_ids),
            )
        )
        held = {row.id: row.api_key_id for row in rows if row.api_key_id}
    ids = key_ids | set(held.values())
    if not ids:
        return {}, {}
    keys = select(ApiKey.id, ApiKey.name).where(
        ApiKey.org_id == principal.org_id, ApiKey.id.in_(ids)
    )
    names = {row.id: row.name for row in db.session.execute(keys)}
    return names, {cid: names[kid] for cid, kid in held.items() if kid in names}


def _model_names(principal: Principal, events: list[Event]) -> dict[int, str]:
    """Names for the model ids in payloads."""
    ids = {e.payload.get("model_id") for e in events if isinstance(e.payload, dict)}
    ids = {m for m in ids if isinstance(m, int) and 0 < m <= MAX_ID}
    if not ids:
        return {}
    stmt = select(RecordModel.id, RecordModel.name).where(
        RecordModel.org_id == principal.org_id, RecordModel.id.in_(ids)
    )
    return dict(db.session.execute(stmt).all())


def _record_models(principal: Principal, events: list[Event]) -> dict[int, str]:
    """For links: the model key of each record named that still exists."""
    ids = {e.subject_id for e in events if e.subject_type == "record" and e.subject_id}
    if not ids:
        return {}
    stmt = (
        select(Record.id, RecordModel.key)
        .join(RecordModel, RecordModel.id == Record.model_id)
        .where(Record.org_id == principal.org_id, Record.id.in_(ids))
    )
    return dict(db.session.execute(stmt).all())


def event_types(principal: Principal) -> list[str]:
    """Every event type the org's log holds, in order (for the type filter)."""
    principal.require("audit.view")
    stmt = select(Event.type).where(Event.org_id == principal.org_id).distinct()
    return list(db.session.scalars(stmt.order_by(Event.type)))


def actor_choices(principal: Principal) -> list[tuple[str, str]]:
    """The actor filter's choices, ``(value, label)``: each member, each API key, the
    assistant and automations."""
    principal.require("audit.view")
    choices = [(f"user:{u.id}", u.name) for u in members(principal.org_id)]
    keys = db.session.scalars(select(ApiKey).where(ApiKey.org_id == principal.org_id))
    choices += [(f"api_key:{k.id}", f"API key {k.name}") for k in keys]
    choices.append(("assistant", "The assistant (any user)"))
    choices.append(("automation", "Automations"))
    return choices
