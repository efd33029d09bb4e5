"""Wiki services: plain functions over a Principal; every query is scoped to its org.

Archived pages (and the subtrees archived with them) leave the tree and answer 404.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

from sqlalchemy import select

from monark.core.errors import NotFound, ValidationFailed
from monark.core.events import record_event, save_new
from monark.core.models import Event
from monark.core.rbac import Principal
from monark.extensions import db
from monark.wiki.models import WikiPage

TITLE_MAX = 200
BODY_MAX = 100_000
ICON_MAX = 16  # code points: one emoji with its modifiers and joiners
_EMOJI_JOINERS = {"\u200d", "\ufe0e", "\ufe0f", "\u20e3"}


@dataclass
class TreeNode:
    """A page in the tree (no body), with its children in order."""

    id: int
    title: str
    icon: str
    parent_id: int | None
    position: int
    children: list[TreeNode] = field(default_factory=list)


def _problem(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, [{"field": field, "message": message}])


def _check_title(title: str | None) -> str:
    title = (title or "").strip()
    if not title or len(title) > TITLE_MAX or "\n" in title:
        raise _problem("title", f"Give a title of 1-{TITLE_MAX} characters on one line.")
    return title


def _is_emoji(text: str) -> bool:
    symbol = False
    for ch in text:
        category = unicodedata.category(ch)
        if category == "So":
            symbol = True
        elif ch in _EMOJI_JOINERS or category in ("Mn", "Me", "Sk"):
            continue
        elif not (ch in "0123456789#*" and "\u20e3" in text):  # keycaps: 1️⃣
            return False
    return symbol or "\u20e3" in text


def _check_icon(icon: str | None) -> str:
    icon = (icon or "").strip()
    if icon and (len(icon) > ICON_MAX or not _is_emoji(icon)):
        raise _problem("icon", "Give one emoji, such as 📄 (or nothing for no icon).")
    return icon


def _check_body(body: str | None) -> str:
    body = body or ""
    if len(body) > BODY_MAX:
        raise _problem("body", f"The page is longer than {BODY_MAX} characters.")
    return body


# ---- reading --------------------------------------------------------------------------


def _rows(principal: Principal, *, lock: bool = False) -> list[TreeNode]:
    stmt = (
        select(WikiPage.id, WikiPage.title, WikiPage.icon, WikiPage.parent_id, WikiPage.position)
        .where(WikiPage.org_id == principal.org_id, WikiPage.archived.is_(False))
        .order_by(WikiPage.position, WikiPage.id)
    )
    if lock:  # moves of one org take turns on PostgreSQL, so two cannot make a cycle
        stmt = stmt.with_for_update()
    return [TreeNode(*row) for row in db.session.execute(stmt)]


def page_tree(principal: Principal) -> list[TreeNode]:
    """The org's live pages as a tree of roots, each level in position order."""
    principal.require("wiki.view")
    nodes = _rows(principal)
    by_id = {n.id: n for n in nodes}
    roots = []
    for node in nodes:
        parent = by_id.get(node.parent_id) if node.parent_id else None
        (parent.children if parent else roots).append(node)
    return roots


def flatten(tree: list[TreeNode], depth: int = 0) -> list[tuple[TreeNode, int]]:
    """The tree in reading order, with each page's depth (for pickers)."""
    out = []
    for node in tree:
        out.append((node, depth))
        out += flatten(node.children, depth + 1)
    return out


def get_page(principal: Principal, page_id: int) -> WikiPage:
    """A live page of the org; ``NotFound`` otherwise."""
    principal.require("wiki.view")
    page = db.session.scalar(
        select(WikiPage).where(
            WikiPage.id == page_id,
            WikiPage.org_id == principal.org_id,
            WikiPage.archived.is_(False),
        )
    )
    if page is None:
        raise NotFound(f"No wiki page {page_id} in this organization.")
    return page


def is_archived(principal: Principal, page_id: int) -> bool:
    """Whether the org has this page, archived (to say so instead of a bare not-found)."""
    principal.require("wiki.view")
    found = db.session.scalar(
        select(WikiPage.id).where(
            WikiPage.id == page_id,
            WikiPage.org_id == principal.org_id,
            WikiPage.archived.is_(True),
        )
    )
    return found is not None


def path_to(principal: Principal, page: WikiPage) -> list[TreeNode]:
    """The page's ancestors, root first (for breadcrumbs)."""
    by_id = {n.id: n for n in _rows(principal)}
    path, current = [], by_id.get(page.parent_id) if page.parent_id else None
    while current is not None and len(path) < len(by_id):
        path.insert(0, current)
        current = by_id.get(current.parent_id) if current.parent_id else None
    return path


