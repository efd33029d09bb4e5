"""Reading the search index: a query as plain words, matched, filtered by the reader's
rights in SQL, ranked (bm25 on SQLite, ts_rank on PostgreSQL), with snippets marked."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple

from markupsafe import Markup, escape
from sqlalchemy import (
    ColumnElement,
    and_,
    case,
    column,
    false,
    func,
    literal_column,
    or_,
    select,
    table,
)

from monark.chat.models import Conversation
from monark.core.errors import ValidationFailed
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records.models import RecordModel
from monark.records.queries import readable_by
from monark.search.index import FTS_TABLE, START, STOP, VECTOR_COLUMN
from monark.search.models import SearchDocument as D

MAX_QUERY = 200  # characters: a search, not a document
MAX_TERMS = 8
MAX_TERM = 64
MAX_LIMIT = 50
# How many matches are ranked at most: a word nearly every document has would otherwise
# rank them all on each keystroke. Past it, the newest (SQLite) or the first the index
# yields (PostgreSQL) are ranked; every match below it is ranked exactly.
CANDIDATES = 1000
# A word of any script; everything else (FTS operators, quotes, NUL, a lone surrogate)
# separates words, so a query is only ever plain words, each quoted.
_WORD = re.compile(r"\w+")
# Words too common to narrow anything, left out unless the query is nothing else (the same
# list on both databases, so a query means the same on each).
STOP_WORDS = frozenset(
    {
        "a",
        "about",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "me",
        "of",
        "on",
        "or",
        "our",
        "say",
        "says",
        "tell",
        "that",
        "the",
        "this",
        "to",
        "was",
        "we",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    }
)
Kind = Literal["record", "wiki", "automation", "conversation"]
# The kinds as people read them, in the order the results show them.
GROUPS: dict[Kind, str] = {
    "wiki": "Wiki pages",
    "record": "Records",
    "automation": "Automations",
    "conversation": "Conversations",
}


@dataclass(frozen=True)
class Hit:
    """One thing found: what it is, its title and snippet (text with ``START``/``STOP``
    around each match), and what its link needs."""

    kind: Kind
    object_id: int
    title: str
    snippet: str
    model_key: str | None = None  # a record's model
    conversation_id: int | None = None  # a conversation's, or a message's

    @property
    def title_html(self) -> Markup:
        return marked(self.title)

    @property
    def snippet_html(self) -> Markup:
        return marked(self.snippet)

    @property
    def plain_snippet(self) -> str:
        return unmarked(self.snippet)


def marked(snippet: str) -> Markup:
    """A snippet as HTML: its text escaped first, then each match in ``<mark>``."""
    html = str(escape(snippet))
    return Markup(html.replace(START, "<mark>").replace(STOP, "</mark>"))


def unmarked(snippet: str) -> str:
    """A snippet as plain text, its marks dropped."""
    return snippet.replace(START, "").replace(STOP, "")


def terms(query: str) -> list[str]:
    """The words of a query, lowercased, common ones left out; refused when too long."""
    if len(query) > MAX_QUERY:
        raise ValidationFailed(
            f"A search is at most {MAX_QUERY} characters.",
            [{"field": "q", "message": f"Shorten it to {MAX_QUERY} characters or fewer."}],
        )
    words = [w[:MAX_TERM] for w in _WORD.findall(query.lower())]
    kept = [w for w in words if w not in STOP_WORDS] or words
    return list(dict.fromkeys(kept))[:MAX_TERMS]


# A word naming a kind ("what does our wiki say about refunds?") puts that kind's matches
# first, and is not itself looked for, when the query has other words.
KIND_WORDS: dict[str, tuple[str, ...]] = {
    "wiki": ("wiki",),
    "page": ("wiki",),
    "pages": ("wiki",),
    "record": ("record",),
    "records": ("record",),
    "automation": ("automation",),
    "automations": ("automation",),
    "conversation": ("conversation", "message"),
    "conversations": ("conversation", "message"),
    "chat": ("conversation", "message"),
    "chats": ("conversation", "message"),
}


def hinted(words: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """The words to look for, and the kinds a word of them named (first such word wins)."""
    named = [w for w in words if w in KIND_WORDS]
    rest = [w for w in words if w not in KIND_WORDS]
    if not named or not rest:
        return words, ()
    return rest, KIND_WORDS[named[0]]


def _first(kinds: tuple[str, ...]) -> Any:
    """A column ``first``: 0 for ``kinds`` (all of them when no kind was named), else 1."""
    if not kinds:
        return literal_column("0").label("first")
    return case((D.kind.in_(kinds), 0), else_=1).label("first")


@dataclass(frozen=True)
class _Wanted:
    """What one ranking looks for: ``words`` (``every`` one, or any), the last a prefix
    while ``typing``; at most ``limit`` documents, those of ``kinds`` (a word named) first."""

    words: tuple[str, ...]
    every: bool
    typing: bool
    limit: int
    kinds: tuple[str, ...]

    def fts5(self, prefix: bool) -> str:
        """An FTS5 expression of the quoted words (``prefix``: the last one is a prefix, and
        stemmed as the words are, so "refunds"* still finds "refund")."""
        quoted = [f'"{w}"' for w in self.words]
        if prefix:
            quoted[-1] += "*"
        return (" AND " if self.every else " OR ").join(quoted)

    def tsquery(self) -> str:
        """A ``to_tsquery`` expression of the quoted words (while typing, the last a prefix)."""
        quoted = [f"'{w}'" for w in self.words]
        if self.typing:
            quoted[-1] += ":*"
        return (" & " if self.every else " | ").join(quoted)


def readable(principal: Principal, exclude_conversation: int | None = None) -> ColumnElement[bool]:
    """The documents the principal may read, as SQL: records by records' own rule, wiki
    pages and automations by their view permissions, conversations their owner's alone."""
    kinds: list[ColumnElement[bool]] = []
    if principal.can("records.view"):
        kinds.append(and_(D.kind == "record", readable_by(principal, D.private_to)))
    if principal.can("wiki.view"):
        kinds.append(D.kind == "wiki")
    if principal.can("automation.view"):
        kinds.append(D.kind == "automation")
    if principal.user_id is not None and principal.can("chat.use"):
        mine = and_(D.kind.in_(("conversation", "message")), D.owner_id == principal.user_id)
        if exclude_conversation is not None:
            mine = and_(mine, D.parent_id != exclude_conversation)
        kinds.append(mine)
    if not kinds:
        return false()
    return and_(D.org_id == principal.org_id, or_(*kinds))


