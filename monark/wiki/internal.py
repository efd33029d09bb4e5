"""Internal JSON endpoints of the wiki, for the in-app assistant's tools.

Not part of ``/api/v1``, the OpenAPI document or MCP; called through the dispatcher as the
user (or by a signed-in session with the CSRF header). The assistant reads page bodies but
does not write them: there is no body endpoint here. Errors are the app's JSON error body.
Views that act on one page look it up before reading the body: another org's id is 404.

    GET  /internal/wiki/pages                  the tree: {"pages": [{id, title, icon, children}]}
    POST /internal/wiki/pages                  create {title, icon?, parent_id?}  -> 201
    GET  /internal/wiki/pages/<id>             one page with its Markdown body
    POST /internal/wiki/pages/<id>/rename      {title}
    POST /internal/wiki/pages/<id>/icon        {icon}  ("" removes it)
    POST /internal/wiki/pages/<id>/move        {parent_id?: id|null, position?: int}
    POST /internal/wiki/pages/<id>/archive     {} (archives its subpages too)
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, url_for
from pydantic import BaseModel, ConfigDict, Field

from monark.core.auth import guard, require_principal
from monark.core.ids import Id
from monark.core.jsonbody import parse_body
from monark.core.models import as_utc
from monark.wiki import services
from monark.wiki.models import WikiPage

bp = Blueprint("wiki_internal", __name__, url_prefix="/internal/wiki")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateBody(_Body):
    title: str = Field(max_length=1000)
    icon: str = Field("", description="One emoji, or empty.", max_length=100)
    parent_id: Id | None = Field(None, description="The parent page; null for the top level.")


class RenameBody(_Body):
    title: str = Field(max_length=1000)


class IconBody(_Body):
    icon: str = Field(description="One emoji; empty removes the icon.", max_length=100)


class MoveBody(_Body):
    parent_id: Id | None = Field(
        None, description="The new parent; null for the top level; leave out to keep it."
    )
    position: int | None = Field(None, description="0 is first; leave out to go last.")


def tree_json(nodes: list[services.TreeNode]) -> list[dict[str, Any]]:
    """The tree as nested JSON."""
    return [
        {
            "id": n.id,
            "title": n.title,
            "icon": n.icon,
            "position": n.position,
            "url": url_for("wiki.page", page_id=n.id),
            "children": tree_json(n.children),
        }
        for n in nodes
    ]


def page_json(page: WikiPage, *, body: bool = False) -> dict[str, Any]:
    """A page as JSON (with its Markdown body when asked)."""
    out: dict[str, Any] = {
        "id": page.id,
        "title": page.title,
        "icon": page.icon,
        "parent_id": page.parent_id,
        "position": page.position,
        "url": url_for("wiki.page", page_id=page.id),
        "created_at": as_utc(page.created_at).isoformat(),
        "updated_at": as_utc(page.updated_at).isoformat(),
    }
    if body:
        out["body"] = page.body
    return out


@bp.get("/pages")
@guard("wiki.view")
def wiki_list_pages():
    """The org's page tree (titles and icons, no bodies)."""
    return jsonify({"pages": tree_json(services.page_tree(require_principal()))})


@bp.post("/pages")
@guard("wiki.edit")
def wiki_create_page():
    """Create an empty page under a parent (or at the top level), last among its siblings."""
    body = parse_body(CreateBody)
    page = services.create_page(require_principal(), body.title, body.icon, body.parent_id)
    return jsonify(page_json(page)), 201


@bp.get("/pages/<int:page_id>")
@guard("wiki.view")
def wiki_get_page(page_id: int):
    """One page with its Markdown body, its path and its children."""
    principal = require_principal()
    page = services.get_page(principal, page_id)
    out = page_json(page, body=True)
    out["path"] = [{"id": n.id, "title": n.title} for n in services.path_to(principal, page)]
    return jsonify(out)


@bp.post("/pages/<int:page_id>/rename")
@guard("wiki.edit")
def wiki_rename_page(page_id: int):
    """Give a page a new title."""
    principal = require_principal()
    services.get_page(principal, page_id)
    body = parse_body(RenameBody)
    return jsonify(page_json(services.update_page(principal, page_id, title=body.title)))


@bp.post("/pages/<int:page_id>/icon")
@guard("wiki.edit")
def wiki_set_icon(page_id: int):
    """Set (or, with "", remove) a page's emoji icon."""
    principal = require_principal()
    services.get_page(principal, page_id)
    body = parse_body(IconBody)
    return jsonify(page_json(services.update_page(principal, page_id, icon=body.icon)))


@bp.post("/pages/<int:page_id>/move")
@guard("wiki.edit")
def wiki_move_page(page_id: int):
    """Reparent and/or reorder a page; never under itself or its own subpages."""
    principal = require_principal()
    page = services.get_page(principal, page_id)
    body = parse_body(MoveBody)
    parent_id = body.parent_id if "parent_id" in body.model_fields_set else page.parent_id
    page = services.move_page(principal, page_id, parent_id, body.position)
    return jsonify(page_json(page))


@bp.post("/pages/<int:page_id>/archive")
@guard("wiki.edit")
def wiki_archive_page(page_id: int):
    """Archive a page and its subpages: they leave the tree."""
    ids = services.archive_page(require_principal(), page_id)
    return jsonify({"archived_ids": ids})
