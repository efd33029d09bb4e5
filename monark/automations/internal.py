"""Internal JSON endpoints of automations, for the in-app assistant's tools.

Not part of ``/api/v1``: no API keys (a bearer key is only read under ``/api/``), not in
the OpenAPI document, not in MCP. Callers are the dispatcher (the assistant, as the user)
and signed-in sessions (with the CSRF header on writes). Errors are the app's JSON error
body ``{"error": {"code", "message", "details": [{"field", "message"}]}}``. Each view is
named after the assistant tool that calls it (endpoint ``automations_internal.<tool>``).
Views that act on one automation look it up before reading the body: another org's id is
404 whatever the body holds.

    GET  /internal/automations                      list
    POST /internal/automations                      create {name, graph, enabled?}  -> 201
    GET  /internal/automations/node-types           node types with config JSON schemas
    GET  /internal/automations/trigger-events       trigger types, the org's models and fields
    GET  /internal/automations/<id>                 one, with its graph and recent runs
    POST /internal/automations/<id>                 replace {graph, name?, version?}
    POST /internal/automations/<id>/enabled         {enabled: true|false}
    POST /internal/automations/<id>/test            {record_id?}  -> 201, the run
    GET  /internal/automations/runs/<run_id>        one run with its steps
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, url_for
from pydantic import BaseModel, ConfigDict, Field

from monark.automations import services
from monark.automations.models import Automation, AutomationRun
from monark.core.auth import guard, require_principal
from monark.core.ids import Id
from monark.core.jsonbody import parse_body
from monark.core.models import as_utc
from monark.core.rbac import Principal

bp = Blueprint("automations_internal", __name__, url_prefix="/internal/automations")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateBody(_Body):
    name: str = Field(description="A name unique in the organization.", max_length=1000)
    graph: Any = Field(description='{"nodes": [{"id", "type", "config"}], "edges": [...]}')
    enabled: bool = Field(False, description="Start enabled (default: off until tested).")


class UpdateBody(_Body):
    graph: Any = Field(description="The whole new graph.")
    name: str | None = Field(None, max_length=1000)
    version: int | None = Field(None, description="The version you read; 409 if it moved on.")


class EnabledBody(_Body):
    enabled: bool = True


class TestBody(_Body):
    record_id: Id | None = Field(None, description="Default: the newest record.")


def _when(value: Any) -> str | None:
    value = as_utc(value)
    return value.isoformat() if value else None


def run_json(run: AutomationRun, principal: Principal, *, steps: bool = True) -> dict[str, Any]:
    """A run as JSON; step data of a private record's run only for those who may see it."""
    out: dict[str, Any] = {
        "id": run.id,
        "automation_id": run.automation_id,
        "automation_version": run.automation_version,
        "status": run.status,
        "is_test": run.is_test,
        "trigger": {
            "type": run.trigger_type,
            "event_id": run.trigger_event_id,
            "record_id": run.record_id,
        },
        "depth": run.depth,
        "error": run.error,
        "started_at": _when(run.started_at),
        "finished_at": _when(run.finished_at),
        "url": url_for("automations.run_detail", automation_id=run.automation_id, run_id=run.id),
    }
    if steps:
        out["steps"] = services.shown_steps(principal, run)
        if not services.shows_run_details(principal, run):
            out["details_hidden"] = "The run's record is private: inputs and outputs are hidden."
    return out


def automation_json(
    automation: Automation,
    principal: Principal,
    *,
    graph: bool = True,
    last_run: AutomationRun | None = None,
) -> dict[str, Any]:
    """An automation as JSON, its graph as the principal may read it."""
    out: dict[str, Any] = {
        "id": automation.id,
        "name": automation.name,
        "enabled": automation.enabled,
        "version": automation.version,
        "trigger": {"type": automation.trigger_type, "model": automation.trigger_model},
        "node_count": len(automation.graph.get("nodes", [])),
        "created_at": _when(automation.created_at),
        "updated_at": _when(automation.updated_at),
        "url": url_for("automations.detail", automation_id=automation.id),
    }
    if graph:
        out["graph"] = services.shown_graph(principal, automation.graph)
    if last_run is not None:
        out["last_run"] = {"id": last_run.id, "status": last_run.status}
    return out