class Match(NamedTuple):
    """One ranked document, its title and snippet marked."""

    kind: str
    object_id: int
    model_id: int | None
    parent_id: int | None
    title: str
    snippet: str


# The FTS5 table as SQL sees it (no model: ``index.SQLITE_DDL`` makes it).
_FTS = table(FTS_TABLE, column("rowid"))
# Its rowid as an expression FTS5 is not asked to use (``+``): a filter on the rows it yields.
_NOT_INDEXED_ROWID = literal_column(f"+{FTS_TABLE}.rowid")


def _top_sqlite(where: ColumnElement[bool], match: str, wanted: _Wanted) -> tuple[list[Any], bool]:
    """The best ``wanted.limit`` of the newest ``CANDIDATES`` matches the reader may read, by bm25
    (titles weigh ten times the body); and whether there were that many candidates."""
    matches = literal_column(FTS_TABLE).op("MATCH")(match)
    rank = literal_column(f"bm25({FTS_TABLE}, 10.0, 1.0)").label("rank")
    candidates = (
        select(D.id, D.kind, D.object_id, D.model_id, D.parent_id, rank, _first(wanted.kinds))
        .select_from(D.__table__.join(_FTS, _FTS.c.rowid == D.id))
        .where(matches, where)
        .order_by(_FTS.c.rowid.desc())  # the index's own order: no sort of every match
        .limit(CANDIDATES)
        .subquery()
    )
    c = candidates.c
    ranked = select(c, func.count().over().label("candidates"))
    top = db.session.execute(ranked.order_by(c.first, c.rank, c.id).limit(wanted.limit)).all()
    return top, bool(top) and top[0].candidates >= CANDIDATES


