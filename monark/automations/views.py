"""Web views of automations: list, detail with the JSON editor, enable, test run, runs."""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, current_app, flash, make_response, render_template, request, url_for

from monark.automations import schedules, services, signing, webhook_services
from monark.automations.models import Automation
from monark.automations.nodes import REGISTRY
from monark.automations.ownership import owner_of
from monark.automations.privacy import PrivateRecords
from monark.core import jobs, jsonbody
from monark.core.auth import guard, require_principal
from monark.core.errors import Conflict, ValidationFailed
from monark.core.htmx import push_url
from monark.core.ids import form_id
from monark.core.rbac import Principal
from monark.core.web import see_other
from monark.extensions import db

bp = Blueprint("automations", __name__, url_prefix="/automations")


def starter_graph(principal: Principal) -> dict[str, Any]:
    """A harmless first graph for the editor: note each new record of the first model."""
    models = services.trigger_events(principal)[1].models
    model = next(iter(models), "tasks")
    return {
        "nodes": [
            {"id": "created", "type": "record.created", "config": {"model": model}},
            {
                "id": "note",
                "type": "add_audit_note",
                "config": {"note": "Record {{record.id}} was created."},
            },
        ],
        "edges": [{"from": "created", "to": "note"}],
    }


def _graph_text(graph: Any) -> str:
    return json.dumps(graph, indent=2, ensure_ascii=False)


def _parse_graph_text(text: str) -> tuple[Any, list[dict[str, str]]]:
    try:
        return jsonbody.loads(text), []
    except json.JSONDecodeError as err:
        where = f"line {err.lineno}, column {err.colno}"
        return None, [{"field": "graph", "message": f"Not valid JSON ({where}): {err.msg}."}]
    except ValueError as err:  # nested too deep
        return None, [{"field": "graph", "message": f"Not a usable graph: {err}"}]


def _editor_context(principal: Principal) -> dict[str, Any]:
    return {"node_types": services.node_types(principal)}


def _automation(automation_id: int) -> tuple[Principal, Automation]:
    """The signed-in principal, and automation ``automation_id`` of its org (404 otherwise)."""
    principal = require_principal()
    return principal, services.get_automation(principal, automation_id)


def _to_detail(automation_id: int, section: str | None = None):
    return see_other("automations.detail", automation_id=automation_id, _anchor=section)


@bp.get("")
@guard("automation.view")
def index():
    """The org's automations."""
    principal = require_principal()
    automations = services.list_automations(principal)
    # Linked from a member's demotion or removal: the automations it switched off.
    needs_owner = request.args.get("state") == "needs_owner"
    if needs_owner:
        automations = [a for a in automations if a.disabled_reason]
    return render_template(
        "automations/list.html",
        automations=automations,
        needs_owner=needs_owner,
        last_runs=services.last_runs(principal, [a.id for a in automations]),
        health=webhook_services.queue_health(principal),
        schedules={a.id: schedules.described(a) for a in automations},
        # Admins hear when nothing consumes the queue: runs and schedules would wait.
        queue_health=jobs.health(current_app) if principal.can("automation.manage") else None,
    )


@bp.route("/new", methods=["GET", "POST"])
@guard("automation.create")
def new():
    """Write a new automation; every problem of the graph is listed, nothing is saved."""
    principal = require_principal()
    name, text, problems = "", _graph_text(starter_graph(principal)), []
    if request.method == "POST":
        name, text = request.form.get("name", ""), request.form.get("graph", "")
        graph, problems = _parse_graph_text(text)
        if not problems:
            try:
                automation = services.create_automation(principal, name, graph)
            except ValidationFailed as err:
                problems = err.details
            else:
                flash(f"Automation {automation.name} created. It is off until you enable it.")
                return _to_detail(automation.id)
    return render_template(
        "automations/new.html",
        name=name,
        graph_text=text,
        problems=problems,
        **_editor_context(principal),
    ), (422 if problems else 200)


