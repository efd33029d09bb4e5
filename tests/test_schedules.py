"""Schedule triggers: cron checked with its reason, shown in words, each slot run once
(two real Huey consumers racing), and the missed-slot rule both ways."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from bs4 import BeautifulSoup
from flask import Flask
from sqlalchemy import select, update

from monark.api.dispatch import dispatch
from monark.automations import cron, schedules, services
from monark.automations.models import Automation, AutomationRun
from monark.core import jobs
from monark.core.models import Membership, utcnow
from monark.extensions import db
from monark.records.models import Record
from tests.test_automations import graph, make_automation, problems
from tests.test_jobs import wait_for


def scheduled(expression: str, *then: tuple[str, str, dict]) -> dict:
    """A graph: the schedule, then each node after it (default: one audit note)."""
    nodes = then or (("note", "add_audit_note", {"note": "slot {{trigger.slot}}"}),)
    return graph(
        ("t", "schedule", {"cron": expression}),
        *nodes,
        edges=[("t", node[0]) for node in nodes],
    )


def since(automation: Automation, when: datetime) -> Automation:
    """The automation as if switched on (last changed) at ``when``."""
    db.session.execute(
        update(Automation).where(Automation.id == automation.id).values(updated_at=when)
    )
    db.session.commit()
    db.session.expire_all()
    return db.session.get(Automation, automation.id)


def runs(automation_id: int) -> list[AutomationRun]:
    db.session.rollback()
    return list(
        db.session.scalars(
            select(AutomationRun)
            .where(AutomationRun.automation_id == automation_id)
            .order_by(AutomationRun.id)
        )
    )


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# ---- the expression --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4 *", "never fires"),
        ("* * * * * *", "at most once a minute"),
        ("*/5 * * * * *", "the sixth is seconds"),
        ("0 9 * *", "give five"),
        ("61 * * * *", "out of range"),
        ("@reboot", "Unknown shorthand"),
        ("", "Give a cron expression"),
    ],
)
def test_a_cron_that_cannot_be_used_is_refused_with_its_reason_on_its_field(
    world, expression, says
):
    found = problems(world.a, scheduled(expression))
    assert list(found) == ["nodes[t].config.cron"]
    assert says in found["nodes[t].config.cron"]


def test_the_editor_shows_the_refusal_beside_the_graph_and_saves_nothing(world, login):
    client = login("owner@acme.test")
    page = client.get("/automations/new").get_data(as_text=True)
    token = page.split('name="csrf_token" value="')[1].split('"')[0]
    answer = client.post(
        "/automations/new",
        data={"csrf_token": token, "name": "Leap", "graph": json.dumps(scheduled("0 0 30 2 *"))},
    )
    assert answer.status_code == 422
    html = BeautifulSoup(answer.get_data(as_text=True), "html.parser")
    [item] = html.select("#graph-problems li")
    assert "nodes[t].config.cron" in item.get_text() and "never fires" in item.get_text()
    assert html.select_one("#automation-graph")["aria-describedby"] == "graph-problems"
    assert db.session.scalar(select(Automation.id)) is None


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("0 9 * * 1-5", "weekdays at 09:00 (UTC)"),
        ("0 9 * * mon-fri", "weekdays at 09:00 (UTC)"),
        ("30 7 * * *", "every day at 07:30 (UTC)"),
        ("*/15 * * * *", "every 15 minutes (UTC)"),
        ("0 * * * *", "every hour (UTC)"),
        ("0 18 * * 1,4", "Mondays and Thursdays at 18:00 (UTC)"),
        ("0 8 1 * *", "on day 1 of every month at 08:00 (UTC)"),
        ("0 12 * * 5#2", "at 12:00, on the second Friday of the month (UTC)"),
    ],
)
def test_a_schedule_reads_in_words(expression, words):
    assert cron.describe(cron.check(expression), cron.org_zone(1)) == words


def test_the_automation_page_and_list_say_when_it_runs(world, login):
    automation = make_automation(world.a, scheduled("0 9 * * 1-5"), name="Morning")
    client = login("member@acme.test")
    page = BeautifulSoup(
        client.get(f"/automations/{automation.id}").get_data(as_text=True), "html.parser"
    )
    assert "weekdays at 09:00 (UTC)" in page.select_one("#schedule").get_text()
    listing = client.get("/automations").get_data(as_text=True)
    assert "weekdays at 09:00 (UTC)" in listing


def test_the_assistants_tools_know_the_schedule_trigger(world):
    member = world.a.principal("member")
    types = dispatch(member, "GET", "/internal/automations/node-types").body
    events = dispatch(member, "GET", "/internal/automations/trigger-events").body
    [node] = [t for t in types["node_types"] if t["type"] == "schedule"]
    assert node["kind"] == "trigger" and "cron" in node["config_schema"]["properties"]
    assert "schedule" in [t["type"] for t in events["trigger_events"]]
    assert "trigger.type|model|event_id|slot" in types["placeholders"]


# ---- slots -----------------------------------------------------------------------------


def test_a_slot_on_time_runs_once_and_again_nothing(world):
    automation = make_automation(world.a, scheduled("0 9 * * *"))
    automation = since(automation, at("2026-01-05 08:00"))
    now = at("2026-01-05 09:30")  # half an hour late, a day's period: on time
    run_id = schedules.run_schedule(automation, now)
    [run] = runs(automation.id)
    assert (run.id, run.status, run.trigger_type) == (run_id, "succeeded", "schedule")
    assert run.slot_at.replace(tzinfo=UTC) == at("2026-01-05 09:00")
    assert run.steps[0]["output"] == {"slot": "2026-01-05T09:00:00+00:00"}
    assert run.steps[1]["input"] == {"note": "slot 2026-01-05T09:00:00+00:00"}
    # A restart, a second worker, the next minute's check: the slot is claimed.
    assert schedules.run_schedule(automation, now) is None
    assert schedules.run_schedule(automation, now + timedelta(hours=5)) is None
    assert len(runs(automation.id)) == 1


def test_slots_missed_by_more_than_a_period_are_recorded_skipped_the_newest_runs(world, login):
    automation = make_automation(world.a, scheduled("0 * * * *"))
    automation = since(automation, at("2026-01-05 06:30"))
    # No worker from 06:30 to 09:20: 07:00 and 08:00 are more than an hour (one period)
    # late; 09:00 is 20 minutes late, less than one period.
    schedules.run_schedule(automation, at("2026-01-05 09:20"))
    skipped, ran = runs(automation.id)
    assert (skipped.status, skipped.slot_at.replace(tzinfo=UTC)) == (
        "skipped",
        at("2026-01-05 08:00"),
    )
    assert "2026-01-05 07:00 UTC to 2026-01-05 08:00 UTC" in skipped.error
    assert "less than one period (1 hour) late" in skipped.error
    assert (ran.status, ran.slot_at.replace(tzinfo=UTC)) == ("succeeded", at("2026-01-05 09:00"))
    listing = login("member@acme.test").get(f"/automations/{automation.id}/runs")
    rows = BeautifulSoup(listing.get_data(as_text=True), "html.parser").select("tbody tr")
    assert "skipped" in rows[1].get_text() and "missed while no worker" in rows[1].get_text()


def test_slots_before_the_automation_was_switched_on_never_run(world):
    automation = make_automation(world.a, scheduled("*/10 * * * *"))
    automation = since(automation, at("2026-01-05 09:05"))
    assert schedules.run_schedule(automation, at("2026-01-05 09:09")) is None
    assert runs(automation.id) == []
    schedules.run_schedule(automation, at("2026-01-05 09:10"))
    [run] = runs(automation.id)
    assert run.slot_at.replace(tzinfo=UTC) == at("2026-01-05 09:10")


def test_a_disabled_schedule_does_not_run(world, app):
    automation = make_automation(world.a, scheduled("* * * * *"), enabled=False)
    since(automation, utcnow() - timedelta(minutes=5))
    with app.app_context():
        assert schedules.run_due.func() == 0
    assert runs(automation.id) == []


def test_a_schedules_writes_run_the_automations_they_trigger_in_its_chain(world):
    make = ("make", "create_record", {"model": "tasks", "values": {"title": "Daily"}})
    automation = make_automation(world.a, scheduled("0 9 * * *", make), name="Daily")
    noted = make_automation(
        world.a,
        graph(
            ("t", "record.created", {"model": "tasks"}),
            ("note", "add_audit_note", {"note": "saw {{record.id}}"}),
            edges=[("t", "note")],
        ),
        name="Noted",
    )
    automation = since(automation, at("2026-01-05 08:00"))
    schedules.run_schedule(automation, at("2026-01-05 09:00:05"))
    [run] = runs(automation.id)
    assert run.status == "succeeded"
    [task] = db.session.scalars(select(Record).where(Record.values["title"].as_string() == "Daily"))
    [note] = runs(noted.id)
    assert (note.status, note.record_id, note.depth) == ("succeeded", task.id, 2)


def test_a_schedule_whose_owner_lapsed_is_switched_off_not_run(world):
    admin = world.a.principal("admin")
    automation = services.create_automation(admin, "Owned", scheduled("0 9 * * *"), True)
    db.session.execute(
        update(Membership)
        .where(Membership.user_id == world.a.users["admin"].id)
        .values(role="member")
    )
    db.session.commit()
    automation = since(automation, at("2026-01-05 08:00"))
    assert schedules.run_schedule(automation, at("2026-01-05 09:01")) is None
    assert runs(automation.id) == []
    db.session.expire_all()
    assert not db.session.get(Automation, automation.id).enabled


# ---- two consumers ---------------------------------------------------------------------


@pytest.fixture
def two_consumers(app: Flask) -> Iterator[jobs.Queue]:
    """Two real Huey consumers (two threads each) on one queue file, as two worker
    processes would be; stopped after the test."""
    first = jobs.start_in_process(app, workers=2)
    own = jobs.build_queue(app, replace(jobs.queue(app).settings))
    second = jobs.InProcessConsumer(own.huey, workers=2, worker_type="thread", max_delay=0.1)
    second.start()
    yield own
    second.stop(graceful=True)
    first.stop(graceful=True)
    jobs.queue(app).consumer = None


def test_each_slot_runs_once_with_two_consumers_checking_at_once(world, app, two_consumers):
    # Daily: the slot due now stays the newest for the whole test.
    automation = make_automation(world.a, scheduled("0 0 * * *"))
    latest = cron.latest_slot("0 0 * * *", utcnow(), cron.org_zone(world.a.org.id))
    since(automation, latest - timedelta(seconds=1))
    for _ in range(8):  # what every consumer's scheduler queues each minute, many times
        jobs.queue(app).tasks["automations.schedules"]()
    # And two workers that check in this very instant, past the queue.
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def check() -> None:
        try:
            start.wait()
            with app.app_context():
                schedules.run_due.func()
        except BaseException as err:  # the test reads it below
            failures.append(err)

    racers = [threading.Thread(target=check) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert failures == []
    # A consumer may have taken the last job and still be running it: wait for it to end.
    wait_for(
        lambda: (
            jobs.queue(app).huey.pending_count() == 0
            and all(r.status != "running" for r in runs(automation.id))
        )
    )
    [run] = runs(automation.id)
    assert (run.status, run.slot_at.replace(tzinfo=UTC)) == ("succeeded", latest)