def _ranked_sqlite(where: ColumnElement[bool], wanted: _Wanted) -> list[Match]:
    """``_top_sqlite``'s rows, their title and snippet marked (made for those alone).

    While typing, the words are tried whole first: a word with ``CANDIDATES`` whole-word
    matches (a common word typed out) ranks those, as the prefix would rank some of the
    same, without FTS5 merging the doclists of every word it begins (the cost of a
    prefix past the ``prefix='2 3'`` index: 20 ms for a common word's, at each lookup)."""
    match = wanted.fts5(prefix=False)
    top, full = _top_sqlite(where, match, wanted)
    if wanted.typing and not full:
        match = wanted.fts5(prefix=True)
        top, _ = _top_sqlite(where, match, wanted)
    if not top:
        return []
    matches = literal_column(FTS_TABLE).op("MATCH")(match)
    title = literal_column(f"highlight({FTS_TABLE}, 0, '{START}', '{STOP}')")
    snippet = literal_column(f"snippet({FTS_TABLE}, 1, '{START}', '{STOP}', '…', 16)")
    # The shown rows by one pass over the match between the lowest and highest of them:
    # FTS5 takes ``rowid IN (…)`` as one lookup per id, and each lookup of a prefix
    # ("refu"*) merges the prefix's whole doclist again (200 ms for a common word's). The
    # unary plus keeps the IN out of FTS5's hands; the range bounds the pass.
    ids = [r.id for r in top]
    rowid = _FTS.c.rowid
    marks = {
        found: (marked_title, marked_body)
        for found, marked_title, marked_body in db.session.execute(
            select(rowid, title, snippet).where(
                matches, rowid.between(min(ids), max(ids)), _NOT_INDEXED_ROWID.in_(ids)
            )
        )
    }
    return [Match(r.kind, r.object_id, r.model_id, r.parent_id, *marks[r.id]) for r in top]


def _ranked_postgres(where: ColumnElement[bool], wanted: _Wanted) -> list[Match]:
    """The best ``wanted.limit`` of the first ``CANDIDATES`` matches the reader may read, by
    ts_rank (titles weigh A, bodies B), then their headlines (made for those alone: a
    headline reads the whole text)."""
    tsq = func.to_tsquery(literal_column("'english'"), wanted.tsquery())
    vector = literal_column(VECTOR_COLUMN)
    candidates = select(D.id).where(vector.op("@@")(tsq), where).limit(CANDIDATES)
    rank = func.ts_rank(vector, tsq).label("rank")
    first = _first(wanted.kinds)
    top = (
        select(D.id, D.kind, D.object_id, D.model_id, D.parent_id, D.title, D.body, rank, first)
        .where(D.id.in_(candidates.scalar_subquery()))
        .order_by(first, rank.desc(), D.id)
        .limit(wanted.limit)
        .subquery()
    )
    part = f"StartSel={START}, StopSel={STOP}, MaxWords=24, MinWords=8, MaxFragments=1"
    whole = f"StartSel={START}, StopSel={STOP}, HighlightAll=true"
    english = literal_column("'english'")
    stmt = select(
        top.c.kind,
        top.c.object_id,
        top.c.model_id,
        top.c.parent_id,
        func.ts_headline(english, top.c.title, tsq, whole),
        func.ts_headline(english, top.c.body, tsq, part),
    ).order_by(top.c.first, top.c.rank.desc(), top.c.id)
    return [Match(*row) for row in db.session.execute(stmt)]