def _detail(
    automation: Automation,
    *,
    text: str | None = None,
    name: str | None = None,
    problems: list[dict[str, str]] | None = None,
    status: int = 200,
    new_secret: str | None = None,
):
    principal = require_principal()
    runs = services.list_runs(principal, automation, limit=5)
    return render_template(
        "automations/detail.html",
        automation=automation,
        new_secret=new_secret,
        rotation_token=signing.form_token(),
        has_webhooks=any(n.get("type") == services.WEBHOOK for n in automation.graph["nodes"]),
        run_states=webhook_services.run_states(runs),
        schedule=schedules.described(automation),
        registry=REGISTRY,
        private_choices=list(PrivateRecords),
        owner=owner_of(db.session, automation),
        graph=services.shown_graph(principal, automation.graph),
        runs=runs,
        name=automation.name if name is None else name,
        graph_text=_graph_text(automation.graph) if text is None else text,
        problems=problems or [],
        **_editor_context(principal),
    ), status


@bp.route("/<int:automation_id>", methods=["GET", "POST"])
@guard("automation.view")
def detail(automation_id: int):
    """One automation: its nodes and edges, runs, and (for managers) the JSON editor."""
    principal, automation = _automation(automation_id)
    if request.method == "GET":
        return _detail(automation)
    principal.require("automation.manage")
    name, text = request.form.get("name", ""), request.form.get("graph", "")
    graph, problems = _parse_graph_text(text)
    if not problems:
        try:
            services.update_automation(
                principal,
                automation_id,
                graph=graph,
                name=name,
                version=request.form.get("version", type=int),
            )
        except ValidationFailed as err:
            problems = err.details
        else:
            saved = services.get_automation(principal, automation_id)
            flash(f"Automation saved.{_still_off(saved)}")
            return _to_detail(automation_id)
    return _detail(automation, text=text, name=name, problems=problems, status=422)


def _still_off(automation: Automation) -> str:
    """What a flash adds after an action that left the automation off: that it is, and why."""
    if automation.enabled:
        return ""
    owner = owner_of(db.session, automation)
    if owner.lapse:
        return f" It is still off: {owner.reason()} Take ownership to switch it on again."
    return " It is still off: switch it on when you are ready."


@bp.post("/<int:automation_id>/enabled")
@guard("automation.manage")
def set_enabled(automation_id: int):
    """Turn an automation on or off."""
    principal, automation = _automation(automation_id)
    enabled = request.form.get("enabled") == "true"
    try:
        automation = services.set_enabled(principal, automation_id, enabled)
    except Conflict as err:  # its owner lapsed: the page says who may take it over
        flash(f"{automation.name} is still off: {err.message}", "error")
        return _to_detail(automation_id)
    flash(f"{automation.name} is {'on' if enabled else 'off'}.")
    return _to_detail(automation_id)


@bp.post("/<int:automation_id>/owner")
@guard("automation.manage")
def take_ownership(automation_id: int):
    """Become the automation's owner: its runs act within your rights from now on."""
    automation = services.take_ownership(require_principal(), automation_id)
    flash(f"You own {automation.name} now.{_still_off(automation)}")
    return _to_detail(automation_id)


@bp.post("/<int:automation_id>/private-records")
@guard("automation.manage")
def set_private_records(automation_id: int):
    """Choose what a private record's events do to the automation."""
    principal, automation = _automation(automation_id)
    before, choice = automation.private_records, request.form.get("private_records", "")
    try:
        automation = services.set_private_records(principal, automation_id, choice)
    except ValidationFailed as err:
        flash(err.details[0]["message"], "error:rights")
        return _to_detail(automation_id, "rights")
    chosen = PrivateRecords(automation.private_records)
    said = f"Saved: {chosen.title}." if chosen != before else f"No change: {chosen.title}."
    flash(said + _still_off(automation), "info:rights")
    return _to_detail(automation_id, "rights")


