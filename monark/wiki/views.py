"""Web views of the wiki: the page tree, page view, editor, create, move and archive."""

from __future__ import annotations

from flask import Blueprint, flash, render_template, request

from monark.core.auth import guard, require_principal
from monark.core.errors import ValidationFailed
from monark.core.ids import form_id
from monark.core.markdown import render_markdown
from monark.core.rbac import Principal
from monark.core.web import see_other
from monark.wiki import services
from monark.wiki.models import WikiPage

bp = Blueprint("wiki", __name__, url_prefix="/wiki")


def _render(template: str, principal: Principal, current: WikiPage | None = None, **context):
    """A wiki screen: ``template`` beside the page tree (``current`` marked in it).

    ``tree`` is in ``context`` when the view read it already (for a picker)."""
    if "tree" not in context:
        context["tree"] = services.page_tree(principal)
    return render_template(template, current_id=current.id if current else None, **context)


def _to_page(page_id: int):
    return see_other("wiki.page", page_id=page_id)


@bp.get("")
@guard("wiki.view")
def index():
    """The wiki's start: the tree and its top-level pages."""
    return _render("wiki/index.html", require_principal())


@bp.get("/<int:page_id>")
@guard("wiki.view")
def page(page_id: int):
    """One page, its Markdown rendered and sanitized."""
    principal = require_principal()
    if services.is_archived(principal, page_id):
        return _render("wiki/gone.html", principal, page_id=page_id), 404
    page = services.get_page(principal, page_id)
    tree = services.page_tree(principal)
    movable = []
    if principal.can("wiki.edit"):
        skip = {page.id}
        for node, depth in services.flatten(tree):
            if node.id in skip or node.parent_id in skip:
                skip.add(node.id)  # itself and its subpages cannot be its parent
            else:
                movable.append((node, depth))
    siblings = services.flatten(tree)
    count = sum(1 for node, _ in siblings if node.parent_id == page.parent_id)
    return _render(
        "wiki/page.html",
        principal,
        page,
        tree=tree,
        page=page,
        body_html=render_markdown(page.body),
        path=services.path_to(principal, page),
        parents=movable,
        sibling_count=count,
    )


@bp.route("/new", methods=["GET", "POST"])
@guard("wiki.edit")
def new():
    """Create a page (under ``parent_id`` when given)."""
    principal = require_principal()
    form = request.values
    errors: dict[str, str] = {}
    if request.method == "POST":
        try:
            parent_id = form_id("parent_id")
            page = services.create_page(
                principal, form.get("title", ""), form.get("icon", ""), parent_id, form.get("body")
            )
        except ValidationFailed as err:
            errors = err.field_errors()
        else:
            flash(f"Page {page.title} created.")
            return _to_page(page.id)
    tree = services.page_tree(principal)
    return _render(
        "wiki/form.html",
        principal,
        tree=tree,
        page=None,
        form=form,
        errors=errors,
        parents=services.flatten(tree),
    ), (422 if errors else 200)


@bp.route("/<int:page_id>/edit", methods=["GET", "POST"])
@guard("wiki.edit")
def edit(page_id: int):
    """Edit a page's title, icon and Markdown body."""
    principal = require_principal()
    page = services.get_page(principal, page_id)
    form = (
        request.form
        if request.method == "POST"
        else {
            "title": page.title,
            "icon": page.icon,
            "body": page.body,
        }
    )
    errors: dict[str, str] = {}
    if request.method == "POST":
        try:
            services.update_page(
                principal,
                page_id,
                title=form.get("title", ""),
                icon=form.get("icon", ""),
                body=form.get("body", ""),
            )
        except ValidationFailed as err:
            errors = err.field_errors()
        else:
            flash("Page saved.")
            return _to_page(page_id)
    status = 422 if errors else 200
    return _render("wiki/form.html", principal, page, page=page, form=form, errors=errors), status


@bp.post("/<int:page_id>/move")
@guard("wiki.edit")
def move(page_id: int):
    """Reparent or reorder a page (position 1 is first; empty: last)."""
    try:
        parent_id = form_id("parent_id")
        services.move_page(require_principal(), page_id, parent_id, _position())
    except ValidationFailed as err:
        flash(err.detail_text(), "error")
    else:
        flash("Page moved.")
    return _to_page(page_id)


def _position() -> int | None:
    """The form's position (1 is first) as the service's (0 is first); ``None``: last."""
    raw = (request.form.get("position") or "").strip()
    if not raw:
        return None
    if not (raw.isdecimal() and int(raw) >= 1):
        raise ValidationFailed(
            "Invalid position.",
            [{"field": "position", "message": "Give a position of 1 (first) or more."}],
        )
    return int(raw) - 1


@bp.post("/<int:page_id>/archive")
@guard("wiki.edit")
def archive(page_id: int):
    """Archive a page and its subpages."""
    principal = require_principal()
    page = services.get_page(principal, page_id)
    title, parent_id = page.title, page.parent_id
    ids = services.archive_page(principal, page_id)
    more = f" and {len(ids) - 1} subpage{'s' if len(ids) > 2 else ''}" if len(ids) > 1 else ""
    flash(f"Archived {title}{more}.")
    if parent_id:
        return _to_page(parent_id)
    return see_other("wiki.index")


@bp.get("/archived")
@guard("wiki.view")
def archived():
    """What was archived, to look up or (for editors) bring back."""
    principal = require_principal()
    return _render("wiki/archived.html", principal, pages=services.archived_pages(principal))


@bp.post("/<int:page_id>/restore")
@guard("wiki.edit")
def restore(page_id: int):
    """Bring an archived page back with its archived subpages."""
    ids = services.restore_page(require_principal(), page_id)
    more = f" with {len(ids) - 1} subpage{'s' if len(ids) > 2 else ''}" if len(ids) > 1 else ""
    flash(f"Page restored{more}.")
    return _to_page(page_id)
