"""Automation services: plain functions over a Principal; every query is scoped to its org."""

from __future__ import annotations

import copy
from typing import Any
from urllib.parse import urlsplit

from flask import current_app
from sqlalchemy import func, select

from monark.automations import webhooks
from monark.automations.engine import Trigger, admits, execute, readers_of
from monark.automations.graph import parse_graph, validate_graph
from monark.automations.models import Automation, AutomationRun
from monark.automations.nodes import REGISTRY, NodeType, trigger_types
from monark.automations.ownership import owner_of
from monark.automations.privacy import PrivateRecords
from monark.automations.references import OrgSchema, load_org_schema
from monark.core.errors import Conflict, NotFound, ValidationFailed
from monark.core.events import record_event, save_new
from monark.core.net import UnsafeAddress, check_literal_address
from monark.core.rbac import Principal
from monark.core.text import ONE_LINE_RULE, unsafe_in_one_line
from monark.core.uow import for_update
from monark.extensions import db
from monark.records import queries
from monark.records import services as records
from monark.records.models import Record, RecordModel
from monark.records.queries import readable_by

NAME_MAX = 120
RUNS_PAGE = 20


# ---- reading --------------------------------------------------------------------------


def list_automations(principal: Principal) -> list[Automation]:
    """The org's automations by name."""
    principal.require("automation.view")
    stmt = select(Automation).where(Automation.org_id == principal.org_id)
    return list(db.session.scalars(stmt.order_by(Automation.name)))


def last_runs(principal: Principal, automation_ids: list[int]) -> dict[int, AutomationRun]:
    """The newest run of each of the given automations (of the principal's org)."""
    if not automation_ids:
        return {}
    newest = (
        select(func.max(AutomationRun.id))
        .where(
            AutomationRun.org_id == principal.org_id,
            AutomationRun.automation_id.in_(automation_ids),
            readable_by(principal, AutomationRun.private_to),
        )
        .group_by(AutomationRun.automation_id)
    )
    runs = db.session.scalars(select(AutomationRun).where(AutomationRun.id.in_(newest)))
    return {run.automation_id: run for run in runs}


def get_automation(principal: Principal, automation_id: int, *, lock: bool = False) -> Automation:
    """One automation of the org; ``NotFound`` otherwise.

    ``lock`` holds its row until commit (see ``for_update``), so a read-check-write such as
    the version check cannot interleave.
    """
    principal.require("automation.view")
    stmt = select(Automation).where(
        Automation.id == automation_id, Automation.org_id == principal.org_id
    )
    automation = db.session.scalar(for_update(stmt) if lock else stmt)
    if automation is None:
        raise NotFound(f"No automation {automation_id} in this organization.")
    return automation


def list_runs(
    principal: Principal, automation: Automation, limit: int = RUNS_PAGE
) -> list[AutomationRun]:
    """An automation's runs the principal may read, newest first (a run for a private
    record is for that record's readers alone)."""
    principal.require("automation.view")
    stmt = (
        select(AutomationRun)
        .where(
            AutomationRun.org_id == principal.org_id,
            AutomationRun.automation_id == automation.id,
            readable_by(principal, AutomationRun.private_to),
        )
        .order_by(AutomationRun.id.desc())
        .limit(max(1, min(limit, 100)))
    )
    return list(db.session.scalars(stmt))


def get_run(principal: Principal, run_id: int, automation_id: int | None = None) -> AutomationRun:
    """One run of the org (of one automation, when given) the principal may read;
    ``NotFound`` otherwise, also for a run for a private record they may not read."""
    principal.require("automation.view")
    stmt = select(AutomationRun).where(
        AutomationRun.id == run_id,
        AutomationRun.org_id == principal.org_id,
        readable_by(principal, AutomationRun.private_to),
    )
    if automation_id is not None:
        stmt = stmt.where(AutomationRun.automation_id == automation_id)
    run = db.session.scalar(stmt)
    if run is None:
        raise NotFound(f"No automation run {run_id} in this organization.")
    return run


# Webhook URLs often carry their secret (a Slack hook's path is its key): below
# automation.manage, people see where a webhook goes (scheme and host), not the whole URL.
WEBHOOK = "send_webhook"


