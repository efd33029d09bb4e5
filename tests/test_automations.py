"""Automations: validate_graph, the after-commit engine, web pages and the internal JSON.

Webhooks go to a real loopback HTTP server (tests/webhook_server.py); nothing is mocked.
"""

from __future__ import annotations

import json
import socket
from contextlib import contextmanager
from typing import Any

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.api.dispatch import dispatch
from monark.automations import services
from monark.automations.graph import validate_graph
from monark.automations.models import Automation, AutomationRun
from monark.automations.nodes import REGISTRY
from monark.automations.references import load_org_schema
from monark.core.errors import ValidationFailed
from monark.core.events import record_event
from monark.core.models import Event
from monark.core.uow import unit_of_work
from monark.extensions import db
from monark.records import services as records
from monark.records.models import Record, RecordModel
from tests import factories
from tests.jobs import drain
from tests.webhook_server import WebhookServer

INTERNAL = "/internal/automations"


# ---- helpers --------------------------------------------------------------------------


@pytest.fixture
def acme(world: factories.World) -> factories.OrgWorld:
    """Acme, with a ``followups`` model next to its ``tasks``."""
    owner = world.a.principal("owner")
    followups = records.create_model(owner, "followups", "Follow-ups")
    records.add_field(owner, followups, key="title", label="Title", type="text", required=True)
    records.add_field(owner, followups, key="source", label="Source", type="number")
    return world.a


def graph(*nodes: tuple[str, str, dict], edges: list[tuple] = ()) -> dict[str, Any]:
    """``graph(("t", "record.created", {...}), ..., edges=[("t", "a"), ("c", "x", False)])``."""
    out_edges = []
    for edge in edges:
        item = {"from": edge[0], "to": edge[1]}
        if len(edge) > 2:
            item["when"] = edge[2]
        out_edges.append(item)
    return {
        "nodes": [{"id": i, "type": t, "config": c} for i, t, c in nodes],
        "edges": out_edges,
    }


def problems(org: factories.OrgWorld, raw: Any) -> dict[str, str]:
    """``validate_graph`` as {field: message}."""
    found = validate_graph(raw, REGISTRY, load_org_schema(org.org.id))
    return {p.field: p.message for p in found}


def count(model, *where) -> int:
    return db.session.scalar(select(func.count()).select_from(model).where(*where)) or 0


def model(org: factories.OrgWorld, key: str) -> RecordModel:
    return records.get_model(org.principal("owner"), key)


def runs_of(automation_id: int) -> list[AutomationRun]:
    db.session.expire_all()
    stmt = select(AutomationRun).where(AutomationRun.automation_id == automation_id)
    return list(db.session.scalars(stmt.order_by(AutomationRun.id)))


def step(run: AutomationRun, node_id: str) -> dict[str, Any]:
    return next(s for s in run.steps if s["node_id"] == node_id)


CREATED = ("t", "record.created", {"model": "tasks"})
NOTE = ("note", "add_audit_note", {"note": "Task {{record.id}} seen."})


# ---- validate_graph: one test per kind of problem ---------------------------------------


def test_validate_reports_an_unknown_node_type(acme):
    found = problems(acme, graph(CREATED, ("x", "send_fax", {}), edges=[("t", "x")]))
    assert list(found) == ["nodes[x].type"]
    assert "send_fax" in found["nodes[x].type"] and "send_webhook" in found["nodes[x].type"]


def test_validate_reports_invalid_config_per_field(acme):
    bad = graph(
        CREATED,
        ("hook", "send_webhook", {"url": "ftp://example.com", "timeout_seconds": 99}),
        ("c", "field_matches", {"field": "status", "operator": "resembles", "colour": "red"}),
        ("make", "create_record", {}),
        edges=[("t", "hook"), ("t", "c"), ("c", "make")],
    )
    found = problems(acme, bad)
    assert "http" in found["nodes[hook].config.url"]
    assert "30" in found["nodes[hook].config.timeout_seconds"]
    assert "equals" in found["nodes[c].config.operator"]
    assert found["nodes[c].config.colour"] == "Unknown config key."
    assert found["nodes[make].config.model"] == "Field required"
    assert found["nodes[make].config.values"] == "Field required"


@pytest.mark.parametrize(
    ("config", "field", "says"),
    [
        ({"url": "http://example.com:99999/"}, "url", "port is from 1 to 65535"),
        ({"url": "http://example.com:0/"}, "url", "port from 1 to 65535"),
        ({"url": "http://exa mple.com/"}, "url", "spaces"),
        ({"url": "http://[::1%25lo]/"}, "url", "zone"),
        ({"url": "http://[fe80::1%25eth0]/"}, "url", "zone"),
        ({"url": "http://[fe80::1%25eth0]:11434/v1"}, "url", "zone"),
        ({"url": "https://user:pw@example.com/"}, "url", "passwords"),
        # Host names DNS cannot carry: a part over 63 characters, an empty part, 253 in all.
        ({"url": "http://" + "a" * 300 + ".example.com/"}, "url", "1-63 characters"),
        ({"url": "http://" + "ü" * 60 + ".example.com/"}, "url", "1-63 characters"),
        ({"url": "http://hooks..example.com/"}, "url", "1-63 characters"),
        ({"url": "http://" + ".".join(["a" * 60] * 5) + "/"}, "url", "at most 253"),
        (
            {"url": "https://hooks.example.com/", "timeout_seconds": float("nan")},
            "timeout_seconds",
            "Give a number of seconds, more than 0 and at most 30.",
        ),
        (
            {"url": "https://hooks.example.com/", "timeout_seconds": 0},
            "timeout_seconds",
            "Give a number of seconds, more than 0 and at most 30.",
        ),
    ],
)
def test_a_webhook_no_run_could_send_is_refused_at_save(acme, config, field, says):
    found = problems(acme, graph(CREATED, ("hook", "send_webhook", config), edges=[("t", "hook")]))
    assert list(found) == [f"nodes[hook].config.{field}"]
    assert says in found[f"nodes[hook].config.{field}"]


