"""Previews of the wiki routes' tool calls for the assistant's cards, read as the user."""

from __future__ import annotations

from typing import Any

from monark.core.ids import id_or_none
from monark.core.rbac import Principal
from monark.core.routes import found_or_none
from monark.wiki import services
from monark.wiki.models import WikiPage


def _page(principal: Principal, page_id: Any) -> tuple[str, WikiPage | None]:
    """A page's title in quotes (or its id) and the page, if the user may see it."""
    wanted = id_or_none(page_id)
    page = None if wanted is None else found_or_none(services.get_page, principal, wanted)
    return (f"“{page.title}”" if page is not None else f"#{page_id}"), page


def create(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A new page: its icon, title and parent."""
    where = f" under {_page(principal, args['parent_id'])[0]}" if args.get("parent_id") else ""
    icon = f"{args['icon']} " if args.get("icon") else ""
    return {"headline": f"create the wiki page {icon}“{args.get('title', '')}”{where}"}


def rename(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A new title, before → after."""
    title, page = _page(principal, args.get("page_id"))
    return {
        "headline": f"rename the wiki page {title}",
        "changes": [
            {"field": "Title", "before": page.title if page else None, "after": args.get("title")}
        ],
    }


def set_icon(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A new icon, before → after."""
    title, page = _page(principal, args.get("page_id"))
    before = (page.icon or None) if page else None
    return {
        "headline": f"change the icon of the wiki page {title}",
        "changes": [{"field": "Icon", "before": before, "after": args.get("icon") or None}],
    }


def move(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A new parent and/or position, before → after."""
    title, page = _page(principal, args.get("page_id"))
    changes = []
    if "parent_id" in args:
        path = services.path_to(principal, page) if page is not None else []
        before = path[-2].title if len(path) > 1 else "top level"
        parent = args["parent_id"]
        after = _page(principal, parent)[0] if parent else "top level"
        changes.append({"field": "Parent", "before": before, "after": after})
    if "position" in args:
        before_position = page.position if page is not None else None
        changes.append({"field": "Position", "before": before_position, "after": args["position"]})
    return {"headline": f"move the wiki page {title}", "changes": changes}


def archive(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """Archiving a page, and its subpages with it."""
    title, _ = _page(principal, args.get("page_id"))
    return {"headline": f"archive the wiki page {title} and its subpages"}