def redact_url(url: Any) -> str:
    """Where a webhook goes (scheme and host) without the rest, which may be its key."""
    parts = urlsplit(str(url or ""))
    host = parts.netloc.rsplit("@", 1)[-1]  # never any user:password@
    return f"{parts.scheme}://{host}/…" if host else "…"


def shown_graph(principal: Principal, graph: dict[str, Any]) -> dict[str, Any]:
    """The graph as the principal may read it (webhook URLs whole for managers only)."""
    if principal.can("automation.manage"):
        return graph
    out = copy.deepcopy(graph)
    for node in out.get("nodes", []):
        if node.get("type") == WEBHOOK and isinstance(node.get("config"), dict):
            node["config"]["url"] = redact_url(node["config"].get("url"))
    return out


def run_record(principal: Principal, run: AutomationRun) -> tuple[str, int] | None:
    """The model key and id of the record a run was for, when it still exists and the
    principal may read it now (its page's link); None otherwise."""
    if run.record_id is None or not principal.can("records.view"):
        return None
    row = db.session.execute(
        select(RecordModel.key, Record.id)
        .join(RecordModel, RecordModel.id == Record.model_id)
        .where(
            Record.id == run.record_id,
            Record.org_id == principal.org_id,
            queries.visible_to(principal),
        )
    ).first()
    return (row.key, row.id) if row else None


def shown_steps(principal: Principal, run: AutomationRun) -> list[dict[str, Any]]:
    """A run's steps as the principal may read them (``get_run`` found it readable): with
    webhook URLs redacted below managers."""
    if principal.can("automation.manage"):
        return run.steps
    steps = copy.deepcopy(run.steps)
    for step in steps:
        if step.get("type") == WEBHOOK and isinstance(step.get("input"), dict):
            url = str(step["input"].get("url") or "")
            hidden = redact_url(url)
            step["input"]["url"] = hidden
            if url and step.get("error"):
                step["error"] = str(step["error"]).replace(url, hidden)
    return steps


def node_types(principal: Principal) -> list[NodeType]:
    """Every node type a graph may use."""
    principal.require("automation.view")
    return list(REGISTRY.values())


def trigger_events(principal: Principal) -> tuple[list[NodeType], OrgSchema]:
    """The trigger types, and the org's models and fields a trigger may name."""
    principal.require("automation.view")
    return trigger_types(), load_org_schema(principal.org_id)


# ---- writing --------------------------------------------------------------------------


def check_automation(
    principal: Principal, name: str | None, graph: Any, exclude_id: int | None = None
) -> list[dict[str, str]]:
    """Every problem with a name and a graph, together (nothing is saved here)."""
    problems: list[dict[str, str]] = []
    if name is not None:
        clean = name.strip()
        if not clean or len(clean) > NAME_MAX or "\n" in clean:
            problems.append({"field": "name", "message": f"Give 1-{NAME_MAX} characters."})
        elif unsafe_in_one_line(clean):
            problems.append({"field": "name", "message": f"Name: {ONE_LINE_RULE}"})
        else:
            taken = db.session.scalar(
                select(Automation.id).where(
                    Automation.org_id == principal.org_id,
                    Automation.name == clean,
                    Automation.id != (exclude_id or 0),
                )
            )
            if taken:
                message = f"Another automation is named {clean!r}."
                problems.append({"field": "name", "message": message})
    org = load_org_schema(principal.org_id)
    problems += [p.as_detail() for p in validate_graph(graph, REGISTRY, org)]
    return problems + _private_webhook_addresses(graph)


def _private_webhook_addresses(graph: Any) -> list[dict[str, str]]:
    """A webhook URL naming a non-public IP address outright, refused at save unless the
    deployment allows private webhooks (every try checks what a host name resolves to)."""
    if current_app.config.get(webhooks.PRIVATE_SETTING):
        return []
    problems = []
    for node in parse_graph(graph, REGISTRY)[0].nodes.values():
        if node.type_key != WEBHOOK or node.config is None:
            continue  # not a webhook, or its config has problems of its own already
        try:
            check_literal_address(node.config.url, webhooks.PRIVATE_SETTING)
        except UnsafeAddress as err:
            problems.append({"field": f"{node.where}.config.url", "message": str(err)})
    return problems


