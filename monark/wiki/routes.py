"""The wiki routes agents can call: declared once, for the in-app assistant only.

Kept off ``/api/v1`` and MCP on purpose; their JSON views live under ``/internal/wiki``
(endpoint ``wiki_internal.<name>``), made by the same view factory as ``/api/v1``. The
assistant reads page bodies but never writes them: no route here takes a body. Routes
that act on one page look it up before reading the body: another org's id is 404.
"""

from __future__ import annotations

from flask import url_for

from monark.core.rbac import Principal
from monark.core.routes import Preview, RouteDescriptor, RouteTable, Undo, headline
from monark.wiki import previews, services
from monark.wiki import schemas as s
from monark.wiki import undo as undoing
from monark.wiki.models import WikiPage


def tree_out(nodes: list[services.TreeNode]) -> list[s.TreePage]:
    """The tree, nested."""
    return [
        s.TreePage.of(n, url=url_for("wiki.page", page_id=n.id), children=tree_out(n.children))
        for n in nodes
    ]


def page_out(page: WikiPage) -> s.PageOut:
    """A page without its body."""
    return s.PageOut.of(page, url=url_for("wiki.page", page_id=page.id))


routes = RouteTable("assistant")


def _lookup(principal: Principal, path: s.PagePath) -> object:
    return services.get_page(principal, path.page_id)


def _page_write(action: str, preview: Preview, undo: Undo | None = None):
    """Declare a write on one page (``/wiki/pages/{page_id}/<action>``), its page found first."""
    path = f"/wiki/pages/{{page_id}}/{action}"
    return routes.post(path, "wiki.edit", preview=preview, lookup=_lookup, undo=undo)


@routes.get("/wiki/pages", "wiki.view", preview=headline("list the wiki pages"))
def wiki_list_pages(principal: Principal, path: None, query: None, body: None) -> s.PageTree:
    """List the wiki's page tree: id, title, icon and children of every page."""
    return s.PageTree(pages=tree_out(services.page_tree(principal)))


@routes.post("/wiki/pages", "wiki.edit", status=201, preview=previews.create)
def wiki_create_page(
    principal: Principal, path: None, query: None, body: s.CreateBody
) -> s.PageOut:
    """Create a wiki page with a title, an optional emoji icon and an optional parent page.
    It starts with an empty body: you cannot write page bodies."""
    return page_out(services.create_page(principal, body.title, body.icon, body.parent_id))


@routes.get(
    "/wiki/pages/{page_id}",
    "wiki.view",
    preview=headline("read wiki page #{page_id}"),
    lookup=_lookup,
)
def wiki_get_page(principal: Principal, path: s.PagePath, query: None, body: None) -> s.PageDetail:
    """Get one wiki page with its Markdown body and its path in the tree."""
    page = services.get_page(principal, path.page_id)
    steps = [s.PathStep.of(n) for n in services.path_to(principal, page)]
    return s.PageDetail(**page_out(page).model_dump(), body=page.body, path=steps)


@_page_write("rename", previews.rename, undoing.RENAME)
def wiki_rename_page(
    principal: Principal, path: s.PagePath, query: None, body: s.RenameBody
) -> s.PageOut:
    """Give a wiki page a new title."""
    return page_out(services.update_page(principal, path.page_id, title=body.title))


@_page_write("icon", previews.set_icon, undoing.ICON)
def wiki_set_icon(
    principal: Principal, path: s.PagePath, query: None, body: s.IconBody
) -> s.PageOut:
    """Set a wiki page's emoji icon ("" removes it)."""
    return page_out(services.update_page(principal, path.page_id, icon=body.icon))


@_page_write("move", previews.move, undoing.MOVE)
def wiki_move_page(
    principal: Principal, path: s.PagePath, query: None, body: s.MoveBody
) -> s.PageOut:
    """Move a wiki page: parent_id null for the top level (leave it out to keep the
    parent), position 0 for first (leave it out to go last). Never under itself."""
    page = services.get_page(principal, path.page_id)
    parent_id = body.parent_id if "parent_id" in body.model_fields_set else page.parent_id
    return page_out(services.move_page(principal, path.page_id, parent_id, body.position))


@_page_write("archive", previews.archive)
def wiki_archive_page(
    principal: Principal, path: s.PagePath, query: None, body: None
) -> s.Archived:
    """Archive a wiki page and its subpages: they leave the tree."""
    return s.Archived(archived_ids=services.archive_page(principal, path.page_id))


WIKI_ROUTES: tuple[RouteDescriptor, ...] = tuple(routes.routes)
bp = routes.blueprint("wiki_internal", __name__)