def _saved_problems(acme, url: str) -> dict[str, str]:
    hook = graph(CREATED, ("hook", "send_webhook", {"url": url}), edges=[("t", "hook")])
    found = services.check_automation(acme.principal("owner"), "Hook", hook)
    return {p["field"]: p["message"] for p in found}


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:8080/hook", "127.0.0.1 is a non-public address"),
        ("http://[::1]/hook", "::1 is a non-public address"),
        ("http://169.254.169.254/latest", "non-public address"),
        ("http://10.1.2.3/", "AUTOMATION_WEBHOOK_ALLOW_PRIVATE allows others"),
    ],
)
def test_a_webhook_to_a_non_public_ip_written_out_is_refused_at_save(acme, url, says):
    found = _saved_problems(acme, url)
    assert list(found) == ["nodes[hook].config.url"] and says in found["nodes[hook].config.url"]
    with pytest.raises(ValidationFailed):
        services.create_automation(
            acme.principal("owner"),
            "Hook",
            graph(CREATED, ("hook", "send_webhook", {"url": url}), edges=[("t", "hook")]),
        )


def test_a_non_public_ip_is_saved_when_the_deployment_allows_it(acme, app, monkeypatch):
    monkeypatch.setitem(app.config, "AUTOMATION_WEBHOOK_ALLOW_PRIVATE", True)
    assert _saved_problems(acme, "http://127.0.0.1:8080/hook") == {}
    assert _saved_problems(acme, "https://hooks.example.com/in") == {}


@pytest.mark.parametrize(
    "name", ["Pay\u202eexe.txt", "Tab\there", "Iso\u2066late\u2069", "Bell\x07"]
)
def test_a_name_with_a_control_or_bidi_override_character_is_refused(acme, name):
    with pytest.raises(ValidationFailed) as caught:
        services.create_automation(acme.principal("owner"), name, graph(CREATED))
    [problem] = caught.value.details
    assert problem["field"] == "name" and "bidirectional overrides" in problem["message"]
    assert problem["message"].startswith("Name:")


def _update(record_id: Any) -> dict[str, Any]:
    fix = ("fix", "update_record", {"record_id": record_id, "values": {"points": 1}})
    return graph(CREATED, fix, edges=[("t", "fix")])


@pytest.mark.parametrize("record_id", ["abc", "{record.id}", "", 0, -1, 3.5, True, None, [7]])
def test_update_record_refuses_a_record_id_no_run_could_use_in_one_message(acme, record_id):
    found = problems(acme, _update(record_id))
    assert list(found) == ["nodes[fix].config.record_id"]  # not one per member of a union
    assert found["nodes[fix].config.record_id"].startswith("Give a record id (a whole number")


@pytest.mark.parametrize("record_id", [7, "7", "{{record.id}}", " {{ record.id }} "])
def test_update_record_takes_an_id_or_a_placeholder(acme, record_id):
    assert problems(acme, _update(record_id)) == {}


def test_validate_reports_a_graph_without_a_trigger(acme):
    found = problems(acme, graph(NOTE))
    assert "no trigger" in found["nodes"]
    assert "record.created" in found["nodes"]


def test_validate_reports_more_than_one_trigger(acme):
    two = graph(CREATED, ("t2", "manual", {}), NOTE, edges=[("t", "note"), ("t2", "note")])
    found = problems(acme, two)
    assert "exactly one trigger" in found["nodes[t2].type"]
    assert "nodes[t].type" not in found


def test_validate_reports_dangling_edges(acme):
    found = problems(acme, graph(CREATED, NOTE, edges=[("t", "note"), ("t", "nowhere")]))
    assert list(found) == ["edges[1].to"]
    assert "nowhere" in found["edges[1].to"]
    found = problems(acme, graph(CREATED, NOTE, edges=[("ghost", "note"), ("t", "note")]))
    assert list(found) == ["edges[0].from"]


def test_validate_reports_cycles(acme):
    a = ("a", "add_audit_note", {"note": "a"})
    b = ("b", "add_audit_note", {"note": "b"})
    found = problems(acme, graph(CREATED, a, b, edges=[("t", "a"), ("a", "b"), ("b", "a")]))
    assert list(found) == ["edges[2]"]
    assert "cycle: a → b → a" in found["edges[2]"]
    loop = problems(acme, graph(CREATED, a, edges=[("t", "a"), ("a", "a")]))
    assert "cycle" in loop["edges[1]"]


def test_validate_reports_unreachable_nodes(acme):
    orphan = ("orphan", "add_audit_note", {"note": "alone"})
    found = problems(acme, graph(CREATED, NOTE, orphan, edges=[("t", "note")]))
    assert list(found) == ["nodes[orphan]"]
    assert "Not reachable from the trigger t" in found["nodes[orphan]"]


def test_validate_reports_models_and_fields_the_org_does_not_have(acme):
    bad = graph(
        ("t", "record.updated", {"model": "tasks", "fields": ["status", "colour"]}),
        ("c", "field_matches", {"field": "priority", "value": "high"}),
        ("make", "create_record", {"model": "invoices", "values": {"total": 1}}),
        ("fix", "update_record", {"values": {"stauts": "done", "title": "{{record.name}}"}}),
        edges=[("t", "c"), ("c", "make"), ("c", "fix")],
    )
    found = problems(acme, bad)
    assert "colour" in found["nodes[t].config.fields.1"]
    assert "priority" in found["nodes[c].config.field"]
    assert "No model 'invoices'" in found["nodes[make].config.model"]
    assert "stauts" in found["nodes[fix].config.values.stauts"]
    assert "{{record.name}}" in found["nodes[fix].config.values.title"]
    assert len(found) == 5
    unknown_trigger_model = graph(
        ("t", "record.created", {"model": "invoices"}), NOTE, edges=[("t", "note")]
    )
    assert "No model 'invoices'" in problems(acme, unknown_trigger_model)["nodes[t].config.model"]