@bp.get("")
@guard("automation.view")
def automation_list():
    """The org's automations, without their graphs."""
    principal = require_principal()
    automations = services.list_automations(principal)
    last = services.last_runs(principal, [a.id for a in automations])
    items = [
        automation_json(a, principal, graph=False, last_run=last.get(a.id)) for a in automations
    ]
    return jsonify({"automations": items})


@bp.post("")
@guard("automation.create")
def automation_create():
    """Create an automation; an invalid graph answers 400 with every problem, saving nothing."""
    principal = require_principal()
    body = parse_body(CreateBody)
    automation = services.create_automation(principal, body.name, body.graph, body.enabled)
    return jsonify(automation_json(automation, principal)), 201


@bp.get("/node-types")
@guard("automation.view")
def automation_list_node_types():
    """Every node type, with its kind, description, outputs and config JSON schema."""
    types = services.node_types(require_principal())
    return jsonify(
        {
            "node_types": [
                {
                    "type": t.key,
                    "kind": t.kind,
                    "description": t.description,
                    "outputs": list(t.outputs),
                    "config_schema": t.config_schema(),
                }
                for t in types
            ],
            "placeholders": "Strings in action configs may use {{record.<field>}}, "
            "{{record.id}}, {{trigger.type|model|event_id}}, {{automation.id|name}} and "
            "{{nodes.<node id>.<output>}} (a node that runs before).",
        }
    )


@bp.get("/trigger-events")
@guard("automation.view")
def automation_list_trigger_events():
    """The events that can start an automation, and the org's models and fields."""
    types, org = services.trigger_events(require_principal())
    return jsonify(
        {
            "trigger_events": [
                {"type": t.key, "description": t.description, "config_schema": t.config_schema()}
                for t in types
            ],
            "models": [
                {
                    "key": m.key,
                    "name": m.name,
                    "fields": [
                        {
                            "key": f.key,
                            "label": f.label,
                            "type": f.type,
                            "required": f.required,
                            "options": list(f.options),
                        }
                        for f in m.fields
                    ],
                }
                for m in org.models.values()
            ],
        }
    )


@bp.get("/<int:automation_id>")
@guard("automation.view")
def automation_get(automation_id: int):
    """One automation with its graph and its ten newest runs."""
    principal = require_principal()
    automation = services.get_automation(principal, automation_id)
    out = automation_json(automation, principal)
    runs = services.list_runs(principal, automation, limit=10)
    out["recent_runs"] = [run_json(r, principal, steps=False) for r in runs]
    return jsonify(out)


@bp.post("/<int:automation_id>")
@guard("automation.manage")
def automation_update(automation_id: int):
    """Replace the graph (and the name); 400 itemizes problems, 409 on a stale version."""
    principal = require_principal()
    services.get_automation(principal, automation_id)
    body = parse_body(UpdateBody)
    automation = services.update_automation(
        principal, automation_id, graph=body.graph, name=body.name, version=body.version
    )
    return jsonify(automation_json(automation, principal))


@bp.post("/<int:automation_id>/enabled")
@guard("automation.manage")
def automation_enable(automation_id: int):
    """Turn an automation on (``{"enabled": true}``) or off."""
    principal = require_principal()
    services.get_automation(principal, automation_id)
    body = parse_body(EnabledBody)
    automation = services.set_enabled(principal, automation_id, body.enabled)
    return jsonify(automation_json(automation, principal, graph=False))


@bp.post("/<int:automation_id>/test")
@guard("automation.run")
def automation_test(automation_id: int):
    """Run it now on a record (default: the newest); its actions really happen."""
    principal = require_principal()
    services.get_automation(principal, automation_id)
    body = parse_body(TestBody)
    run = services.run_test(principal, automation_id, body.record_id)
    return jsonify(run_json(run, principal)), 201


@bp.get("/runs/<int:run_id>")
@guard("automation.view")
def automation_get_run(run_id: int):
    """One run with its steps."""
    principal = require_principal()
    return jsonify(run_json(services.get_run(principal, run_id), principal))
