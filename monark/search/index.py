"""The search index kept in step: ``search_documents`` rows rewritten on every flush.

One listener on every session's flush (as ``records/index.py`` does for the value index)
rewrites the documents of each record, wiki page, automation, conversation and message
inserted, changed in what it indexes or reads by, or deleted, in the flush's own
transaction, so no write path can forget it. Archived wiki pages and conversations have
no document (restoring one writes it again). The full-text part of the index is the
database's own (``FULLTEXT_DDL``): it follows this table by itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    DDL,
    Integer,
    String,
    Text,
    and_,
    bindparam,
    delete,
    event,
    insert,
    inspect,
    literal,
    or_,
    select,
    text,
)
from sqlalchemy.orm import Session

from monark.automations.models import Automation
from monark.chat.models import Conversation, ConversationKind, Message, MessageRole
from monark.core.models import create_with
from monark.core.text import storable
from monark.core.upsert import upsert
from monark.records.index import private_to
from monark.records.models import Record, RecordModel
from monark.search.models import SearchDocument
from monark.wiki.models import WikiPage

# What a snippet's match is marked with (private-use characters, taken out of indexed
# text so content can never forge a mark); ``services.marked`` turns them into <mark>.
START, STOP = "\ue000", "\ue001"
# How much of a body is indexed: a wiki page far longer than any real one stays indexable
# (PostgreSQL's tsvector holds at most 1 MB).
MAX_BODY = 100_000
INDEXED_ROLES = (MessageRole.USER, MessageRole.ASSISTANT)

# The full-text index over ``title`` and ``body``, as each database builds it; the
# migration runs the same statements.
SQLITE_DDL = (
    "CREATE VIRTUAL TABLE search_fts USING fts5(title, body, content='search_documents',"
    " content_rowid='id', tokenize='porter unicode61 remove_diacritics 2', prefix='2 3')",
    "CREATE TRIGGER search_documents_ai AFTER INSERT ON search_documents BEGIN"
    " INSERT INTO search_fts(rowid, title, body) VALUES (new.id, new.title, new.body); END",
    "CREATE TRIGGER search_documents_ad AFTER DELETE ON search_documents BEGIN"
    " INSERT INTO search_fts(search_fts, rowid, title, body)"
    " VALUES ('delete', old.id, old.title, old.body); END",
    "CREATE TRIGGER search_documents_au AFTER UPDATE ON search_documents BEGIN"
    " INSERT INTO search_fts(search_fts, rowid, title, body)"
    " VALUES ('delete', old.id, old.title, old.body);"
    " INSERT INTO search_fts(rowid, title, body) VALUES (new.id, new.title, new.body); END",
)
POSTGRES_DDL = (
    "ALTER TABLE search_documents ADD COLUMN search_vector tsvector GENERATED ALWAYS AS"
    " (setweight(to_tsvector('english', title), 'A')"
    " || setweight(to_tsvector('english', body), 'B')) STORED",
    "CREATE INDEX ix_search_documents_search_vector ON search_documents USING GIN (search_vector)",
)
# The parts of the schema that no model describes (``tests/test_migrations.py`` knows them).
FTS_TABLE, VECTOR_COLUMN = "search_fts", "search_vector"

_table = SearchDocument.__table__
create_with(_table, SQLITE_DDL, POSTGRES_DDL)
# Triggers go with their table; the FTS5 table must be dropped by name.
event.listen(
    _table, "before_drop", DDL(f"DROP TABLE IF EXISTS {FTS_TABLE}").execute_if(dialect="sqlite")
)


def indexable(value: str | None, limit: int = MAX_BODY) -> str:
    """Text as the index holds it: storable, cut to ``limit``, no snippet marker in it."""
    return storable((value or "")[:limit]).replace(START, " ").replace(STOP, " ")


def automation_words(automation: Automation) -> str:
    """What an automation is about, beyond its name: its trigger and the kinds of its steps
    (never their settings, which may hold a webhook's address)."""
    graph = automation.graph or {}
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    kinds = [str(n.get("type", "")) for n in nodes or [] if isinstance(n, dict)]
    words = [automation.trigger_type or "", automation.trigger_model or "", *kinds]
    return " ".join(w.replace(".", " ").replace("_", " ") for w in words if w)


def _record_doc(r: Record) -> dict[str, Any]:
    return {
        "org_id": r.org_id,
        "model_id": r.model_id,
        "private_to": private_to(r.visibility or "org", r.creator_id),
        "title": indexable(r.title, 300),
        "body": indexable(r.search_text),
    }


def _wiki_doc(p: WikiPage) -> dict[str, Any] | None:
    if p.archived:
        return None
    return {"org_id": p.org_id, "title": indexable(p.title, 300), "body": indexable(p.body)}


def _automation_doc(a: Automation) -> dict[str, Any]:
    return {"org_id": a.org_id, "title": indexable(a.name, 300), "body": automation_words(a)}


def _conversation_doc(c: Conversation) -> dict[str, Any] | None:
    if c.kind != ConversationKind.AI or c.archived:
        return None
    return {
        "org_id": c.org_id,
        "parent_id": c.id,
        "owner_id": c.creator_id,
        "title": indexable(c.title, 300),
    }


# What moves a conversation's messages in or out of the index with it.
_MOVES = ("archived", "creator_id", "kind")
# What each kind's document is made of: the class, its kind, the attributes whose change
# rewrites it, and the document (None: it has none).
_KINDS: tuple[tuple[type, str, tuple[str, ...], Any], ...] = (
    (Record, "record", ("title", "search_text", "visibility", "creator_id"), _record_doc),
    (WikiPage, "wiki", ("title", "body", "archived"), _wiki_doc),
    (Automation, "automation", ("name", "graph", "trigger_type", "trigger_model"), _automation_doc),
    (Conversation, "conversation", ("title", *_MOVES), _conversation_doc),
)


def _changed(row: Any, attributes: tuple[str, ...]) -> bool:
    attrs = inspect(row).attrs
    return any(attrs[a].history.has_changes() for a in attributes)


# A document's key: one per thing.
_KEY = ("kind", "object_id")


def _message_upsert(conn: Any) -> Any:
    """One statement writing a message's document with its conversation's owner, read in
    the statement itself, when that conversation has a document of its own."""
    select_doc = select(
        bindparam("org_id", type_=Integer),
        literal("message", String),
        bindparam("object_id", type_=Integer),
        Conversation.id,
        Conversation.creator_id,
        literal("", String),
        bindparam("body", type_=Text),
    ).where(
        Conversation.id == bindparam("parent_id", type_=Integer),
        Conversation.kind == ConversationKind.AI,
        Conversation.archived.is_(False),
    )
    columns = ["org_id", "kind", "object_id", "parent_id", "owner_id", "title", "body"]
    return upsert(conn, _table, _KEY, (columns, select_doc))


def _indexed(message: Message) -> bool:
    """Whether a message has words to index (its conversation aside)."""
    return message.role in INDEXED_ROLES and bool(message.text)


def _sync(session: Session, _flush_context: Any) -> None:
    """Rewrite the documents of what this flush inserted, changed or deleted.

    A row new in this flush has no document to take away (ids are never reused), so it is
    only written; a changed one is rewritten in place (an upsert), or taken away when it
    has none any more; a deleted one is taken away.
    """
    gone: dict[str, set[int]] = {}
    fresh: list[dict[str, Any]] = []
    dirty = list(session.dirty)
    for cls, kind, attributes, document in _KINDS:
        new = [r for r in session.new if isinstance(r, cls)]
        changed = [r for r in dirty if isinstance(r, cls) and _changed(r, attributes)]
        dropped = {r.id for r in session.deleted if isinstance(r, cls)}
        for row, was_there in [(r, False) for r in new] + [(r, True) for r in changed]:
            doc = document(row)
            if doc is not None:
                fresh.append({"kind": kind, "object_id": row.id, **doc})
            elif was_there:  # it had one, and has none now (archived, not the assistant's)
                dropped.add(row.id)
        if dropped:
            gone[kind] = dropped
    changed_messages = [
        m for m in dirty if isinstance(m, Message) and _changed(m, ("text", "role"))
    ]
    messages = [m for m in session.new if isinstance(m, Message) and _indexed(m)]
    messages += [m for m in changed_messages if _indexed(m)]
    gone_messages = [m.id for m in session.deleted if isinstance(m, Message)]
    gone_messages += [m.id for m in changed_messages if not _indexed(m)]
    # A conversation archived, restored, given away or deleted takes its messages along.
    conversations = {c.id for c in dirty if isinstance(c, Conversation) and _changed(c, _MOVES)} | {
        c.id for c in session.deleted if isinstance(c, Conversation)
    }
    gone_models = [m.id for m in session.deleted if isinstance(m, RecordModel)]
    if not (gone or fresh or messages or gone_messages or conversations or gone_models):
        return
    conn = session.connection()
    where = [
        and_(SearchDocument.kind == kind, SearchDocument.object_id.in_(ids))
        for kind, ids in gone.items()
    ]
    if gone_messages:
        where.append(
            and_(SearchDocument.kind == "message", SearchDocument.object_id.in_(gone_messages))
        )
    if conversations:
        where.append(
            and_(SearchDocument.kind == "message", SearchDocument.parent_id.in_(conversations))
        )
    if gone_models:  # its records went by one bulk statement, unseen here
        where.append(SearchDocument.model_id.in_(gone_models))
    if where:
        conn.execute(delete(SearchDocument).where(or_(*where)))
    restored = [
        c.id
        for c in dirty
        if isinstance(c, Conversation) and c.id in conversations and _conversation_doc(c)
    ]
    if restored:  # every message of these, read back (those of ``messages`` among them)
        fresh += _conversation_messages(conn, restored)
    messages = [m for m in messages if m.conversation_id not in restored]
    if messages:
        # A message of a conversation without a document (archived, not the assistant's)
        # gets none, and has none to take away: that conversation's went with it.
        rows = [
            {
                "org_id": m.org_id,
                "object_id": m.id,
                "parent_id": m.conversation_id,
                "body": indexable(m.text),
            }
            for m in messages
        ]
        conn.execute(_message_upsert(conn), rows)
    # One document per thing, whichever way this flush found it.
    unique = {(d["kind"], d["object_id"]): _complete(d) for d in fresh}
    if unique:
        conn.execute(upsert(conn, _table, _KEY), list(unique.values()))


def _complete(doc: dict[str, Any]) -> dict[str, Any]:
    """Every column, so one insert takes them all."""
    base = {"model_id": None, "parent_id": None, "private_to": None, "owner_id": None}
    return {"body": "", **base, **doc}


def _conversation_messages(conn: Any, conversation_ids: list[int]) -> list[dict[str, Any]]:
    """The documents of every message of conversations (one put back from the archive)."""
    rows = conn.execute(
        select(
            Message.id,
            Message.org_id,
            Message.conversation_id,
            Message.text,
            Conversation.creator_id,
        )
        .join(Conversation, Conversation.id == Message.conversation_id)
        .where(
            Message.conversation_id.in_(conversation_ids),
            Message.role.in_(INDEXED_ROLES),
            Message.text != "",
        )
    )
    return [
        {
            "kind": "message",
            "object_id": mid,
            "org_id": org_id,
            "parent_id": cid,
            "owner_id": owner,
            "title": "",
            "body": indexable(body),
        }
        for mid, org_id, cid, body, owner in rows
    ]


event.listen(Session, "after_flush", _sync)


# ---- rebuilding ------------------------------------------------------------------------

# The documents of everything but automations, as INSERT … SELECT (the migration's
# backfill spells out the same); automations' words are read from their graphs in Python.
REBUILD_SQL = (
    "INSERT INTO search_documents (org_id, kind, object_id, model_id, private_to, title, body)"
    " SELECT org_id, 'record', id, model_id,"
    " CASE WHEN visibility = 'private' THEN COALESCE(creator_id, 0) END,"
    " substr(title, 1, 300), substr(search_text, 1, 100000) FROM records",
    "INSERT INTO search_documents (org_id, kind, object_id, title, body)"
    " SELECT org_id, 'wiki', id, substr(title, 1, 300), substr(body, 1, 100000)"
    " FROM wiki_pages WHERE archived = :no",
    "INSERT INTO search_documents (org_id, kind, object_id, parent_id, owner_id, title, body)"
    " SELECT org_id, 'conversation', id, id, creator_id, substr(title, 1, 300), ''"
    " FROM chat_conversations WHERE kind = 'ai' AND archived = :no",
    "INSERT INTO search_documents (org_id, kind, object_id, parent_id, owner_id, title, body)"
    " SELECT m.org_id, 'message', m.id, m.conversation_id, c.creator_id, '',"
    " substr(m.text, 1, 100000) FROM chat_messages m"
    " JOIN chat_conversations c ON c.id = m.conversation_id"
    " WHERE c.kind = 'ai' AND c.archived = :no AND m.role IN ('user', 'assistant')"
    " AND m.text <> ''",
)


def index_automations(session: Session, automations: Iterable[Automation]) -> int:
    """Write the documents of automations (none of them indexed yet); how many."""
    rows = [{"kind": "automation", "object_id": a.id, **_automation_doc(a)} for a in automations]
    if rows:
        session.connection().execute(insert(SearchDocument), [_complete(r) for r in rows])
    return len(rows)


def reindex_all(session: Session) -> int:
    """Rebuild the whole index from the tables (``flask search reindex``); how many
    documents it holds now."""
    conn = session.connection()
    conn.execute(delete(SearchDocument))
    for sql in REBUILD_SQL:
        conn.execute(text(sql), {"no": False})
    index_automations(session, session.scalars(select(Automation)))
    if conn.dialect.name == "sqlite":  # the FTS5 index, merged into one segment
        conn.execute(text(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('optimize')"))
    return session.query(SearchDocument).count()