def test_validate_checks_literal_values_and_required_fields(acme):
    bad = graph(
        CREATED,
        ("make", "create_record", {"model": "tasks", "values": {"status": "finished"}}),
        edges=[("t", "make")],
    )
    found = problems(acme, bad)
    assert "todo" in found["nodes[make].config.values.status"]
    assert "Title (title) is required" in found["nodes[make].config.values"]


def test_validate_reports_edge_and_placeholder_misuse(acme):
    bad = graph(
        CREATED,
        (
            "make",
            "create_record",
            {"model": "followups", "values": {"title": "{{nodes.note.x}}", "source": "{{colour}}"}},
        ),
        ("note", "add_audit_note", {"note": "{{record.title}}"}),
        edges=[("t", "make", True), ("t", "note"), ("note", "t")],
    )
    found = problems(acme, bad)
    assert "start with record." in found["nodes[make].config.values.source"]
    assert "Only edges leaving a condition" in found["edges[0].when"]
    assert "nothing may lead into it" in found["edges[2].to"]
    assert "does not run before make" in found["nodes[make].config.values.title"]
    assert "never record values" in found["nodes[note].config.note"]


def test_validate_rejects_shapes_that_are_not_graphs(acme):
    assert list(problems(acme, [])) == ["graph"]
    assert list(problems(acme, {"nodes": []})) == ["nodes"]
    assert list(problems(acme, {"nodes": [{"id": "bad id!", "type": "manual"}]})) == ["nodes[0].id"]


def every_node_type(trigger: tuple[str, str, dict]) -> dict[str, Any]:
    """A valid graph: the given trigger, then the condition and every action."""
    return graph(
        trigger,
        ("c", "field_matches", {"field": "status", "operator": "equals", "value": "todo"}),
        (
            "make",
            "create_record",
            {
                "model": "followups",
                "values": {"title": "Follow up {{record.title}}", "source": "{{record.id}}"},
            },
        ),
        ("fix", "update_record", {"values": {"status": "doing"}}),
        (
            "hook",
            "send_webhook",
            {"url": "https://example.com/hook", "payload": {"id": "{{nodes.make.record_id}}"}},
        ),
        ("note", "add_audit_note", {"note": "{{automation.name}} saw {{record.id}}"}),
        edges=[
            ("t", "c"),
            ("c", "make", True),
            ("c", "fix", "false"),
            ("make", "hook"),
            ("t", "note"),
        ],
    )


TRIGGERS = [
    ("t", "record.created", {"model": "tasks"}),
    ("t", "record.updated", {"model": "tasks", "fields": ["status"]}),
    ("t", "record.deleted", {"model": "tasks"}),
    ("t", "manual", {"model": "tasks"}),
]


# A schedule has no record: its graph uses what it has (the slot, the automation).
SCHEDULED = graph(
    ("t", "schedule", {"cron": "0 9 * * 1-5"}),
    ("note", "add_audit_note", {"note": "{{automation.name}} at {{trigger.slot}}"}),
    edges=[("t", "note")],
)


def test_a_graph_of_every_node_type_is_valid(acme):
    used = set()
    for trigger in TRIGGERS:
        raw = every_node_type(trigger)
        assert problems(acme, raw) == {}, trigger[1]
        used |= {n["type"] for n in raw["nodes"]}
    assert problems(acme, SCHEDULED) == {}
    used |= {n["type"] for n in SCHEDULED["nodes"]}
    assert used == set(REGISTRY)


# ---- the engine -------------------------------------------------------------------------


def make_automation(
    org: factories.OrgWorld, raw: dict, name: str = "Auto", enabled=True, private_records=None
):
    """An automation by the org's owner; ``private_records`` opts it in to private records."""
    automation = services.create_automation(org.principal("owner"), name, raw, enabled)
    if private_records is not None:
        services.set_private_records(org.principal("owner"), automation.id, private_records)
    return automation


FOLLOW_UP = graph(
    CREATED,
    ("todo", "field_matches", {"field": "status", "value": "todo"}),
    (
        "make",
        "create_record",
        {
            "model": "followups",
            "values": {"title": "Follow up: {{record.title}}", "source": "{{record.id}}"},
        },
    ),
    edges=[("t", "todo"), ("todo", "make")],
)


def test_a_created_record_triggers_one_run_per_event(acme):
    automation = make_automation(acme, FOLLOW_UP)
    member = acme.principal("member")
    tasks = model(acme, "tasks")
    first = records.create_record(member, tasks, {"title": "Call Initech", "status": "todo"})
    second = records.create_record(member, tasks, {"title": "Pay rent", "status": "todo"})
    done = records.create_record(member, tasks, {"title": "Old news", "status": "done"})
    records.update_record(member, tasks, first.id, {"notes": "called"})
    drain()  # the automations these changes trigger run on the queue

    followups = model(acme, "followups")
    made = db.session.scalars(select(Record).where(Record.model_id == followups.id)).all()
    assert sorted(r.values["title"] for r in made) == [
        "Follow up: Call Initech",
        "Follow up: Pay rent",
    ]
    assert sorted(r.values["source"] for r in made) == [first.id, second.id]
    runs = runs_of(automation.id)
    assert [r.record_id for r in runs] == [first.id, second.id, done.id]
    assert [r.status for r in runs] == ["succeeded"] * 3
    created = db.session.scalars(
        select(Event.id).where(Event.type == "record.created", Event.subject_id == first.id)
    ).one()
    assert runs[0].trigger_event_id == created
    assert [s["status"] for s in runs[0].steps] == ["succeeded"] * 3
    assert step(runs[0], "todo")["output"] == {"matched": True}
    assert step(runs[0], "make")["input"]["values"]["title"] == "Follow up: Call Initech"
    assert step(runs[2], "make")["status"] == "skipped"
    # The follow-ups were written by the automation, with their own events.
    actors = db.session.execute(
        select(Event.actor_kind, Event.actor_id).where(
            Event.type == "record.created", Event.subject_id.in_([r.id for r in made])
        )
    ).all()
    assert actors == [("automation", automation.id)] * 2


