"""The panel's list of a person's conversations: listed (most recent first), renamed,
archived. Which conversation is a person's own, and how one is made, is chat's
(``chat.store``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import literal, select, tuple_

from monark.chat.models import Conversation, ConversationKind
from monark.chat.store import get_conversation
from monark.core.errors import ValidationFailed
from monark.core.events import record_event
from monark.core.ids import parse_id
from monark.core.rbac import Principal
from monark.extensions import db
from monark.search import services as search

PAGE_SIZE = 50  # conversations a page of the list shows
# Matches a search of the list ranks at most (the best first): past it, the list says so
# and asks for more words rather than paging through a ranking.
SEARCH_LIMIT = search.MAX_LIMIT


@dataclass(frozen=True)
class Cursor:
    """Where a page of the list goes on from: the last shown conversation's place."""

    last_activity_at: datetime
    id: int

    def __str__(self) -> str:
        return f"{self.last_activity_at.isoformat()}~{self.id}"


@dataclass(frozen=True)
class ConversationPage:
    """One page of the list, most recent first, and where the next starts (None: the last)."""

    conversations: list[Conversation]
    next: Cursor | None


@dataclass(frozen=True)
class ConversationSearch:
    """The principal's conversations matching a search, best first, each with its marked
    title and snippet; ``capped``: there may be more than were ranked."""

    query: str
    hits: list[search.Hit]
    capped: bool


def search_conversations(principal: Principal, query: str) -> ConversationSearch:
    """The principal's own listed conversations whose title or messages match ``query`` (as
    it is being typed: the last word may be a prefix), by the search index; refused
    (``ValidationFailed``) when the query is too long."""
    rows = search.matches(principal, query, SEARCH_LIMIT, typing=True, only=("conversation",))
    return ConversationSearch(query, search.hits_of(rows), len(rows) >= SEARCH_LIMIT)


def parse_cursor(raw: str | None) -> Cursor | None:
    """The cursor a "More" link carries; ``ValidationFailed`` naming ``after`` if it is none."""
    if not raw:
        return None
    stamp, _, ident = raw.partition("~")
    try:
        when = datetime.fromisoformat(stamp)
        conversation_id = parse_id(ident, "after", "query")
    except ValueError:
        conversation_id = None
    if conversation_id is None:
        raise ValidationFailed(
            "Invalid after.", [{"field": "after", "in": "query", "message": "Not a list position."}]
        )
    return Cursor(when if when.tzinfo else when.replace(tzinfo=UTC), conversation_id)


def _listed(principal: Principal):
    return (
        select(Conversation)
        .where(
            Conversation.org_id == principal.org_id,
            Conversation.creator_id == principal.user_id,
            Conversation.archived.is_(False),
            Conversation.kind == ConversationKind.AI,
        )
        .order_by(Conversation.last_activity_at.desc(), Conversation.id.desc())
    )


def list_conversations(principal: Principal, limit: int = PAGE_SIZE) -> list[Conversation]:
    """The principal's conversations, most recent activity first."""
    return list(db.session.scalars(_listed(principal).limit(limit)))


def conversation_page(
    principal: Principal, after: Cursor | None = None, size: int = PAGE_SIZE
) -> ConversationPage:
    """A page of the principal's conversations: the first, or the one after ``after``."""
    stmt = _listed(principal)
    if after is not None:
        stmt = stmt.where(
            tuple_(Conversation.last_activity_at, Conversation.id)
            < tuple_(
                literal(after.last_activity_at, Conversation.last_activity_at.type),
                literal(after.id, Conversation.id.type),
            )
        )
    rows = list(db.session.scalars(stmt.limit(size + 1)))
    shown = rows[:size]
    more = len(rows) > size
    return ConversationPage(
        shown, Cursor(shown[-1].last_activity_at, shown[-1].id) if more else None
    )


def resume_target(principal: Principal, remembered: int | None) -> int | None:
    """The conversation the panel opens on: ``remembered`` while it is still the principal's
    and listed, else their most recently active one (None: there is none)."""
    stmt = _listed(principal).with_only_columns(Conversation.id).limit(1)
    if remembered is not None:
        found = db.session.scalar(stmt.where(Conversation.id == remembered))
        if found is not None:
            return found
    return db.session.scalar(stmt)


def rename_conversation(principal: Principal, conversation_id: int, title: str) -> Conversation:
    """Give a conversation another title."""
    conversation = get_conversation(principal, conversation_id)
    title = " ".join((title or "").split())
    if not title or len(title) > 200:
        raise ValidationFailed(
            "Invalid title.", [{"field": "title", "message": "Give 1-200 characters."}]
        )
    conversation.title = title
    record_event(
        principal,
        "chat.conversation.renamed",
        "conversation",
        conversation.id,
        {"conversation_id": conversation.id},
    )
    db.session.commit()
    return conversation


def archive_conversation(principal: Principal, conversation_id: int) -> None:
    """Remove a conversation from the user's list; its rows stay for the audit trail."""
    conversation = get_conversation(principal, conversation_id)
    conversation.archived = True
    record_event(
        principal,
        "chat.conversation.archived",
        "conversation",
        conversation.id,
        {"conversation_id": conversation.id},
    )
    db.session.commit()
