"""Branches of a conversation: Regenerate and Edit make a new one, the old kept and switchable.

A conversation is a tree of messages. One that never branched is stored flat: its
``head_id`` is None, no message has a parent, and its path is every message in order (so a
conversation pays nothing for branches it never made). Its first branch stores each
message's parent, the message before it (``ensure_tree``), and the head; from then on a new
message's parent is the head, and it becomes the head (``store.add_message``).

The **active path** is the head and its ancestors: the only history the model reads (the
loop, compaction, the context budget) and what the thread shows. Messages off it are kept,
reachable by switching (the thread's "1/2" with Previous and Next version); a write that
succeeded on one stays done, and the model reading the path is told of it (``set_aside``),
never by running anything again.

Everything here works on rows already read (no query per message): the transcript's and the
thread's one read of all of a conversation's messages in order.
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
    """The rows of the active path, in order (``rows``: all of a conversation's, in order):
    every row while it never branched, else the head and its ancestors."""
    if head_id is None:
        return list(rows)
    by_id = {row.id: row for row in rows}
    if head_id not in by_id:  # a head that is gone (never, but never a blank thread for it)
        return list(rows)
    path: list[Row] = []
    node: Row | None = by_id[head_id]
    while node is not None and len(path) <= len(rows):
        path.append(node)
        node = by_id.get(node.parent_id) if node.parent_id is not None else None
    path.reverse()
    return path


def path_to(rows: Sequence[Row], message_id: int, branched: bool) -> list[Row]:
    """The rows from the first to ``message_id``, in order, along its own branch (what came
    before it as its author saw it, and nothing after); none when it is not among ``rows``."""
    if branched:
        return active_path(rows, message_id) if any(r.id == message_id for r in rows) else []
    for n, row in enumerate(rows):
        if row.id == message_id:
            return list(rows[: n + 1])
    return []


def _children(rows: Sequence[Row]) -> dict[int | None, list[Row]]:
    """Each parent's children, in order (the first messages are the children of None)."""
    children: dict[int | None, list[Row]] = defaultdict(list)
    for row in rows:
        children[row.parent_id].append(row)
    return children


@dataclass(frozen=True)
class Spot:
    """Where a message of the path stands among its versions: ``index`` of ``count``
    (from 1), and the versions before and after it (to switch to)."""

    index: int
    count: int
    previous_id: int | None
    next_id: int | None


def spots(rows: Sequence[Row], path: Sequence[Row], branched: bool) -> dict[int, Spot]:
    """The path's messages that have other versions, with where each stands among them."""
    if not branched:
        return {}
    children = _children(rows)
    found: dict[int, Spot] = {}
    for row in path:
        versions = children[row.parent_id]
        if len(versions) < 2:
            continue
        at = next(i for i, v in enumerate(versions) if v.id == row.id)
        before = versions[at - 1].id if at > 0 else None
        after = versions[at + 1].id if at + 1 < len(versions) else None
        found[row.id] = Spot(at + 1, len(versions), before, after)
    return found


def _subtree(children: dict[int | None, list[Row]], root: Row) -> list[Row]:
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(children.get(node.id, ()))
    return out


def set_aside(rows: Sequence[Row], path: Sequence[Row]) -> dict[int | None, list[Row]]:
    """For each message of the path that has other versions: the rows of those versions
    and all that followed them (what the user set aside where the path went its way); under
    None, what follows the path's last message (a regenerated question, before its reply)."""
    children = _children(rows)
    aside: dict[int | None, list[Row]] = {}
    for row in path:
        others = [v for v in children[row.parent_id] if v.id != row.id]
        if others:
            aside[row.id] = [r for other in others for r in _subtree(children, other)]
    if path and (after := children.get(path[-1].id)):
        aside[None] = [r for child in after for r in _subtree(children, child)]
    return aside


def newest_leaf(rows: Sequence[Row], message_id: int) -> int:
    """The head that shows ``message_id``'s branch: its newest descendant (or itself), where
    that branch was left (rows in order: the last of the subtree is the newest)."""
    children = _children(rows)
    by_id = {row.id: row for row in rows}
    order = {row.id: i for i, row in enumerate(rows)}
    return max((r.id for r in _subtree(children, by_id[message_id])), key=order.__getitem__)


def ensure_tree(conversation: Conversation) -> None:
    """Store a flat conversation as the tree it is (each message's parent: the one before
    it) with its last message as the head, before its first branch; nothing once it is one."""
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


@dataclass(frozen=True)
class Node:
    """A message as the branch operations read it (no text but what an edit keeps)."""

    id: int
    parent_id: int | None
    role: str
    author_kind: str
    content: list

    @property
    def is_step(self) -> bool:
        """A step of the conversation: not a summary, nor a person's own note (an undo)."""
        return self.role != MessageRole.SUMMARY and not (
            self.role == MessageRole.NOTE and self.author_kind == "user"
        )


def load_nodes(conversation_id: int) -> list[Node]:
    """Every message of a conversation as a ``Node``, in order (one query)."""
    rows = db.session.execute(
        select(Message.id, Message.parent_id, Message.role, Message.author_kind, Message.content)
        .where(Message.conversation_id == conversation_id)
        .order_by(Message.seq)
    )
    return [Node(*row) for row in rows]