def test_disabled_automations_and_other_orgs_do_not_run(acme, world):
    disabled = make_automation(acme, FOLLOW_UP, enabled=False)
    globex_owner = world.b.principal("owner")
    globex_tasks = records.get_model(globex_owner, "tasks")
    records.create_record(globex_owner, globex_tasks, {"title": "Globex work", "status": "todo"})
    records.create_record(acme.principal("owner"), model(acme, "tasks"), {"title": "Quiet"})
    drain()
    assert runs_of(disabled.id) == []
    enabled = make_automation(acme, FOLLOW_UP, name="On")
    records.create_record(globex_owner, globex_tasks, {"title": "More Globex", "status": "todo"})
    drain()
    assert runs_of(enabled.id) == []


def test_a_rolled_back_event_triggers_nothing(acme):
    automation = make_automation(acme, FOLLOW_UP)
    tasks = model(acme, "tasks")
    record = Record(org_id=acme.org.id, model_id=tasks.id, values={"title": "x", "status": "todo"})
    db.session.add(record)
    db.session.flush()
    record_event(
        acme.principal("owner"), "record.created", "record", record.id, {"model_id": tasks.id}
    )
    db.session.flush()
    db.session.rollback()
    db.session.commit()
    drain()
    assert runs_of(automation.id) == []


def test_the_depth_limit_stops_a_self_triggering_graph(acme, app, monkeypatch):
    monkeypatch.setitem(app.config, "AUTOMATION_MAX_DEPTH", 3)
    again = graph(
        CREATED,
        (
            "again",
            "create_record",
            {"model": "tasks", "values": {"title": "Again: {{record.title}}"}},
        ),
        edges=[("t", "again")],
    )
    automation = make_automation(acme, again, name="Echo")
    tasks = model(acme, "tasks")
    before = count(Record, Record.model_id == tasks.id)
    records.create_record(acme.principal("member"), tasks, {"title": "Seed"})
    drain()
    assert count(Record, Record.model_id == tasks.id) == before + 1 + 3
    runs = runs_of(automation.id)
    assert [(r.depth, r.status) for r in runs] == [
        (1, "succeeded"),
        (2, "succeeded"),
        (3, "succeeded"),
        (4, "skipped"),
    ]
    assert "limit is 3" in runs[-1].error
    newest = db.session.scalars(
        select(Record).where(Record.model_id == tasks.id).order_by(Record.id.desc())
    ).first()
    assert newest.values["title"] == "Again: Again: Again: Seed"


def test_one_change_sets_off_at_most_max_runs_however_the_chain_branches(acme, app, monkeypatch):
    monkeypatch.setitem(app.config, "AUTOMATION_MAX_RUNS", 10)
    copy = ("{{record.title}}+",)
    # Three new tasks per new task: unchecked, depth 5 alone would allow 3+9+27+81+243 runs.
    fan_out = graph(
        CREATED,
        *[
            (f"c{i}", "create_record", {"model": "tasks", "values": {"title": copy[0]}})
            for i in range(3)
        ],
        edges=[("t", f"c{i}") for i in range(3)],
    )
    automation = make_automation(acme, fan_out, name="Fan out")
    tasks = model(acme, "tasks")
    before = count(Record, Record.model_id == tasks.id)
    records.create_record(acme.principal("member"), tasks, {"title": "Seed"})
    drain()
    runs = runs_of(automation.id)
    done = [r for r in runs if r.status == "succeeded"]
    skipped = [r for r in runs if r.status == "skipped"]
    assert len(done) == 10
    assert count(Record, Record.model_id == tasks.id) == before + 1 + 3 * 10
    # Depth-first, so some stop at the depth limit, and the rest at the budget.
    assert any("limit for one change" in r.error for r in skipped)
    assert all(r.error.startswith("Not run:") for r in skipped)
    # The next change has a budget of its own.
    records.create_record(acme.principal("member"), tasks, {"title": "Second seed"})
    drain()
    assert len([r for r in runs_of(automation.id) if r.status == "succeeded"]) == 20


def test_a_failing_webhook_is_a_failed_step_and_loses_nothing_else(acme, webhook):
    webhook.status = 500
    raw = graph(
        CREATED,
        ("make", "create_record", {"model": "followups", "values": {"title": "{{record.title}}"}}),
        ("hook", "send_webhook", {"url": webhook.url, "timeout_seconds": 2}),
        ("after", "add_audit_note", {"note": "hook done for {{record.id}}"}),
        ("aside", "add_audit_note", {"note": "seen {{record.id}}"}),
        edges=[("t", "make"), ("make", "hook"), ("hook", "after"), ("t", "aside")],
    )
    automation = make_automation(acme, raw)
    task = records.create_record(
        acme.principal("member"), model(acme, "tasks"), {"title": "Ship it", "status": "todo"}
    )
    drain()

    [run] = runs_of(automation.id)
    assert run.status == "failed"
    assert run.error == "Failed at hook."
    assert step(run, "make")["status"] == "succeeded"
    assert step(run, "hook")["status"] == "failed"
    assert "answered HTTP 500" in step(run, "hook")["error"]
    after = step(run, "after")
    assert (after["status"], after["reason"], after["input"]) == (
        "skipped",
        "An earlier step failed.",
        None,
    )
    assert step(run, "aside")["status"] == "succeeded"
    # Nothing else is lost: the task, the follow-up and the independent note all exist.
    assert db.session.get(Record, task.id) is not None
    assert count(Record, Record.model_id == model(acme, "followups").id) == 1
    notes = db.session.scalars(select(Event.payload).where(Event.type == "automation.note")).all()
    assert notes == [{"automation_id": automation.id, "note": f"seen {task.id}"}]
    # The server got the default payload.
    [received] = webhook.received
    assert received["json"]["record"]["title"] == "Ship it"
    assert received["json"]["trigger"] == {
        "type": "record.created",
        "model": "tasks",
        "event_id": run.trigger_event_id,
    }


