"""Automations and private records: a value read from a private record never becomes
readable by someone who could not read that record, whatever action a graph uses.

The scenario the rule was written for: a member saves a private task as done, and the demo
automation "Review finished tasks" copies its title into a task the whole org reads.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from monark.audit.services import readable_event
from monark.automations import services
from monark.automations.models import AutomationRun
from monark.automations.privacy import WITHHELD_WEBHOOK
from monark.cli import REVIEW_GRAPH
from monark.core.models import Event
from monark.extensions import db
from monark.records import queries
from monark.records import services as records
from monark.records.models import Record
from tests import factories
from tests.jobs import drain
from tests.test_automations import graph, make_automation, model, runs_of, step

UPDATED = ("t", "record.updated", {"model": "tasks", "fields": ["status"]})
COPIED = {"notes": "{{record.title}}"}


@pytest.fixture
def acme(world: factories.World) -> factories.OrgWorld:
    """Acme, with a ``followups`` model next to its ``tasks``."""
    owner = world.a.principal("owner")
    followups = records.create_model(owner, "followups", "Follow-ups")
    records.add_field(owner, followups, key="title", label="Title", type="text", required=True)
    return world.a


def finish_private_task(acme: factories.OrgWorld, title: str = "Fire Dana quietly") -> Record:
    """The member's private task, saved as done (which triggers the review automation)."""
    member = acme.principal("member")
    task = factories.make_record(member, acme.model, title, visibility="private", status="todo")
    records.update_record(member, acme.model, task.id, {"status": "done"})
    drain()  # the automations it triggers run on the queue
    return task


def tasks_titled(prefix: str) -> list[Record]:
    db.session.expire_all()
    return list(db.session.scalars(select(Record).where(Record.title.startswith(prefix))))


def viewer_reads(client, acme: factories.OrgWorld, secret: str) -> list[str]:
    """Everything about ``secret`` the viewer's key reads: list, search and query."""
    headers = {"Authorization": f"Bearer {acme.keys['viewer']}"}
    listed = client.get("/api/v1/models/tasks/records?limit=100", headers=headers).get_json()
    found = [r["values"]["title"] for r in listed["items"] if secret in r["values"]["title"]]
    sql = f"select title from tasks where title like '%{secret}%'"
    queried = client.get("/api/v1/query", query_string={"sql": sql}, headers=headers).get_json()
    return found + [row[0] for row in queried["rows"]]


# ---- the default: a private record's events run nothing ----------------------------------


def test_the_demo_review_automation_does_not_copy_a_private_task_for_the_org(acme, app):
    review = make_automation(acme, REVIEW_GRAPH, name="Review finished tasks")
    finish_private_task(acme)
    assert tasks_titled("Review:") == []
    assert runs_of(review.id) == []  # not even a stored run names the private record
    assert viewer_reads(app.test_client(), acme, "Dana") == []


def test_an_org_task_still_triggers_the_review_as_before(acme):
    review = make_automation(acme, REVIEW_GRAPH, name="Review finished tasks")
    records.update_record(acme.principal("member"), acme.model, acme.public.id, {"status": "done"})
    drain()
    [made] = tasks_titled("Review:")
    assert made.visibility == "org"
    assert [r.status for r in runs_of(review.id)] == ["succeeded"]


def test_a_test_run_on_a_private_record_is_refused_unless_opted_in(acme):
    automation = make_automation(acme, REVIEW_GRAPH, enabled=False)
    owner = acme.principal("owner")
    with pytest.raises(services.ValidationFailed) as refused:
        services.run_test(owner, automation.id, acme.private.id)
    assert refused.value.details[0]["field"] == "record_id"
    assert tasks_titled("Review:") == []
    newest = services.run_test(owner, automation.id)  # the newest record the org reads
    assert newest.record_id == acme.public.id and not newest.record_private


# ---- opted in: what it writes is private to the same people ------------------------------


def test_opted_in_a_created_record_is_private_to_the_same_people(acme, app):
    make_automation(acme, REVIEW_GRAPH, name="Review", private_records="keep")
    task = finish_private_task(acme)
    [made] = tasks_titled("Review:")
    assert made.title == "Review: Fire Dana quietly"
    assert (made.visibility, made.creator_id) == ("private", task.creator_id)
    assert viewer_reads(app.test_client(), acme, "Dana") == []
    member = acme.principal("member")  # the task's creator reads both
    assert records.get_record(member, acme.model, made.id).id == made.id
    other = factories.make_user("other@acme.test")
    factories.add_member(other, acme.org, "member")
    with pytest.raises(records.NotFound):
        records.get_record(factories.principal(other, acme.org, "member"), acme.model, made.id)


def test_opted_in_a_run_does_not_write_into_a_record_others_read(acme):
    public_id = acme.public.id
    leak = graph(
        UPDATED,
        ("copy", "update_record", {"record_id": str(public_id), "values": COPIED}),
        ("own", "update_record", {"values": {"notes": "seen"}}),
        edges=[("t", "copy"), ("t", "own")],
    )  # fmt: skip
    automation = make_automation(acme, leak, private_records="keep")
    task = finish_private_task(acme)
    [run] = runs_of(automation.id)
    assert step(run, "copy")["status"] == "failed"
    assert "may be read by people who may not read the private record" in step(run, "copy")["error"]
    assert step(run, "own")["status"] == "succeeded"  # its own record: the same readers
    db.session.expire_all()
    assert "notes" not in db.session.get(Record, public_id).values
    assert db.session.get(Record, task.id).values["notes"] == "seen"