def _descendants(nodes: list[TreeNode], page_id: int) -> set[int]:
    children: dict[int | None, list[int]] = {}
    for node in nodes:
        children.setdefault(node.parent_id, []).append(node.id)
    found, queue = set(), [page_id]
    while queue:
        for child in children.get(queue.pop(), []):
            if child not in found:
                found.add(child)
                queue.append(child)
    return found


# ---- writing --------------------------------------------------------------------------


def _parent(principal: Principal, parent_id: int | None) -> WikiPage | None:
    if parent_id is None:
        return None
    try:
        return get_page(principal, parent_id)
    except NotFound:
        raise _problem("parent_id", f"No wiki page {parent_id} to put it under.") from None


def _siblings(principal: Principal, parent_id: int | None, exclude: int | None) -> list[WikiPage]:
    stmt = select(WikiPage).where(
        WikiPage.org_id == principal.org_id,
        WikiPage.archived.is_(False),
        WikiPage.parent_id.is_(None) if parent_id is None else WikiPage.parent_id == parent_id,
    )
    if exclude is not None:
        stmt = stmt.where(WikiPage.id != exclude)
    return list(db.session.scalars(stmt.order_by(WikiPage.position, WikiPage.id)))


def create_page(
    principal: Principal,
    title: str,
    icon: str | None = "",
    parent_id: int | None = None,
    body: str | None = "",
) -> WikiPage:
    """Add a page at the end of its parent's children (or of the top level)."""
    principal.require("wiki.edit")
    problems = []
    checked = {}
    for name, check, value in (
        ("title", _check_title, title),
        ("icon", _check_icon, icon),
        ("body", _check_body, body),
    ):
        try:
            checked[name] = check(value)
        except ValidationFailed as err:
            problems += err.details
    try:
        parent = _parent(principal, parent_id)
    except ValidationFailed as err:
        problems += err.details
    if problems:
        raise ValidationFailed("The page has invalid values.", problems)
    siblings = _siblings(principal, parent.id if parent else None, None)
    page = WikiPage(
        org_id=principal.org_id,
        parent_id=parent.id if parent else None,
        position=max((s.position for s in siblings), default=-1) + 1,
        created_by_id=principal.user_id,
        updated_by_id=principal.user_id,
        **checked,
    )
    return save_new(principal, page, "wiki_page.created", "wiki_page", id_key="page_id")


def update_page(
    principal: Principal,
    page_id: int,
    *,
    title: str | None = None,
    icon: str | None = None,
    body: str | None = None,
) -> WikiPage:
    """Change a page's title, icon or body (only those given); one event names the changes."""
    principal.require("wiki.edit")
    page = get_page(principal, page_id)
    values, problems = {}, []
    for name, check, value in (
        ("title", _check_title, title),
        ("icon", _check_icon, icon),
        ("body", _check_body, body),
    ):
        if value is None:
            continue
        try:
            values[name] = check(value)
        except ValidationFailed as err:
            problems += err.details
    if problems:
        raise ValidationFailed("The page has invalid values.", problems)
    changed = sorted(name for name, value in values.items() if getattr(page, name) != value)
    if changed:
        for name in changed:
            setattr(page, name, values[name])
        page.updated_by_id = principal.user_id
        payload = {"page_id": page.id, "fields": changed}
        record_event(principal, "wiki_page.updated", "wiki_page", page.id, payload)
    db.session.commit()
    return page


def _place(
    principal: Principal, page: WikiPage, parent_id: int | None, position: int | None
) -> int:
    """Number the live pages under ``parent_id`` with ``page`` at ``position`` (None: last,
    beyond the end: last); the index it got."""
    siblings = _siblings(principal, parent_id, page.id)
    index = len(siblings) if position is None else min(position, len(siblings))
    siblings.insert(index, page)
    for number, sibling in enumerate(siblings):
        sibling.position = number
    return index