def test_a_webhook_to_a_closed_port_fails_its_step(acme, app, monkeypatch):
    monkeypatch.setitem(app.config, "AUTOMATION_WEBHOOK_ALLOW_PRIVATE", True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    raw = graph(
        CREATED,
        ("hook", "send_webhook", {"url": f"http://127.0.0.1:{port}/x"}),
        edges=[("t", "hook")],
    )
    automation = make_automation(acme, raw)
    records.create_record(acme.principal("member"), model(acme, "tasks"), {"title": "Ping"})
    drain()
    [run] = runs_of(automation.id)
    assert run.status == "failed"
    assert "ConnectError" in step(run, "hook")["error"]


@contextmanager
def _saved_while_private_allowed(app):
    """Save refuses a non-public IP written out; one saved while the deployment allowed
    private webhooks, which it no longer does, meets the check at each try."""
    app.config["AUTOMATION_WEBHOOK_ALLOW_PRIVATE"] = True
    try:
        yield
    finally:
        app.config["AUTOMATION_WEBHOOK_ALLOW_PRIVATE"] = False


def test_webhooks_to_private_addresses_are_refused_by_default(acme, app):
    assert not app.config["AUTOMATION_WEBHOOK_ALLOW_PRIVATE"]
    server = WebhookServer().start()
    try:
        raw = graph(CREATED, ("hook", "send_webhook", {"url": server.url}), edges=[("t", "hook")])
        with _saved_while_private_allowed(app):
            automation = make_automation(acme, raw)
        assert not app.config["AUTOMATION_WEBHOOK_ALLOW_PRIVATE"]
        records.create_record(acme.principal("member"), model(acme, "tasks"), {"title": "Probe"})
        drain()
    finally:
        server.stop()
    [run] = runs_of(automation.id)
    assert "non-public address" in step(run, "hook")["error"]
    assert server.received == []


@pytest.mark.parametrize("url", ["http://224.0.0.1:9/in", "http://[ff02::1]:9/in"])
def test_webhooks_to_multicast_addresses_are_refused(acme, app, url):
    assert "non-public address" in _saved_problems(acme, url)["nodes[hook].config.url"]
    with _saved_while_private_allowed(app):
        automation = _hook_automation(acme, url)
    hook = _hook_run(acme, url, automation)
    assert hook["status"] == "failed" and "non-public address" in hook["error"]


def _fake_network(monkeypatch, dns, answer) -> None:
    """Webhooks see ``dns(host, port)`` as the resolver and ``answer(request)`` as the far end."""
    import socket

    import httpx2

    from monark.automations import actions

    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *a, **kw: dns(host, port))
    monkeypatch.setattr(
        actions,
        "webhook_client",
        lambda timeout: httpx2.Client(transport=httpx2.MockTransport(answer), timeout=timeout),
    )


def _hook_automation(acme, url: str) -> Automation:
    raw = graph(CREATED, ("hook", "send_webhook", {"url": url}), edges=[("t", "hook")])
    return make_automation(acme, raw)


def _hook_run(acme, url: str, automation: Automation | None = None) -> dict[str, Any]:
    """Create a record that fires one webhook to ``url``; that step of the run."""
    automation = automation or _hook_automation(acme, url)
    records.create_record(acme.principal("member"), model(acme, "tasks"), {"title": "Probe"})
    drain()
    [run] = runs_of(automation.id)
    return step(run, "hook")


def test_a_webhook_connects_to_the_address_it_checked(acme, monkeypatch):
    """DNS rebinding: a second lookup answering 127.0.0.1 must not be where it connects."""
    import socket

    import httpx2

    lookups: list[str] = []
    sent: list[httpx2.Request] = []

    def rebinding_dns(host, port):
        lookups.append(host)
        address = "93.184.216.34" if len(lookups) == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        return httpx2.Response(204)

    _fake_network(monkeypatch, rebinding_dns, answer)
    assert _hook_run(acme, "https://hooks.example.com:8443/in")["status"] == "succeeded"
    assert lookups == ["hooks.example.com"]  # resolved once, by the check
    [request] = sent
    assert (request.url.host, request.url.port, request.url.path) == ("93.184.216.34", 8443, "/in")
    assert request.headers["Host"] == "hooks.example.com:8443"
    assert request.extensions["sni_hostname"] == "hooks.example.com"


def test_a_webhook_tries_each_checked_address_in_turn(acme, monkeypatch):
    import socket

    import httpx2

    tried: list[str] = []

    def two_addresses(host, port):
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("2606:2800:220:1::1", port, 0, 0)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
        ]

    def answer(request: httpx2.Request) -> httpx2.Response:
        tried.append(request.url.host)
        if ":" in request.url.host:  # no IPv6 route here
            raise httpx2.ConnectError("unreachable", request=request)
        return httpx2.Response(204)

    _fake_network(monkeypatch, two_addresses, answer)
    assert _hook_run(acme, "https://hooks.example.com/in")["status"] == "succeeded"
    assert tried == ["2606:2800:220:1::1", "93.184.216.34"]


def test_update_and_delete_triggers_read_the_record(acme, webhook):
    raw = graph(
        ("t", "record.updated", {"model": "tasks", "fields": ["status"]}),
        (
            "hook",
            "send_webhook",
            {
                "url": webhook.url,
                "payload": {"title": "{{record.title}}", "status": "{{record.status}}"},
            },
        ),
        edges=[("t", "hook")],
    )
    updated = make_automation(acme, raw, name="Updated")
    gone = {
        **raw,
        "nodes": [
            {"id": "t", "type": "record.deleted", "config": {"model": "tasks"}},
            raw["nodes"][1],
        ],
    }
    deleted = make_automation(acme, gone, name="Deleted")
    member, tasks = acme.principal("member"), model(acme, "tasks")
    task = records.create_record(member, tasks, {"title": "Plan", "status": "todo"})
    records.update_record(member, tasks, task.id, {"notes": "no status change"})
    records.update_record(member, tasks, task.id, {"status": "doing"})
    records.delete_record(member, tasks, task.id)
    drain()
    assert len(runs_of(updated.id)) == 1
    assert len(runs_of(deleted.id)) == 1
    assert [r["json"] for r in webhook.received] == [
        {"title": "Plan", "status": "doing"},
        {"title": "Plan", "status": "doing"},
    ]


