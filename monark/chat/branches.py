"""Branches of a conversation: Regenerate and Edit make a new version, the old kept.

A conversation that never branched is stored flat (``head_id`` None, no parents), so it
pays nothing for branches; its first branch stores each message's parent (``ensure_tree``).
The active path (the head and its ancestors) is all the model reads and the thread shows.
Everything here works on rows already read, never a query per message.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sqlalchemy import select, update
from sqlalchemy.orm import aliased

from monark.chat.models import Conversation, Message, MessageRole
from monark.extensions import db


class Linked(Protocol):
    """A message as far as branches go: its id and its parent's."""

    @property
    def id(self) -> int: ...

    @property
    def parent_id(self) -> int | None: ...


Row = TypeVar("Row", bound=Linked)


def active_path(rows: Sequence[Row], head_id: int | None) -> list[Row]:
    """The head and its ancestors in order (all ``rows``, in order, while it never branched;
    the newest message's branch for a head that is gone, never two versions as one)."""
    if head_id is None or not rows:
        return list(rows)
    if head_id not in (by_id := {row.id: row for row in rows}):
        head_id = rows[-1].id
    path: list[Row] = []
    node: Row | None = by_id[head_id]
    while node is not None and len(path) <= len(rows):
        path.append(node)
        node = by_id.get(node.parent_id) if node.parent_id is not None else None
    path.reverse()
    return path


def path_to(rows: Sequence[Row], message_id: int, branched: bool) -> list[Row]:
    """The rows up to ``message_id`` along its own branch (none when it is not among them)."""
    if branched:
        return active_path(rows, message_id) if any(r.id == message_id for r in rows) else []
    for n, row in enumerate(rows):
        if row.id == message_id:
            return list(rows[: n + 1])
    return []


def children_of(rows: Sequence[Row]) -> dict[int | None, list[Row]]:
    """Each parent's children, in order (the first messages are the children of None)."""
    children: dict[int | None, list[Row]] = defaultdict(list)
    for row in rows:
        children[row.parent_id].append(row)
    return children


def _subtree(children: dict[int | None, list[Row]], root: Row) -> list[Row]:
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(children.get(node.id, ()))
    return out


def set_aside(rows: Sequence[Row], path: Sequence[Row]) -> dict[int | None, list[Row]]:
    """Per path message, its other versions and all after them; under None, what follows the
    path's end."""
    children = children_of(rows)
    aside: dict[int | None, list[Row]] = {}
    for row in path:
        others = [v for v in children[row.parent_id] if v.id != row.id]
        if others:
            aside[row.id] = [r for other in others for r in _subtree(children, other)]
    if path and (after := children.get(path[-1].id)):
        aside[None] = [r for child in after for r in _subtree(children, child)]
    return aside


def newest_leaf(rows: Sequence[Row], message_id: int) -> int:
    """The newest descendant of ``message_id`` (or itself): where its branch was left."""
    by_id = {row.id: row for row in rows}
    order = {row.id: i for i, row in enumerate(rows)}
    subtree = _subtree(children_of(rows), by_id[message_id])
    return max((r.id for r in subtree), key=order.__getitem__)


def ensure_tree(conversation: Conversation) -> None:
    """Store a flat conversation as the tree it is (each parent: the message before), once."""
    if conversation.head_id is not None:
        return
    before = aliased(Message)
    previous = (
        select(before.id)
        .where(before.conversation_id == Message.conversation_id, before.seq < Message.seq)
        .order_by(before.seq.desc())
        .limit(1)
        .scalar_subquery()
    )
    db.session.execute(
        update(Message)
        .where(Message.conversation_id == conversation.id)
        .values(parent_id=previous)
        .execution_options(synchronize_session=False)
    )
    conversation.head_id = db.session.scalar(
        select(Message.id)
        .where(Message.conversation_id == conversation.id)
        .order_by(Message.seq.desc())
        .limit(1)
    )


def is_step(role: str, author_kind: str) -> bool:
    """Whether a message is a step: not a summary, nor a person's own note (an undo)."""
    return role != MessageRole.SUMMARY and not (role == MessageRole.NOTE and author_kind == "user")


@dataclass(frozen=True)
class Node:
    """A message as the branch operations read it (no text but what an edit keeps)."""

    id: int
    parent_id: int | None
    role: str
    author_kind: str
    content: list


def load_nodes(conversation_id: int) -> list[Node]:
    """Every message of a conversation as a ``Node``, in order (one query)."""
    rows = db.session.execute(
        select(Message.id, Message.parent_id, Message.role, Message.author_kind, Message.content)
        .where(Message.conversation_id == conversation_id)
        .order_by(Message.seq)
    )
    return [Node(*row) for row in rows]