def move_page(
    principal: Principal, page_id: int, parent_id: int | None, position: int | None = None
) -> WikiPage:
    """Put a page under another (``None``: top level) at ``position`` (default: last).

    A page cannot go under itself or one of its own descendants.
    """
    principal.require("wiki.edit")
    page = get_page(principal, page_id)
    nodes = _rows(principal, lock=True)
    parent = _parent(principal, parent_id)
    if parent is not None and (parent.id == page.id or parent.id in _descendants(nodes, page.id)):
        raise _problem("parent_id", "A page cannot go under itself or one of its subpages.")
    if position is not None and position < 0:
        raise _problem("position", "Give a position of 0 (first) or more.")
    old_parent = page.parent_id
    new_parent = parent.id if parent else None
    index = _place(principal, page, new_parent, position)
    page.parent_id = new_parent
    if old_parent != new_parent:
        for number, sibling in enumerate(_siblings(principal, old_parent, page.id)):
            sibling.position = number
    payload = {"page_id": page.id, "parent_id": new_parent, "position": index}
    record_event(principal, "wiki_page.moved", "wiki_page", page.id, payload)
    db.session.commit()
    return page


def archive_page(principal: Principal, page_id: int) -> list[int]:
    """Archive a page and its subpages; the ids archived."""
    principal.require("wiki.edit")
    page = get_page(principal, page_id)
    ids = [page.id, *sorted(_descendants(_rows(principal), page.id))]
    return _set_archived(principal, page, ids, archived=True)


def _set_archived(
    principal: Principal, page: WikiPage, ids: list[int], archived: bool
) -> list[int]:
    """Archive (or restore) the pages ``ids``: ``page`` and those going with it, in one event
    about ``page`` that lists them all. The ids."""
    for row in db.session.scalars(
        select(WikiPage).where(WikiPage.org_id == principal.org_id, WikiPage.id.in_(ids))
    ):
        row.archived = archived
        row.updated_by_id = principal.user_id
    verb = "archived" if archived else "restored"
    payload = {"page_id": page.id, f"{verb}_ids": ids}
    record_event(principal, f"wiki_page.{verb}", "wiki_page", page.id, payload)
    db.session.commit()
    return ids


def _archived(principal: Principal) -> list[WikiPage]:
    stmt = select(WikiPage).where(WikiPage.org_id == principal.org_id, WikiPage.archived.is_(True))
    return list(db.session.scalars(stmt.order_by(WikiPage.updated_at.desc(), WikiPage.id)))


def _batches(principal: Principal) -> dict[int, list[int]]:
    """What each archive took out of the tree (its event's ``archived_ids``), by the page
    archived; a page archived twice counts its latest archive."""
    rows = db.session.execute(
        select(Event.subject_id, Event.payload)
        .where(Event.org_id == principal.org_id, Event.type == "wiki_page.archived")
        .order_by(Event.id)
    )
    return {
        subject: [int(i) for i in (payload or {}).get("archived_ids") or [subject]]
        for subject, payload in rows
        if subject is not None
    }


def _batch_of(page: WikiPage, pages: list[WikiPage], batches: dict[int, list[int]]) -> list[int]:
    """The still-archived pages that went with ``page`` (it first); without a record of its
    archive, everything archived below it."""
    archived = {p.id for p in pages}
    batch = batches.get(page.id)
    if batch is None:
        batch = [page.id, *sorted(_descendants(pages, page.id))]  # type: ignore[arg-type]
    return [page.id, *(i for i in batch if i in archived and i != page.id)]


def archived_pages(principal: Principal) -> list[tuple[WikiPage, int]]:
    """Each archive still in effect, newest first: the page it archived and how many
    subpages went with it. Subpages archived along with a parent are not listed apart."""
    principal.require("wiki.view")
    pages = _archived(principal)
    batches = _batches(principal)
    archived_ids = {p.id for p in pages}
    tops = [p for p in pages if p.id in batches or p.parent_id not in archived_ids]
    return [(p, len(_batch_of(p, pages, batches)) - 1) for p in tops]


def restore_page(principal: Principal, page_id: int) -> list[int]:
    """Undo an archive: the page and the subpages archived with it (not those archived on
    their own before), where it was among its siblings (last at the top level if its parent
    is archived). The ids restored."""
    principal.require("wiki.edit")
    pages = _archived(principal)
    page = next((p for p in pages if p.id == page_id), None)
    if page is None:
        raise NotFound(f"No archived wiki page {page_id} in this organization.")
    ids = _batch_of(page, pages, _batches(principal))
    position: int | None = page.position
    if page.parent_id is not None:
        parent = db.session.get(WikiPage, page.parent_id)
        if parent is None or parent.archived or parent.org_id != principal.org_id:
            page.parent_id, position = None, None  # last at the top level
    _place(principal, page, page.parent_id, position)
    return _set_archived(principal, page, ids, archived=False)