def test_update_record_changes_the_triggering_record(acme):
    raw = graph(
        CREATED,
        ("fix", "update_record", {"values": {"points": 3, "notes": "auto"}}),
        edges=[("t", "fix")],
    )
    automation = make_automation(acme, raw)
    task = records.create_record(acme.principal("member"), model(acme, "tasks"), {"title": "X"})
    drain()
    db.session.expire_all()
    assert db.session.get(Record, task.id).values == {"title": "X", "points": 3, "notes": "auto"}
    [run] = runs_of(automation.id)
    assert step(run, "fix")["output"] == {"record_id": task.id, "changed": ["notes", "points"]}


def test_a_test_run_uses_the_chosen_record_even_when_disabled(acme):
    automation = make_automation(acme, FOLLOW_UP, enabled=False, private_records="keep")
    owner = acme.principal("owner")
    run = services.run_test(owner, automation.id, acme.public.id)
    assert run.is_test and run.status == "succeeded" and run.record_id == acme.public.id
    title = db.session.scalars(
        select(Record.values).where(Record.model_id == model(acme, "followups").id)
    ).one()["title"]
    assert title == f"Follow up: {acme.public.title}"
    newest = services.run_test(owner, automation.id)  # no record given: the newest
    assert newest.record_id == max(acme.public.id, acme.private.id)


def test_a_manual_graph_without_a_model_runs_on_no_record(acme):
    raw = graph(
        ("go", "manual", {}),
        ("note", "add_audit_note", {"note": "{{automation.name}}"}),
        edges=[("go", "note")],
    )
    automation = make_automation(acme, raw, name="Button")
    run = services.run_test(acme.principal("owner"), automation.id)
    assert run.status == "succeeded" and run.record_id is None
    assert step(run, "note")["output"]["event_id"]


# ---- web pages --------------------------------------------------------------------------