@bp.post("/<int:automation_id>/test")
@guard("automation.run")
def test_run(automation_id: int):
    """Run it now on a record (default: the newest) and show the run."""
    principal = require_principal()
    try:
        record_id = form_id("record_id")
    except ValidationFailed as err:
        rule = err.details[0]["message"]
        flash(f"Record id: {rule} Or leave it empty for the newest record.", "error")
        return _to_detail(automation_id)
    try:
        run = services.run_test(principal, automation_id, record_id)
    except Conflict as err:
        flash(err.message, "error")
        return _to_detail(automation_id)
    except ValidationFailed as err:
        flash(f"{err.message} {err.details[0]['message']}", "error")
        return _to_detail(automation_id)
    flash(f"Test run {run.status}.", "info" if run.status == "succeeded" else "error")
    return see_other("automations.run_detail", automation_id=automation_id, run_id=run.id)


@bp.post("/<int:automation_id>/delete")
@guard("automation.manage")
def delete(automation_id: int):
    """Delete an automation and its run history."""
    principal, automation = _automation(automation_id)
    name = automation.name
    services.delete_automation(principal, automation_id)
    flash(f"Automation {name} deleted.")
    return see_other("automations.index")


@bp.post("/<int:automation_id>/signing-secret")
@guard("automation.manage")
def rotate_secret(automation_id: int):
    """Make or rotate the webhooks' signing secret, and show it this once (a repeat of the
    same form shows the same secret, rotating nothing)."""
    principal, _ = _automation(automation_id)
    made = webhook_services.rotate_secret(
        principal, automation_id, request.form.get("rotation_token") or None
    )
    body, status = _detail(
        services.get_automation(principal, automation_id), new_secret=made.secret
    )
    response = make_response(body, status, {"Cache-Control": "no-store"})
    # The address bar shows the automation's page, never this POST-only address (F5 there
    # was a 405); the secret is in the page only, never in a URL.
    return push_url(response, url_for("automations.detail", automation_id=automation_id))


@bp.get("/<int:automation_id>/signing-secret")
@guard("automation.view")
def signing_secret_page(automation_id: int):
    """The address of the form, opened (a reload, a bookmark): the automation's page."""
    _automation(automation_id)
    return _to_detail(automation_id, "signing")


@bp.get("/<int:automation_id>/runs")
@guard("automation.view")
def runs(automation_id: int):
    """The run history, newest first."""
    principal, automation = _automation(automation_id)
    shown = services.list_runs(principal, automation, limit=100)
    return render_template(
        "automations/runs.html",
        automation=automation,
        runs=shown,
        run_states=webhook_services.run_states(shown),
    )


@bp.get("/<int:automation_id>/runs/<int:run_id>")
@guard("automation.view")
def run_detail(automation_id: int, run_id: int):
    """One run with its steps: input, output, error and timing per node."""
    principal, automation = _automation(automation_id)
    run = services.get_run(principal, run_id, automation_id=automation.id)
    return render_template(
        "automations/run.html",
        automation=automation,
        run=run,
        record=services.run_record(principal, run),
        steps=services.shown_steps(principal, run),
        state=webhook_services.run_states([run])[run.id],
        deliveries=webhook_services.shown_deliveries(principal, run),
    )


@bp.post("/<int:automation_id>/runs/<int:run_id>/deliveries/<int:delivery_id>/redeliver")
@guard("automation.manage")
def redeliver(automation_id: int, run_id: int, delivery_id: int):
    """Send an ended webhook of the run once more."""
    principal, automation = _automation(automation_id)
    try:
        delivery = webhook_services.redeliver(principal, automation.id, run_id, delivery_id)
    except Conflict as err:
        flash(err.message, "error")
    else:
        flash(f"Webhook {delivery.node_id} queued to be delivered again.")
    return see_other("automations.run_detail", automation_id=automation_id, run_id=run_id)