def test_opted_in_a_run_cannot_make_a_record_visible_to_the_org(acme):
    publish = graph(
        UPDATED,
        ("publish", "update_record", {"values": {"title": "{{record.title}} (shared)"}}),
        edges=[("t", "publish")],
    )
    automation = make_automation(acme, publish, private_records="keep")
    task = finish_private_task(acme)
    [run] = runs_of(automation.id)
    assert step(run, "publish")["status"] == "succeeded"
    db.session.expire_all()
    assert db.session.get(Record, task.id).visibility == "private"


def test_opted_in_webhooks_send_nothing_of_a_private_record_unless_allowed(acme, webhook):
    hooked = graph(
        UPDATED,
        ("hook", "send_webhook", {"url": webhook.url}),
        ("after", "add_audit_note", {"note": "sent {{nodes.hook.status_code}}"}),
        edges=[("t", "hook"), ("hook", "after")],
    )
    automation = make_automation(acme, hooked, private_records="keep")
    finish_private_task(acme)
    assert webhook.received == []
    [run] = runs_of(automation.id)
    assert run.status == "succeeded"
    assert (step(run, "hook")["status"], step(run, "hook")["reason"]) == (
        "skipped",
        WITHHELD_WEBHOOK,
    )
    assert "not run for this private record" in step(run, "after")["reason"]
    services.set_private_records(acme.principal("owner"), automation.id, "send")
    finish_private_task(acme, "Second secret")
    [sent] = webhook.received
    assert sent["json"]["record"]["title"] == "Second secret"


def test_org_records_still_reach_webhooks(acme, webhook):
    hooked = graph(UPDATED, ("hook", "send_webhook", {"url": webhook.url}), edges=[("t", "hook")])
    make_automation(acme, hooked)
    records.update_record(acme.principal("owner"), acme.model, acme.public.id, {"status": "done"})
    drain()
    [sent] = webhook.received
    assert sent["json"]["record"]["title"] == acme.public.title


def test_opted_in_audit_notes_are_marked_for_the_records_readers(acme):
    note = ("note", "add_audit_note", {"note": "Task {{record.id}} is done."})
    noted = graph(UPDATED, note, edges=[("t", "note")])
    make_automation(acme, noted, private_records="keep")
    task = finish_private_task(acme)
    note = db.session.scalars(select(Event).where(Event.type == "automation.note")).one()
    assert note.payload["private_to"] == task.creator_id
    assert readable_event(acme.principal("owner"), note)  # admins read private records
    assert readable_event(acme.principal("member"), note)  # the task's creator
    other = factories.make_user("other@acme.test")
    factories.add_member(other, acme.org, "member")
    assert not readable_event(factories.principal(other, acme.org, "member"), note)


def test_a_record_a_private_run_created_triggers_others_as_private(acme):
    make_automation(acme, REVIEW_GRAPH, name="Review", private_records="keep")
    follow = graph(
        ("t", "record.created", {"model": "tasks"}),
        ("copy", "create_record", {"model": "followups", "values": {"title": "{{record.title}}"}}),
        edges=[("t", "copy")],
    )
    downstream = make_automation(acme, follow, name="Copy every new task")
    finish_private_task(acme)
    assert runs_of(downstream.id) == []  # the review it made is private: not opted in
    copied = db.session.scalars(
        select(Record).where(Record.model_id == model(acme, "followups").id)
    )
    assert list(copied) == []


def test_every_action_type_is_covered_by_the_rule(acme, webhook):
    """One graph with every action, opted in: nothing lands where the viewer reads it."""
    every = graph(
        UPDATED,
        ("c", "field_matches", {"field": "status", "value": "done"}),
        ("make", "create_record", {"model": "followups", "values": {"title": "{{record.title}}"}}),
        ("fix", "update_record", {"record_id": str(acme.public.id), "values": COPIED}),
        ("hook", "send_webhook", {"url": webhook.url}),
        ("note", "add_audit_note", {"note": "Task {{record.id}}"}),
        edges=[("t", "c"), ("c", "make"), ("c", "fix"), ("c", "hook"), ("c", "note")],
    )  # fmt: skip
    automation = make_automation(acme, every, private_records="keep")
    finish_private_task(acme, "Topsecret")
    [run] = runs_of(automation.id)
    statuses = {s["node_id"]: s["status"] for s in run.steps}
    assert statuses == {
        "t": "succeeded",
        "c": "succeeded",
        "make": "succeeded",
        "fix": "failed",
        "hook": "skipped",
        "note": "succeeded",
    }
    viewer = acme.principal("viewer")
    followups = model(acme, "followups")
    db.session.expire_all()
    seen: list[Any] = [r.values for r in queries.list_records(viewer, followups, limit=100).items]
    seen += [r.values for r in queries.list_records(viewer, acme.model, limit=100).items]
    assert "Topsecret" not in repr(seen)
    assert webhook.received == []
    assert isinstance(run, AutomationRun) and run.record_private


def test_a_record_made_private_before_its_run_is_treated_as_private(acme):
    """The event saw an org record; the run comes after it was made private: the stricter
    of the two counts."""
    from monark.automations.engine import Trigger, run_triggered

    review = make_automation(acme, REVIEW_GRAPH, name="Review")
    owner = acme.principal("owner")
    task = factories.make_record(owner, acme.model, "Soon secret", status="done")
    records.update_record(owner, acme.model, task.id, {}, visibility="private")
    drain()
    trigger = Trigger(
        type="record.updated",
        org_id=acme.org.id,
        model_key=None,
        record_id=task.id,
        values={"title": "Soon secret", "status": "done"},
        model_id=acme.model.id,
        fields=("status",),
    )
    assert run_triggered(trigger) == []
    assert runs_of(review.id) == [] and tasks_titled("Review:") == []
