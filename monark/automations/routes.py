"""The automations routes agents can call: declared once, for the in-app assistant only.

Kept off ``/api/v1`` and MCP on purpose (an internal power-user surface): their JSON views
live under ``/internal/automations`` (endpoint ``automations_internal.<name>``), made by
the same view factory as ``/api/v1``, and no API key reaches them. Routes that act on one
automation look it up before reading the body: another org's id is 404 whatever the body.
"""

from __future__ import annotations

from flask import url_for

from monark.automations import previews, schedules, services, webhook_services
from monark.automations import schemas as s
from monark.automations.models import Automation, AutomationRun
from monark.core.rbac import Principal
from monark.core.routes import RouteDescriptor, RouteTable, headline

PLACEHOLDERS = (
    "Strings in action configs may use {{record.<field>}}, {{record.id}}, "
    "{{trigger.type|model|event_id|slot}} (slot: a schedule's time), {{automation.id|name}} and "
    "{{nodes.<node id>.<output>}} (a node that runs before)."
)


def run_out(run: AutomationRun) -> s.RunOut:
    """A run without its steps."""
    trigger = s.RunTrigger(
        type=run.trigger_type,
        event_id=run.trigger_event_id,
        record_id=run.record_id,
        slot_at=run.slot_at,
    )
    url = url_for("automations.run_detail", automation_id=run.automation_id, run_id=run.id)
    return s.RunOut.of(run, trigger=trigger, url=url)


def run_detail(principal: Principal, run: AutomationRun) -> s.RunDetail:
    """A run with its steps and webhook deliveries (only ever of a run the principal may
    read: ``get_run``), and where it stands."""
    state = webhook_services.run_states([run])[run.id]
    deliveries = [
        s.DeliveryOut(
            **{k: getattr(d, k) for k in s.DeliveryOut.model_fields if k != "tries"},
            tries=[s.TryOut(**vars(t)) for t in d.tries],
        )
        for d in webhook_services.shown_deliveries(principal, run)
    ]
    return s.RunDetail(
        **run_out(run).model_dump(),
        state=state.text,
        attempt=state.attempt,
        max_attempts=state.max_attempts,
        next_try_at=state.next_try_at,
        steps=services.shown_steps(principal, run),
        deliveries=deliveries,
    )


def summary(automation: Automation, last_run: AutomationRun | None = None) -> s.AutomationSummary:
    """An automation without its graph."""
    return s.AutomationSummary.of(
        automation,
        trigger=s.Trigger(type=automation.trigger_type, model=automation.trigger_model),
        schedule=schedules.described(automation),
        node_count=len(automation.graph.get("nodes", [])),
        url=url_for("automations.detail", automation_id=automation.id),
        last_run=s.RunRef.of(last_run) if last_run else None,
    )


def with_graph(principal: Principal, automation: Automation) -> s.AutomationOut:
    """An automation with its graph as the principal may read it."""
    return s.AutomationOut(
        **summary(automation).model_dump(),
        graph=services.shown_graph(principal, automation.graph),
    )


# ---- the routes ------------------------------------------------------------------------------

routes = RouteTable("assistant")


def _lookup(principal: Principal, path: s.AutomationPath) -> object:
    return services.get_automation(principal, path.automation_id)


@routes.get("/automations", "automation.view", preview=headline("list the automations"))
def automation_list(principal: Principal, path: None, query: None, body: None) -> s.AutomationList:
    """List the organization's automations: name, trigger, enabled, version, last run."""
    automations = services.list_automations(principal)
    last = services.last_runs(principal, [a.id for a in automations])
    return s.AutomationList(automations=[summary(a, last.get(a.id)) for a in automations])


@routes.post(
    "/automations",
    "automation.create",
    status=201,
    preview=previews.create,
    precheck=previews.check_create,
    allow=False,  # a graph may send webhooks: every one asks
)
def automation_create(
    principal: Principal, path: None, query: None, body: s.CreateBody
) -> s.AutomationOut:
    """Create an automation from a whole graph {"nodes": [{"id", "type", "config"}],
    "edges": [{"from", "to", "when"?}]}: exactly one trigger node, then conditions and
    actions. The graph is checked against the live node registry first: if anything is
    wrong you get every problem to fix and nothing is saved. It starts disabled unless
    enabled is true."""
    automation = services.create_automation(principal, body.name, body.graph, body.enabled)
    return with_graph(principal, automation)


