"""Settings → Usage (admins: the org's; everyone: their own on the profile), and each
table's CSV."""

from __future__ import annotations

import csv
import io

from flask import Blueprint, Response, render_template, request

from monark.core.auth import guard, require_principal
from monark.settings import usage

bp = Blueprint("settings_usage", __name__)


@bp.get("/settings/usage")
@guard("org.manage")
def page():
    """The org's usage, with its charts and their tables."""
    principal = require_principal()
    report = usage.report(principal, usage.period(request.args.get("days")))
    return render_template("settings/usage.html", report=report, periods=usage.PERIODS)


def _csv(report: usage.Report, key: str, name: str) -> Response:
    if key not in {t.key for t in report.tables}:
        key = "daily"
    table = report.table(key)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(table.columns)
    writer.writerows(table.text_rows())
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