def _ranked(where: ColumnElement[bool], wanted: _Wanted) -> list[Match]:
    if db.session.get_bind().dialect.name == "postgresql":
        return _ranked_postgres(where, wanted)
    return _ranked_sqlite(where, wanted)


def _labels(rows: list[Match]) -> tuple[dict[int, str], dict[int, str]]:
    """Model keys of the records found, and titles of the conversations of messages."""
    model_ids = {r.model_id for r in rows if r.model_id is not None}
    conversation_ids = {r.parent_id for r in rows if r.kind == "message"}
    keys: dict[int, str] = {}
    titles: dict[int, str] = {}
    if model_ids:
        keys = dict(
            db.session.execute(
                select(RecordModel.id, RecordModel.key).where(RecordModel.id.in_(model_ids))
            ).all()
        )
    if conversation_ids:
        titles = dict(
            db.session.execute(
                select(Conversation.id, Conversation.title).where(
                    Conversation.id.in_(conversation_ids)
                )
            ).all()
        )
    return keys, titles


def _hit(row: Match, keys: dict[int, str], titles: dict[int, str]) -> Hit | None:
    kind, object_id, model_id, parent_id, title, snippet = row
    if kind == "record":
        key = keys.get(model_id)
        return Hit("record", object_id, title, snippet, model_key=key) if key else None
    if kind == "message":  # a conversation found by one of its messages
        name = titles.get(parent_id) or "Untitled conversation"
        return Hit("conversation", object_id, name, snippet, conversation_id=parent_id)
    if kind == "conversation":
        return Hit(
            "conversation",
            object_id,
            title or "Untitled conversation",
            snippet,
            conversation_id=object_id,
        )
    return Hit(kind, object_id, title, snippet)


def matches(
    principal: Principal,
    query: str,
    limit: int = 20,
    *,
    typing: bool = False,
    exclude_conversation: int | None = None,
    only: tuple[Kind, ...] = (),
) -> list[Match]:
    """What the principal may read that matches ``query``, best first, at most ``limit``
    documents (a conversation may have several): every word if anything has them all, else
    any word; a kind the query names first; ``typing`` (the header's box): the last word is
    a prefix; ``only`` keeps those kinds alone (a conversation's messages go with it)."""
    words, kinds = hinted(terms(query))
    if not words:
        return []
    limit = max(1, min(limit, MAX_LIMIT))
    where = readable(principal, exclude_conversation)
    if only:
        documents = [*only, "message"] if "conversation" in only else list(only)
        where = and_(where, D.kind.in_(documents))
    wanted = _Wanted(tuple(words), True, typing, limit, kinds)
    rows = _ranked(where, wanted)
    if not rows and len(words) > 1:
        rows = _ranked(where, replace(wanted, every=False))
    return rows


def hits_of(rows: list[Match]) -> list[Hit]:
    """Ranked documents as hits, best first; a conversation once (its best match)."""
    keys, titles = _labels(rows)
    hits: list[Hit] = []
    seen: set[int] = set()
    for row in rows:
        hit = _hit(row, keys, titles)
        if hit is None or hit.conversation_id in seen:
            continue
        if hit.conversation_id is not None:
            seen.add(hit.conversation_id)
        hits.append(hit)
    return hits


def search(principal: Principal, query: str, limit: int = 20, **options: Any) -> list[Hit]:
    """What the principal may read that matches ``query``, as hits (``options`` are those of
    ``matches``); a conversation shows once (its best match)."""
    return hits_of(matches(principal, query, limit, **options))


def grouped(hits: list[Hit]) -> list[tuple[str, list[Hit]]]:
    """Hits by kind, in ``GROUPS``' order, each group keeping its ranking; empty ones left out."""
    groups = [(label, [h for h in hits if h.kind == kind]) for kind, label in GROUPS.items()]
    return [(label, found) for label, found in groups if found]