@routes.get(
    "/automations/node-types", "automation.view", preview=headline("list the automation node types")
)
def automation_list_node_types(
    principal: Principal, path: None, query: None, body: None
) -> s.NodeTypes:
    """List the node types an automation graph may use (triggers, conditions, actions),
    each with its config JSON schema, and the placeholders actions may use. Read this
    before writing a graph."""
    return s.NodeTypes(
        node_types=[
            s.NodeTypeOut(
                type=t.key,
                kind=t.kind,
                description=t.description,
                outputs=list(t.outputs),
                config_schema=t.config_schema(),
            )
            for t in services.node_types(principal)
        ],
        placeholders=PLACEHOLDERS,
    )


@routes.get(
    "/automations/trigger-events", "automation.view", preview=headline("list the trigger events")
)
def automation_list_trigger_events(
    principal: Principal, path: None, query: None, body: None
) -> s.TriggerEvents:
    """List the events that can trigger an automation, with the organization's models and
    fields that triggers, conditions and actions may refer to."""
    types, org = services.trigger_events(principal)
    return s.TriggerEvents(
        trigger_events=[
            s.TriggerEventOut(
                type=t.key, description=t.description, config_schema=t.config_schema()
            )
            for t in types
        ],
        models=[s.ModelFields.of(m) for m in org.models.values()],
    )


@routes.get(
    "/automations/{automation_id}",
    "automation.view",
    preview=headline("read the automation #{automation_id}"),
    lookup=_lookup,
)
def automation_get(
    principal: Principal, path: s.AutomationPath, query: None, body: None
) -> s.AutomationDetail:
    """Get one automation with its whole graph, its version and its recent runs."""
    automation = services.get_automation(principal, path.automation_id)
    runs = services.list_runs(principal, automation, limit=10)
    return s.AutomationDetail(
        **with_graph(principal, automation).model_dump(), recent_runs=[run_out(r) for r in runs]
    )


@routes.post(
    "/automations/{automation_id}",
    "automation.manage",
    preview=previews.update,
    precheck=previews.check_update,
    lookup=_lookup,
    allow=False,  # a graph may send webhooks: every one asks
)
def automation_update(
    principal: Principal, path: s.AutomationPath, query: None, body: s.UpdateBody
) -> s.AutomationOut:
    """Replace an automation's whole graph (and optionally its name), checked like
    automation_create. Pass the version you read so a newer change is not overwritten."""
    automation = services.update_automation(
        principal, path.automation_id, graph=body.graph, name=body.name, version=body.version
    )
    return with_graph(principal, automation)


@routes.post(
    "/automations/{automation_id}/enabled",
    "automation.manage",
    preview=previews.enable,
    lookup=_lookup,
    allow=False,  # turning an automation on starts its actions: every one asks
)
def automation_enable(
    principal: Principal, path: s.AutomationPath, query: None, body: s.EnabledBody
) -> s.AutomationSummary:
    """Turn an automation on (enabled: true) or off (enabled: false)."""
    return summary(services.set_enabled(principal, path.automation_id, body.enabled))


@routes.post(
    "/automations/{automation_id}/test",
    "automation.run",
    status=201,
    preview=previews.test,
    lookup=_lookup,
    allow=False,  # a test run's actions really happen (webhooks too): every one asks
)
def automation_test(
    principal: Principal, path: s.AutomationPath, query: None, body: s.TestBody
) -> s.RunDetail:
    """Run an automation once now against a record (default: the newest record of its
    trigger's model). Its actions really happen. Returns the run with its steps."""
    return run_detail(principal, services.run_test(principal, path.automation_id, body.record_id))


@routes.get(
    "/automations/runs/{run_id}",
    "automation.view",
    preview=headline("read automation run #{run_id}"),
)
def automation_get_run(
    principal: Principal, path: s.RunPath, query: None, body: None
) -> s.RunDetail:
    """Get one run of an automation with its steps: each node's input, output and error."""
    return run_detail(principal, services.get_run(principal, path.run_id))


AUTOMATION_ROUTES: tuple[RouteDescriptor, ...] = tuple(routes.routes)
bp = routes.blueprint("automations_internal", __name__)
