"""Settings → Usage (admins: the org's; everyone: their own on the profile), and each
table's CSV."""

from __future__ import annotations

import csv
import io
from typing import Any

from flask import Blueprint, Response, flash, render_template, request, url_for

from monark.core.auth import guard, require_principal
from monark.core.errors import ValidationFailed
from monark.core.htmx import redirect_full
from monark.core.settings import spend_settings
from monark.core.web import page_principal
from monark.settings import budgets, usage

bp = Blueprint("settings_usage", __name__)


@bp.app_context_processor
def _spend_banner() -> dict[str, Any]:
    """Admins see the month's budget from 80% on, on every page."""
    principal = page_principal()
    return {"spend_banner": budgets.banner(principal) if principal is not None else None}


def _page(errors: dict[str, str] | None = None, status: int = 200):
    principal = require_principal()
    report = usage.report(principal, usage.period(request.args.get("days")))
    return render_template(
        "settings/usage.html",
        report=report,
        periods=usage.PERIODS,
        budget=budgets.status(principal.org_id),
        own=budgets.form_values(principal),
        fields=budgets.FIELDS,
        spend=spend_settings(),
        errors=errors or {},
        form=request.form if errors else None,
    ), status


@bp.get("/settings/usage")
@guard("org.manage")
def page():
    """The org's usage, with its charts and their tables, and its budget."""
    return _page()


@bp.post("/settings/usage/budget")
@guard("org.manage")
def budget():
    """Set the org's budget (every field checked before any is stored)."""
    principal = require_principal()
    try:
        changed = budgets.set_budget(principal, request.form.to_dict())
    except ValidationFailed as err:
        return _page({d["field"]: d["message"] for d in err.details}, 400)
    flash("Budget saved." if changed else "Nothing changed.", "info")
    # The header's button and the panel open or close with it: a full page. (No "#budget":
    # htmx's redirect to this same page with only a fragment added would load nothing.)
    return redirect_full(url_for("settings_usage.page"))


# What a spreadsheet reads as the start of a formula in a cell it opens.
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any, text: str) -> str:
    """A text cell as the CSV holds it: one a spreadsheet would run as a formula (a
    member's name, a tool name the model made up: ``=HYPERLINK(…)``) gets a leading
    apostrophe, so it opens as the text it is. Numbers are left as they are."""
    if isinstance(value, str) and text.startswith(_FORMULA):
        return "'" + text
    return text


def _csv(report: usage.Report, key: str, name: str) -> Response:
    if key not in {t.key for t in report.tables}:
        key = "daily"
    table = report.table(key)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(table.columns)
    for row, text in zip(table.rows, table.text_rows(), strict=True):
        writer.writerow([_cell(v, t) for v, t in zip(row, text, strict=True)])
    filename = f"{name}-{table.key}-{report.since}-{report.until}.csv"
    return Response(
        out.getvalue(),
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@bp.get("/settings/usage.csv")
@guard("org.manage")
def org_csv():
    """One table of the org's usage as CSV (``table``: daily, models, users, tools)."""
    principal = require_principal()
    report = usage.report(principal, usage.period(request.args.get("days")))
    return _csv(report, request.args.get("table", "daily"), "usage")


@bp.get("/profile/usage.csv")
@guard()
def own_csv():
    """One table of the signed-in member's own usage as CSV."""
    principal = require_principal()
    report = usage.report(principal, usage.period(request.args.get("days")), own=True)
    return _csv(report, request.args.get("table", "daily"), "my-usage")
