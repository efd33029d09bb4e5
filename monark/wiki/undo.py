"""How the assistant's wiki writes of titles, icons and the tree are undone
(``RouteDescriptor.undo``; see ``approvals.undo``): each reads the page before the write, as the
user, and puts back what it changed; the page must still be as the write left it."""

from __future__ import annotations

from typing import Any

from monark.core.rbac import Principal
from monark.core.routes import Undo
from monark.wiki import services


def _page_before(*fields: str):
    def before(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
        page = services.get_page(principal, int(args.get("page_id") or 0))
        return {f: getattr(page, f) for f in fields}

    return before


def _plan(tool: str, fields: tuple[str, ...], what: str):
    def plan(
        principal: Principal, args: dict[str, Any], result: Any, before: dict[str, Any]
    ) -> dict[str, Any] | None:
        if all(before[f] == result.get(f) for f in fields):
            return None  # nothing changed: nothing to put back
        page_id = result["id"]
        said = ", ".join(f"{f} back to {before[f]!r}" for f in fields)
        return {
            "reverse": {"tool": tool, "arguments": {"page_id": page_id, **before}},
            "read": {"tool": "wiki_get_page", "arguments": {"page_id": page_id}},
            "after": [{"path": [f], "label": f, "value": result.get(f)} for f in fields],
            "summary": f"{what} wiki page #{page_id}: {said}",
        }

    return plan


RENAME = Undo(before=_page_before("title"), plan=_plan("wiki_rename_page", ("title",), "renamed"))
ICON = Undo(before=_page_before("icon"), plan=_plan("wiki_set_icon", ("icon",), "set the icon of"))
MOVE = Undo(
    before=_page_before("parent_id", "position"),
    plan=_plan("wiki_move_page", ("parent_id", "position"), "moved"),
)