def _raise(problems: list[dict[str, str]]) -> None:
    if problems:
        count = len(problems)
        message = (
            f"The automation has {count} problem{'s' if count > 1 else ''}; nothing was saved."
        )
        raise ValidationFailed(message, problems)


def _normalized(graph: dict[str, Any]) -> dict[str, Any]:
    """The graph as stored: every node with a config, edges always present."""
    nodes = [
        {"id": n["id"], "type": n["type"], "config": n.get("config") or {}} for n in graph["nodes"]
    ]
    return {"nodes": nodes, "edges": list(graph.get("edges") or [])}


def _trigger_of(graph: dict[str, Any]) -> tuple[str, str | None]:
    parsed, _ = parse_graph(graph, REGISTRY)
    trigger = parsed.trigger
    return trigger.type_key, getattr(trigger.config, "model", None)


def create_automation(
    principal: Principal, name: str, graph: Any, enabled: bool = False
) -> Automation:
    """Validate and store a new automation; an invalid graph is never saved."""
    principal.require("automation.create")
    _raise(check_automation(principal, name, graph))
    clean = _normalized(graph)
    trigger_type, trigger_model = _trigger_of(clean)
    automation = Automation(
        org_id=principal.org_id,
        name=name.strip(),
        enabled=bool(enabled),
        graph=clean,
        trigger_type=trigger_type,
        trigger_model=trigger_model,
        created_by_id=principal.user_id,
        owner_id=principal.user_id,
        private_records=PrivateRecords.SKIP,
    )
    payload = {"version": 1, "enabled": automation.enabled}
    return save_new(
        principal, automation, "automation.created", "automation", payload, id_key="automation_id"
    )


def update_automation(
    principal: Principal,
    automation_id: int,
    *,
    graph: Any,
    name: str | None = None,
    version: int | None = None,
) -> Automation:
    """Replace the graph (and the name, when given); ``version`` guards against lost updates."""
    principal.require("automation.manage")
    automation = get_automation(principal, automation_id, lock=True)
    if version is not None and version != automation.version:
        raise Conflict(
            f"The automation changed meanwhile: it is at version {automation.version}, "
            f"not {version}. Reload it and apply your change again."
        )
    _raise(check_automation(principal, name, graph, exclude_id=automation.id))
    clean = _normalized(graph)
    changed = []
    if name is not None and name.strip() != automation.name:
        automation.name = name.strip()
        changed.append("name")
    if clean != automation.graph:
        automation.graph = clean
        automation.trigger_type, automation.trigger_model = _trigger_of(clean)
        changed.append("graph")
    if changed:
        _changed(principal, automation, changed)
    db.session.commit()
    return automation


def _changed(principal: Principal, automation: Automation, fields: list[str], **extra: Any) -> None:
    """A change to what the automation does: a new version, its event, and the member who
    made it becomes its owner (its runs act within their rights from now on)."""
    automation.version += 1
    payload = {"automation_id": automation.id, "version": automation.version, "fields": fields}
    record_event(principal, "automation.updated", "automation", automation.id, payload | extra)
    _own(principal, automation)


def _own(principal: Principal, automation: Automation) -> None:
    """Make the acting member the owner (an API key or the system owns nothing)."""
    if principal.user_id is None or automation.owner_id == principal.user_id:
        return
    previous, automation.owner_id = automation.owner_id, principal.user_id
    automation.disabled_reason = None  # the lapsed owner it named is no longer the owner
    record_event(
        principal,
        "automation.owner_changed",
        "automation",
        automation.id,
        {
            "automation_id": automation.id,
            "user_id": principal.user_id,
            "previous_owner_id": previous,
        },
    )


def _require_owner(automation: Automation, doing: str) -> None:
    """Refuse ``doing`` while the automation's owner may not vouch for it."""
    owner = owner_of(db.session, automation)
    if owner.lapse:
        raise Conflict(f"{owner.reason()} Take ownership of {automation.name} to {doing} it.")


def set_enabled(principal: Principal, automation_id: int, enabled: bool) -> Automation:
    """Turn an automation on or off; on only while its owner may manage automations."""
    principal.require("automation.manage")
    automation = get_automation(principal, automation_id)
    if enabled:
        _require_owner(automation, "enable")
    automation.disabled_reason = None
    if automation.enabled != enabled:
        automation.enabled = enabled
        kind = "automation.enabled" if enabled else "automation.disabled"
        record_event(principal, kind, "automation", automation.id, {"automation_id": automation.id})
    db.session.commit()
    return automation