def soup(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def test_the_web_editor_lists_problems_inline_and_saves_nothing(acme, login):
    owner = login("owner@acme.test")
    page = owner.get("/automations/new")
    assert page.status_code == 200
    assert "record.created" in soup(page).select_one("textarea#automation-graph").get_text()
    bad = '{"nodes": [{"id": "t", "type": "record.created", "config": {"model": "nope"}}]}'
    response = owner.post("/automations/new", {"name": "", "graph": bad})
    assert response.status_code == 422
    page = soup(response)
    assert (
        page.select_one("#automation-name-error").get_text(strip=True) == "Give 1-120 characters."
    )
    items = [li.get_text(" ", strip=True) for li in page.select("#graph-problems li")]
    assert items == [
        "nodes[t].config.model No model 'nope' in this organization (models: followups, tasks)."
    ]
    assert page.select_one("textarea#automation-graph").get_text() == bad
    broken = owner.post("/automations/new", {"name": "Broken", "graph": "{nodes: "})
    assert broken.status_code == 422
    assert "Not valid JSON (line 1, column 2)" in broken.get_data(as_text=True)
    assert count(Automation) == 0


def test_the_web_pages_create_show_enable_test_and_list_runs(acme, login):
    owner = login("owner@acme.test")
    created = owner.post("/automations/new", {"name": "Follow ups", "graph": json.dumps(FOLLOW_UP)})
    assert created.status_code == 303
    automation = db.session.scalars(select(Automation)).one()
    url = f"/automations/{automation.id}"
    assert created.headers["Location"] == url
    page = soup(owner.get(url))
    assert [td.get_text() for td in page.select("table tbody tr td:first-child code")][:3] == [
        "t",
        "todo",
        "make",
    ]
    assert [li.get_text(" ", strip=True) for li in page.select("ul.edges li")] == [
        "t → todo",
        "todo → make",
    ]
    assert owner.post(f"{url}/enabled", {"enabled": "true"}).status_code == 303
    db.session.expire_all()
    assert db.session.get(Automation, automation.id).enabled
    tested = owner.post(f"{url}/test", {"record_id": str(acme.public.id)})
    assert tested.status_code == 303
    run_page = soup(owner.get(tested.headers["Location"]))
    assert [s.get_text() for s in run_page.select(".step .status")] == ["succeeded"] * 3
    runs_page = owner.get(f"{url}/runs")
    assert runs_page.status_code == 200 and "test" in runs_page.get_data(as_text=True)
    edited = dict(FOLLOW_UP, edges=[])
    saved = owner.post(url, {"name": "Follow ups", "graph": json.dumps(edited), "version": "1"})
    assert saved.status_code == 422  # unreachable nodes: nothing saved
    assert "Not reachable" in saved.get_data(as_text=True)
    stale = owner.post(url, {"name": "Renamed", "graph": json.dumps(FOLLOW_UP), "version": "0"})
    assert stale.status_code == 409
    renamed = owner.post(url, {"name": "Renamed", "graph": json.dumps(FOLLOW_UP), "version": "1"})
    assert renamed.status_code == 303
    db.session.expire_all()
    assert db.session.get(Automation, automation.id).version == 2
    assert owner.post(f"{url}/delete").status_code == 303
    assert count(Automation) == count(AutomationRun) == 0


def test_web_permissions(acme, login):
    automation = make_automation(acme, FOLLOW_UP)
    url = f"/automations/{automation.id}"
    member, viewer = login("member@acme.test"), login("viewer@acme.test")
    assert viewer.get("/automations").status_code == 200
    assert viewer.get(url).status_code == 200
    assert "Edit" not in [h.get_text() for h in soup(viewer.get(url)).select("h2")]
    assert member.get("/automations/new").status_code == 403
    assert member.post("/automations/new", {"name": "x", "graph": "{}"}).status_code == 403
    assert member.post(url, {"name": "x", "graph": "{}"}).status_code == 403
    assert member.post(f"{url}/enabled", {"enabled": "false"}).status_code == 403
    assert member.post(f"{url}/test").status_code == 403
    assert member.post(f"{url}/delete").status_code == 403
    assert count(Automation) == 1 and count(AutomationRun) == 0
    globex = login("owner@globex.test")
    assert globex.get(url).status_code == 404
    assert globex.get(f"{url}/runs").status_code == 404
    assert globex.post(f"{url}/test").status_code == 404


def test_the_nav_links_automations(acme, login):
    nav = soup(login("viewer@acme.test").get("/automations")).select_one("nav.nav")
    assert "Automations" in [a.get_text() for a in nav.select("a")]


# ---- internal JSON ------------------------------------------------------------------------


def test_json_create_itemizes_problems_and_saves_nothing(acme, login):
    owner = login("owner@acme.test")
    bad = graph(
        CREATED,
        ("x", "send_fax", {}),
        ("note", "add_audit_note", {}),
        edges=[("t", "x"), ("t", "note"), ("t", "ghost")],
    )
    before = count(Event)
    response = owner.api("POST", INTERNAL, json={"name": "Bad", "graph": bad})
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "validation_error"
    assert "3 problems; nothing was saved" in error["message"]
    assert [d["field"] for d in error["details"]] == [
        "nodes[x].type",
        "nodes[note].config.note",
        "edges[2].to",
    ]
    assert count(Automation) == 0 and count(Event) == before


def test_json_endpoints_round_trip(acme, login):
    owner = login("owner@acme.test")
    created = owner.api("POST", INTERNAL, json={"name": "Follow ups", "graph": FOLLOW_UP})
    assert created.status_code == 201, created.get_json()
    body = created.get_json()
    assert body["enabled"] is False and body["version"] == 1
    assert body["trigger"] == {"type": "record.created", "model": "tasks"}
    assert body["url"] == f"/automations/{body['id']}"
    one = f"{INTERNAL}/{body['id']}"
    listed = owner.api("GET", INTERNAL).get_json()["automations"]
    assert [(a["id"], a["name"]) for a in listed] == [(body["id"], "Follow ups")]
    types = owner.api("GET", f"{INTERNAL}/node-types").get_json()["node_types"]
    assert {t["type"] for t in types} == set(REGISTRY)
    webhook_type = next(t for t in types if t["type"] == "send_webhook")
    assert webhook_type["config_schema"]["required"] == ["url"]
    events = owner.api("GET", f"{INTERNAL}/trigger-events").get_json()
    assert [e["type"] for e in events["trigger_events"]] == [
        "record.created",
        "record.updated",
        "record.deleted",
        "manual",
        "schedule",
    ]
    assert {m["key"] for m in events["models"]} == {"tasks", "followups"}

    assert owner.api("POST", f"{one}/enabled", json={"enabled": True}).get_json()["enabled"]
    stale = owner.api("POST", one, json={"graph": FOLLOW_UP, "name": "New", "version": 7})
    assert stale.status_code == 409
    updated = owner.api("POST", one, json={"graph": FOLLOW_UP, "name": "New", "version": 1})
    assert updated.get_json()["version"] == 2
    invalid = owner.api("POST", one, json={"graph": {"nodes": [NOTE]}})
    assert invalid.status_code == 400
    assert owner.api("GET", one).get_json()["graph"] == FOLLOW_UP

    run = owner.api("POST", f"{one}/test", json={"record_id": acme.public.id})
    assert run.status_code == 201
    run_body = run.get_json()
    assert run_body["status"] == "succeeded" and run_body["is_test"] is True
    fetched = owner.api("GET", f"{INTERNAL}/runs/{run_body['id']}").get_json()
    assert [s["node_id"] for s in fetched["steps"]] == ["t", "todo", "make"]
    assert owner.api("GET", one).get_json()["recent_runs"][0]["id"] == run_body["id"]
    unknown = owner.api("POST", f"{one}/test", json={"record_id": 999999})
    assert unknown.status_code == 404
    # Beyond what the id column holds: a 400 naming it, on SQLite and PostgreSQL alike.
    huge = owner.api("POST", f"{one}/test", json={"record_id": 10**30})
    assert huge.status_code == 400
    assert huge.get_json()["error"]["details"][0]["field"] == "record_id"


def test_json_permissions_and_tenancy(acme, login):
    automation = make_automation(acme, FOLLOW_UP)
    one = f"{INTERNAL}/{automation.id}"
    member, viewer = login("member@acme.test"), login("viewer@acme.test")
    denied = member.api("POST", INTERNAL, json={"name": "Mine", "graph": FOLLOW_UP})
    assert denied.status_code == 403
    assert denied.get_json()["error"]["code"] == "forbidden"
    assert "automation.create" in denied.get_json()["error"]["message"]
    assert member.api("POST", one, json={"graph": FOLLOW_UP}).status_code == 403
    assert member.api("POST", f"{one}/enabled", json={"enabled": False}).status_code == 403
    assert member.api("POST", f"{one}/test", json={}).status_code == 403
    assert viewer.api("GET", INTERNAL).status_code == 200
    assert viewer.api("GET", one).status_code == 200
    assert count(Automation) == 1 and count(AutomationRun) == 0
    globex = login("owner@globex.test")
    assert globex.api("GET", one).status_code == 404
    assert globex.api("POST", f"{one}/test", json={}).status_code == 404
    assert globex.api("GET", INTERNAL).get_json() == {"automations": []}


def test_internal_endpoints_answer_json_and_take_no_api_keys(acme, app):
    client = app.test_client()
    response = client.get(INTERNAL, headers={"Authorization": f"Bearer {acme.keys['owner']}"})
    assert response.status_code == 401
    assert response.get_json()["error"]["code"] == "unauthorized"


def test_private_record_runs_are_for_the_records_readers_alone(acme, login):
    """Not even which steps ran: a viewer who may not read the record never gets the run."""
    automation = make_automation(acme, FOLLOW_UP, private_records="keep")
    run = services.run_test(acme.principal("owner"), automation.id, acme.private.id)
    assert run.record_private
    viewer = login("viewer@acme.test")
    assert viewer.api("GET", f"{INTERNAL}/runs/{run.id}").status_code == 404
    assert viewer.get(f"/automations/{automation.id}/runs/{run.id}").status_code == 404
    listed = viewer.get(f"/automations/{automation.id}/runs").get_data(as_text=True)
    assert f"/runs/{run.id}" not in listed and f"#{acme.private.id}" not in listed
    for reader in ("owner@acme.test", "member@acme.test"):  # an admin; the record's creator
        seen = login(reader).api("GET", f"{INTERNAL}/runs/{run.id}").get_json()
        assert seen["steps"][1]["input"]["field"] == "status", reader


def test_the_dispatcher_reaches_the_internal_endpoints_as_the_user(acme):
    owner, member = acme.principal("owner"), acme.principal("member")
    made = dispatch(owner, "POST", INTERNAL, json_body={"name": "Via chat", "graph": FOLLOW_UP})
    assert made.status == 201
    bad = dispatch(owner, "POST", INTERNAL, json_body={"name": "Bad", "graph": {"nodes": []}})
    assert bad.status == 400 and bad.error_details() == [
        {"field": "nodes", "message": "Give a list of nodes (at least a trigger)."}
    ]
    refused = dispatch(member, "POST", INTERNAL, json_body={"name": "M", "graph": FOLLOW_UP})
    assert refused.status == 403
    assert dispatch(member, "GET", f"{INTERNAL}/{made.body['id']}").ok
    created = db.session.scalars(select(Event).where(Event.type == "automation.created")).one()
    assert (created.actor_kind, created.actor_id) == ("user", owner.user_id)


def test_writes_through_the_dispatcher_trigger_runs_after_the_unit_commits(acme):
    automation = make_automation(acme, FOLLOW_UP)
    member = acme.principal("member")
    made = dispatch(
        member,
        "POST",
        "/api/v1/models/tasks/records",
        json_body={"values": {"title": "Via tool", "status": "todo"}},
    )
    assert made.status == 201
    drain()
    [run] = runs_of(automation.id)
    assert run.status == "succeeded" and run.record_id == made.body["id"]
    assert count(Record, Record.model_id == model(acme, "followups").id) == 1


def test_a_unit_of_work_that_fails_or_rolls_back_triggers_nothing(acme):
    automation = make_automation(acme, FOLLOW_UP)
    member, tasks = acme.principal("member"), model(acme, "tasks")
    with unit_of_work() as unit:
        made = dispatch(
            member,
            "POST",
            "/api/v1/models/tasks/records",
            json_body={"values": {"title": "Undone", "status": "todo"}},
        )
        assert made.status == 201
        unit.fail()
    with unit_of_work():
        record = Record(org_id=acme.org.id, model_id=tasks.id, values={"status": "todo"})
        db.session.add(record)
        db.session.flush()
        record_event(member, "record.created", "record", record.id, {"model_id": tasks.id})
        db.session.flush()
        db.session.rollback()
    drain()
    assert runs_of(automation.id) == []
    assert count(Record, Record.model_id == model(acme, "followups").id) == 0
    assert count(Record, Record.values["title"].as_string() == "Undone") == 0


def test_a_test_run_through_the_dispatcher_is_kept_with_its_tool_call(acme):
    automation = make_automation(acme, FOLLOW_UP, enabled=False)
    owner = acme.principal("owner")
    with unit_of_work():
        run = dispatch(
            owner,
            "POST",
            f"{INTERNAL}/{automation.id}/test",
            json_body={"record_id": acme.public.id},
        )
    assert run.status == 201 and run.body["status"] == "succeeded"
    assert [r.id for r in runs_of(automation.id)] == [run.body["id"]]
    assert count(Record, Record.model_id == model(acme, "followups").id) == 1


def test_webhook_urls_show_whole_to_managers_only(acme, webhook, login):
    webhook.status = 500
    secret_url = webhook.url.rstrip("/") + "/T0123/B0456/s3cr3t-key"
    raw = graph(CREATED, ("hook", "send_webhook", {"url": secret_url}), edges=[("t", "hook")])
    automation = make_automation(acme, raw)
    run = services.run_test(acme.principal("owner"), automation.id, acme.public.id)
    assert "s3cr3t-key" in step(run, "hook")["error"]  # "<url> answered HTTP 500."
    pages = (
        f"/automations/{automation.id}",
        f"/automations/{automation.id}/runs/{run.id}",
    )
    json_urls = (f"{INTERNAL}/{automation.id}", f"{INTERNAL}/runs/{run.id}")
    admin, viewer = login("admin@acme.test"), login("viewer@acme.test")
    for url in pages:
        assert "s3cr3t-key" in admin.get(url).get_data(as_text=True), url
        shown = viewer.get(url).get_data(as_text=True)
        assert shown.count("s3cr3t") == 0, url
        assert "127.0.0.1" in shown  # where it goes stays visible
    for url in json_urls:
        assert "s3cr3t-key" in json.dumps(admin.api("GET", url).get_json()), url
        body = json.dumps(viewer.api("GET", url).get_json())
        assert "s3cr3t" not in body and "127.0.0.1" in body, url


def test_the_webhook_nodes_help_says_it_is_retried():
    said = REGISTRY["send_webhook"].description
    assert "tried again" in said and "anything but a 2xx" not in said
