"""The wiki routes agents can call: declared once, for the in-app assistant only.

Kept off ``/api/v1`` and MCP on purpose; their JSON views live under ``/internal/wiki``
(endpoint ``wiki_internal.<name>``), made by the same view factory as ``/api/v1``. The
assistant reads page bodies but never writes them: no route here takes a body. Routes
that act on one page look it up before reading the body: another org's id is 404.
"""

from __future__ import annotations

from flask import url_for

from monark.core.models import as_utc
from monark.core.rbac import Principal
from monark.core.routes import RouteDescriptor, headline, routes_blueprint
from monark.wiki import previews, services
from monark.wiki import schemas as s
from monark.wiki.models import WikiPage


def tree_out(nodes: list[services.TreeNode]) -> list[s.TreePage]:
    """The tree, nested."""
    return [
        s.TreePage(
            id=n.id,
            title=n.title,
            icon=n.icon,
            position=n.position,
            url=url_for("wiki.page", page_id=n.id),
            children=tree_out(n.children),
        )
        for n in nodes
    ]


def page_out(page: WikiPage) -> s.PageOut:
    """A page without its body."""
    return s.PageOut(
        id=page.id,
        title=page.title,
        icon=page.icon,
        parent_id=page.parent_id,
        position=page.position,
        url=url_for("wiki.page", page_id=page.id),
        created_at=as_utc(page.created_at).isoformat(),
        updated_at=as_utc(page.updated_at).isoformat(),
    )


def wiki_list_pages(principal: Principal, path: None, query: None, body: None) -> s.PageTree:
    return s.PageTree(pages=tree_out(services.page_tree(principal)))


def wiki_create_page(
    principal: Principal, path: None, query: None, body: s.CreateBody
) -> s.PageOut:
    return page_out(services.create_page(principal, body.title, body.icon, body.parent_id))


def wiki_get_page(principal: Principal, path: s.PagePath, query: None, body: None) -> s.PageDetail:
    page = services.get_page(principal, path.page_id)
    steps = [s.PathStep(id=n.id, title=n.title) for n in services.path_to(principal, page)]
    return s.PageDetail(**page_out(page).model_dump(), body=page.body, path=steps)


def wiki_rename_page(
    principal: Principal, path: s.PagePath, query: None, body: s.RenameBody
) -> s.PageOut:
    return page_out(services.update_page(principal, path.page_id, title=body.title))


def wiki_set_icon(
    principal: Principal, path: s.PagePath, query: None, body: s.IconBody
) -> s.PageOut:
    return page_out(services.update_page(principal, path.page_id, icon=body.icon))


def wiki_move_page(
    principal: Principal, path: s.PagePath, query: None, body: s.MoveBody
) -> s.PageOut:
    page = services.get_page(principal, path.page_id)
    parent_id = body.parent_id if "parent_id" in body.model_fields_set else page.parent_id
    return page_out(services.move_page(principal, path.page_id, parent_id, body.position))


def wiki_archive_page(
    principal: Principal, path: s.PagePath, query: None, body: None
) -> s.Archived:
    return s.Archived(archived_ids=services.archive_page(principal, path.page_id))


def _lookup(principal: Principal, path: s.PagePath) -> object:
    return services.get_page(principal, path.page_id)


ONE = {"path_model": s.PagePath, "lookup": _lookup}

WIKI_ROUTES: tuple[RouteDescriptor, ...] = (
    RouteDescriptor(
        method="GET",
        path="/wiki/pages",
        name="wiki_list_pages",
        summary="List the wiki's page tree: id, title, icon and children of every page.",
        permission="wiki.view",
        handler=wiki_list_pages,
        response_model=s.PageTree,
        audience="assistant",
        preview=headline("list the wiki pages"),
    ),
    RouteDescriptor(
        method="POST",
        path="/wiki/pages",
        name="wiki_create_page",
        summary="Create a wiki page with a title, an optional emoji icon and an optional "
        "parent page. It starts with an empty body: you cannot write page bodies.",
        permission="wiki.edit",
        handler=wiki_create_page,
        response_model=s.PageOut,
        body_model=s.CreateBody,
        audience="assistant",
        status=201,
        preview=previews.create,
    ),
    RouteDescriptor(
        method="GET",
        path="/wiki/pages/{page_id}",
        name="wiki_get_page",
        summary="Get one wiki page with its Markdown body and its path in the tree.",
        permission="wiki.view",
        handler=wiki_get_page,
        response_model=s.PageDetail,
        audience="assistant",
        preview=previews.get,
        **ONE,
    ),
    RouteDescriptor(
        method="POST",
        path="/wiki/pages/{page_id}/rename",
        name="wiki_rename_page",
        summary="Give a wiki page a new title.",
        permission="wiki.edit",
        handler=wiki_rename_page,
        response_model=s.PageOut,
        body_model=s.RenameBody,
        audience="assistant",
        preview=previews.rename,
        **ONE,
    ),
    RouteDescriptor(
        method="POST",
        path="/wiki/pages/{page_id}/icon",
        name="wiki_set_icon",
        summary='Set a wiki page\'s emoji icon ("" removes it).',
        permission="wiki.edit",
        handler=wiki_set_icon,
        response_model=s.PageOut,
        body_model=s.IconBody,
        audience="assistant",
        preview=previews.set_icon,
        **ONE,
    ),
    RouteDescriptor(
        method="POST",
        path="/wiki/pages/{page_id}/move",
        name="wiki_move_page",
        summary="Move a wiki page: parent_id null for the top level (leave it out to keep the "
        "parent), position 0 for first (leave it out to go last). Never under itself.",
        permission="wiki.edit",
        handler=wiki_move_page,
        response_model=s.PageOut,
        body_model=s.MoveBody,
        audience="assistant",
        preview=previews.move,
        **ONE,
    ),
    RouteDescriptor(
        method="POST",
        path="/wiki/pages/{page_id}/archive",
        name="wiki_archive_page",
        summary="Archive a wiki page and its subpages: they leave the tree.",
        permission="wiki.edit",
        handler=wiki_archive_page,
        response_model=s.Archived,
        audience="assistant",
        preview=previews.archive,
        **ONE,
    ),
)

bp = routes_blueprint("wiki_internal", __name__, WIKI_ROUTES)