def take_ownership(principal: Principal, automation_id: int) -> Automation:
    """Make the acting member the automation's owner: its runs act within their rights."""
    principal.require("automation.manage")
    if principal.user_id is None:
        raise ValidationFailed(
            "Only a member can own an automation.",
            [{"field": "owner", "message": "Sign in as the member who will own it."}],
        )
    automation = get_automation(principal, automation_id, lock=True)
    _own(principal, automation)
    db.session.commit()
    return automation


def set_private_records(principal: Principal, automation_id: int, setting: str) -> Automation:
    """Choose what a private record's events do to the automation (``privacy``)."""
    principal.require("automation.manage")
    try:
        choice = PrivateRecords(setting)
    except ValueError:
        choices = ", ".join(c.value for c in PrivateRecords)
        raise ValidationFailed(
            "Unknown choice for private records.",
            [{"field": "private_records", "message": f"Choose one of: {choices}."}],
        ) from None
    automation = get_automation(principal, automation_id, lock=True)
    if automation.private_records != choice:
        automation.private_records = choice
        _changed(principal, automation, ["private_records"], private_records=choice.value)
    db.session.commit()
    return automation


def delete_automation(principal: Principal, automation_id: int) -> None:
    """Delete an automation and its runs."""
    principal.require("automation.manage")
    automation = get_automation(principal, automation_id)
    db.session.execute(db.delete(AutomationRun).where(AutomationRun.automation_id == automation.id))
    db.session.delete(automation)
    record_event(
        principal,
        "automation.deleted",
        "automation",
        automation_id,
        {"automation_id": automation_id},
    )
    db.session.commit()


def _newest_record(principal: Principal, model: RecordModel, setting: str) -> Record | None:
    """The newest record of ``model`` the principal sees (of the org's only, for an
    automation that skips private records), or None."""
    newest = queries.list_records(principal, model, limit=1).items
    if newest and newest[0].visibility == "private" and setting == PrivateRecords.SKIP:
        stmt = (
            select(Record)
            .where(
                Record.org_id == principal.org_id,
                Record.model_id == model.id,
                Record.visibility == "org",
            )
            .order_by(Record.id.desc())
            .limit(1)
        )
        return db.session.scalar(stmt)
    return newest[0] if newest else None


def run_test(
    principal: Principal, automation_id: int, record_id: int | None = None
) -> AutomationRun:
    """Run an automation now (enabled or not) on a chosen record, or the newest one.

    A test run really performs its actions, as the automation would.
    """
    principal.require("automation.run")
    automation = get_automation(principal, automation_id)
    _require_owner(automation, "run")
    owner = owner_of(db.session, automation)
    trigger = Trigger(type=automation.trigger_type, org_id=principal.org_id, model_key=None)
    if automation.trigger_model:
        model = records.get_model(principal, automation.trigger_model)
        if record_id is not None:
            record = records.get_record(principal, model, record_id)
        else:
            record = _newest_record(principal, model, automation.private_records)
        trigger = Trigger(
            type=automation.trigger_type,
            org_id=principal.org_id,
            model_key=model.key,
            model_id=model.id,
            record_id=record.id if record else None,
            values=dict(record.values) if record else {},
            private_to=readers_of(record),
        )
        if not admits(automation, owner, trigger):
            raise ValidationFailed(
                f"Record {trigger.record_id} is private, and this automation does not run for it.",
                [
                    {
                        "field": "record_id",
                        "message": "Choose a record of the organization, or let the "
                        "automation run for private records first.",
                    }
                ],
            )
    elif record_id is not None:
        raise ValidationFailed(
            "This automation's trigger has no model.",
            [
                {
                    "field": "record_id",
                    "message": "The trigger names no model to take a record from.",
                }
            ],
        )
    run_id = execute(automation, trigger, owner, is_test=True, started_by_id=principal.user_id)
    record_event(
        principal,
        "automation.test_run",
        "automation",
        automation_id,
        {"automation_id": automation_id, "run_id": run_id},
    )
    db.session.commit()
    return get_run(principal, run_id)
