"""Time zones: each reader's own (else their org's, else UTC) for every time shown and every
"today" meant (list filters, ``records_query``, the assistant's page context), the org's for
schedules; unknown zones refused naming the field, nothing changed.

"Now" is passed in (``ListParams.now``, ``run_query(now=)``, ``run_schedule(now)``) where a
test must fix it; where a page is read at the real instant, the two readers sit either side
of the date line (UTC+14 and UTC-11), whose dates always differ.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select, update

from monark.assistant.prompt import PageContext, context_sentence
from monark.automations import cron, schedules
from monark.chat.models import Message
from monark.core import zones
from monark.core.errors import ValidationFailed
from monark.core.models import Event, Org, User
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records.models import Record
from monark.records.queries import ListParams, count_records, list_records
from monark.records.sql import run_query
from monark.settings import time_zones
from tests import factories
from tests.llm_script import Say
from tests.test_automations import make_automation
from tests.test_chat_loop import send
from tests.test_schedules import at, runs, scheduled, since

EAST = "Pacific/Kiritimati"  # UTC+14 all year
WEST = "Pacific/Pago_Pago"  # UTC-11 all year
# Noon in London: already the 4th east of the date line, still the 3rd west of it.
NOON = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
BAD_ZONES = ["Mars/Base", "", "   ", "x" * 300, "UTC\x00", "utc", "Europe/Paris/Left Bank"]


def set_zone(user: User, name: str | None) -> None:
    db.session.execute(update(User).where(User.id == user.id).values(time_zone=name))
    db.session.commit()
    db.session.expire_all()


def set_org_zone(org: Org, name: str) -> None:
    db.session.execute(update(Org).where(Org.id == org.id).values(time_zone=name))
    db.session.commit()
    db.session.expire_all()


@pytest.fixture
def date_line(world):
    """The member east of the date line, the viewer west of it; one task due on the west's
    date at ``NOON``, one with no due date."""
    set_zone(world.a.users["member"], EAST)
    set_zone(world.a.users["viewer"], WEST)
    owner = world.a.principal("owner")
    factories.make_record(owner, world.a.model, "Due on the 3rd", due="2026-12-03")
    return world


def titles(principal: Principal, world, raw_filter: str, now: datetime | None = None) -> set:
    params = ListParams.parse(world.a.model, None, [raw_filter])
    if now is not None:
        params = ListParams(params.q, params.filters, params.sort, now=now)
    return {r.title for r in list_records(principal, world.a.model, params).items}


# ---- whose zone ------------------------------------------------------------------------


def test_a_reader_reads_in_their_own_zone_else_their_orgs_else_utc(world):
    member, viewer = world.a.principal("member"), world.a.principal("viewer")
    assert zones.reader_zone(member) == ZoneInfo("UTC")  # nobody chose one: UTC
    set_org_zone(world.a.org, "America/Los_Angeles")
    set_zone(world.a.users["member"], "Asia/Tokyo")
    assert zones.reader_zone(member) == ZoneInfo("Asia/Tokyo")
    assert zones.reader_zone(viewer) == ZoneInfo("America/Los_Angeles")
    # No person (an API key, an automation): the org's.
    key = Principal.for_api_key(1, world.a.org.id, "member")
    assert zones.reader_zone(key) == ZoneInfo("America/Los_Angeles")
    # The other org keeps its own.
    assert zones.reader_zone(world.b.principal("viewer")) == ZoneInfo("UTC")
    assert zones.local_today(member, NOON) == date(2026, 12, 3)
    assert zones.local_now(member, NOON).hour == 21


# ---- "today" in list filters ------------------------------------------------------------


def test_a_task_due_today_is_overdue_for_one_reader_and_not_the_other_across_the_date_line(
    date_line,
):
    east, west = date_line.a.principal("member"), date_line.a.principal("viewer")
    overdue = "due:lt:today"
    assert titles(east, date_line, overdue, NOON) == {"Due on the 3rd"}
    assert titles(west, date_line, overdue, NOON) == set()
    assert titles(west, date_line, "due:today", NOON) == {"Due on the 3rd"}
    assert titles(east, date_line, "due:today", NOON) == set()
    # The count and a list read from the index alone agree.
    params = ListParams.parse(date_line.a.model, None, [overdue])
    fixed = ListParams(params.q, params.filters, params.sort, now=NOON)
    assert count_records(east, date_line.a.model, fixed) == 1
    assert count_records(west, date_line.a.model, fixed) == 0
    # A day later it is the 4th west of the line too: overdue for both.
    later = NOON + timedelta(days=1)
    assert titles(west, date_line, overdue, later) == {"Due on the 3rd"}


def test_the_records_page_filters_today_by_the_signed_in_readers_date(world, login):
    set_zone(world.a.users["member"], EAST)
    set_zone(world.a.users["viewer"], WEST)
    east, west = login("member@acme.test"), login("viewer@acme.test")
    for _ in range(3):  # the west's date may turn between reading it and the page: again
        west_today = zones.local_today(world.a.principal("viewer"))
        record = factories.make_record(
            world.a.principal("owner"), world.a.model, "Due today out west", due=str(west_today)
        )
        shown_east = east.get("/models/tasks/records?filter=due:lt:today").get_data(as_text=True)
        shown_west = west.get("/models/tasks/records?filter=due:lt:today").get_data(as_text=True)
        if zones.local_today(world.a.principal("viewer")) == west_today:
            break
        db.session.delete(db.session.get(Record, record.id))
        db.session.commit()
    assert "Due today out west" in shown_east  # the east's today is a day or two later
    assert "Due today out west" not in shown_west


# ---- timestamps shown ---------------------------------------------------------------------


def test_timestamps_are_shown_in_the_readers_zone_with_its_abbreviation(world, login):
    stamp = datetime(2026, 1, 5, 0, 30, tzinfo=UTC)
    db.session.execute(
        update(Record)
        .where(Record.id == world.a.public.id)
        .values(created_at=stamp, updated_at=stamp)
    )
    db.session.commit()
    set_zone(world.a.users["member"], "Asia/Tokyo")
    set_org_zone(world.a.org, "America/Los_Angeles")
    url = f"/models/tasks/records/{world.a.public.id}"

    def created(email: str) -> str:
        page = BeautifulSoup(login(email).get(url).get_data(as_text=True), "html.parser")
        [dd] = [dt.find_next("dd") for dt in page.select("dt") if dt.get_text() == "Created"]
        return dd.get_text()

    assert "2026-01-05 09:30 JST" in created("member@acme.test")
    assert "2026-01-04 16:30 PST" in created("viewer@acme.test")  # no zone: the org's
    set_org_zone(world.a.org, EAST)
    assert "2026-01-05 14:30 UTC+14" in created("viewer@acme.test")  # only an offset
    set_org_zone(world.a.org, "UTC")
    assert "2026-01-05 00:30 UTC" in created("viewer@acme.test")


def test_the_profile_says_which_zone_times_are_in(world, login):
    set_org_zone(world.a.org, "Europe/Paris")
    page = BeautifulSoup(
        login("member@acme.test").get("/profile").get_data(as_text=True), "html.parser"
    )
    section = page.select_one("#time-zone")
    assert "your organization's, Europe/Paris (CE" in section.get_text()
    field = section.select_one("input[name=time_zone]")
    assert field["value"] == "" and field["list"] == "time_zone-names"
    options = {o["value"] for o in section.select("datalist option")}
    assert {"Asia/Tokyo", "UTC", EAST} <= options and "Mars/Base" not in options


# ---- records_query ------------------------------------------------------------------------


def test_records_querys_today_is_the_callers_date(date_line):
    east, west = date_line.a.principal("member"), date_line.a.principal("viewer")
    sql = "SELECT date('now'), today(), date(), date('now', '+1 day')"
    assert run_query(east, sql, now=NOON).rows == [
        ["2026-12-04", "2026-12-04", "2026-12-04", "2026-12-05"]
    ]
    assert run_query(west, sql, now=NOON).rows[0] == [
        "2026-12-03",
        "2026-12-03",
        "2026-12-03",
        "2026-12-04",
    ]
    # Other dates are SQLite's own, modifiers and all.
    assert run_query(west, "SELECT date('2026-02-03', 'start of month')", now=NOON).rows == [
        ["2026-02-01"]
    ]
    overdue = "SELECT count(*) FROM tasks WHERE due < date('now')"
    assert run_query(east, overdue, now=NOON).rows == [[1]]
    assert run_query(west, overdue, now=NOON).rows == [[0]]


# ---- the assistant's page context ----------------------------------------------------------


def test_the_page_context_says_the_users_local_date_time_and_zone():
    now = NOON.astimezone(ZoneInfo("Asia/Tokyo"))
    sentence = context_sentence(PageContext(route="/models"), now)
    assert sentence.startswith(
        "Page context: today is 2026-12-03 (Thursday), 21:00 JST on the user's clock, "
        "time zone Asia/Tokyo."
    )
    assert "/models" in sentence
    east = NOON.astimezone(ZoneInfo(EAST))
    assert "today is 2026-12-04 (Friday), 02:00 UTC+14" in context_sentence(None, east)


def test_a_sent_message_carries_the_senders_local_date(world, scripted):
    set_zone(world.a.users["member"], EAST)
    member = world.a.principal("member")
    scripted.script.add([Say("Hi.")])
    before = zones.local_today(member)
    result = send(member, "What is due today?", route="/models")
    after = zones.local_today(member)
    message = db.session.scalars(
        select(Message)
        .where(Message.conversation_id == result.conversation_id, Message.role == "user")
        .order_by(Message.id)
    ).first()
    note = message.content[0]["text"]
    assert f"time zone {EAST}" in note
    assert any(f"today is {d.isoformat()}" in note for d in {before, after})
    assert "UTC+14" in scripted.requests[0].messages[0].content[0].text


# ---- schedules ---------------------------------------------------------------------------


def test_a_schedule_runs_at_nine_on_the_orgs_clock_not_its_owners(world):
    set_org_zone(world.a.org, "Asia/Tokyo")
    set_zone(world.a.users["owner"], "America/New_York")  # the owner's zone is not used
    automation = make_automation(world.a, scheduled("0 9 * * *"))
    assert schedules.described(automation) == "every day at 09:00 (Asia/Tokyo)"
    automation = since(automation, at("2026-01-04 12:00"))
    # 09:00 UTC is 18:00 in Tokyo: that day's slot went by at 00:00 UTC, and is not late.
    assert schedules.run_schedule(automation, at("2026-01-04 14:00")) is None
    assert runs(automation.id) == []
    run_id = schedules.run_schedule(automation, at("2026-01-05 00:10"))  # 09:10 in Tokyo
    [run] = runs(automation.id)
    assert run.id == run_id and run.slot_at.replace(tzinfo=UTC) == at("2026-01-05 00:00")
    assert schedules.run_schedule(automation, at("2026-01-05 09:00")) is None
    assert cron.org_zone(world.b.org.id) == ZoneInfo("UTC")


# ---- choosing a zone -----------------------------------------------------------------------


def test_a_member_sets_their_zone_on_the_profile(world, login):
    browser = login("member@acme.test")
    answer = browser.post("/profile/time-zone", {"time_zone": " Asia/Tokyo "})
    assert answer.status_code == 303
    db.session.expire_all()
    assert db.session.get(User, world.a.users["member"].id).time_zone == "Asia/Tokyo"
    page = browser.get("/profile").get_data(as_text=True)
    assert "Time zone saved: times are shown in Asia/Tokyo (JST)." in page
    event = db.session.scalars(select(Event).order_by(Event.id.desc())).first()
    assert (event.type, event.payload) == ("user.updated", {"fields": ["time_zone"]})


@pytest.mark.parametrize("bad", BAD_ZONES)
def test_an_unknown_zone_is_refused_on_the_profile_naming_the_field(world, login, bad):
    set_zone(world.a.users["member"], "Europe/Paris")
    answer = login("member@acme.test").post("/profile/time-zone", {"time_zone": bad})
    assert answer.status_code == 422
    page = BeautifulSoup(answer.get_data(as_text=True), "html.parser")
    field = page.select_one("#time-zone input[name=time_zone]")
    assert field["aria-invalid"] == "true"
    error = page.select_one("#time_zone-error").get_text()
    assert "time zone" in error.lower()
    assert len(error) < 300  # a long value is not repeated back
    db.session.expire_all()
    assert db.session.get(User, world.a.users["member"].id).time_zone == "Europe/Paris"


@pytest.mark.parametrize("bad", BAD_ZONES)
def test_an_unknown_zone_is_refused_for_the_org_naming_the_field(world, login, bad):
    answer = login("admin@acme.test").post("/settings/time-zone", {"time_zone": bad})
    assert answer.status_code == 422
    page = BeautifulSoup(answer.get_data(as_text=True), "html.parser")
    assert "time zone" in page.select_one("#org_time_zone-error").get_text().lower()
    db.session.expire_all()
    assert db.session.get(Org, world.a.org.id).time_zone == "UTC"


@pytest.mark.parametrize("bad", BAD_ZONES)
def test_the_services_refuse_an_unknown_zone_naming_time_zone(world, bad):
    for change in (
        time_zones.set_user_zone,
        time_zones.set_org_zone,
        time_zones.adopt_browser_zone,
    ):
        with pytest.raises(ValidationFailed) as refused:
            change(world.a.principal("owner"), bad)
        assert refused.value.field_errors().keys() == {"time_zone"}
    db.session.expire_all()
    assert db.session.get(User, world.a.users["owner"].id).time_zone is None
    assert db.session.get(Org, world.a.org.id).time_zone == "UTC"


def test_an_admin_sets_the_orgs_zone_and_a_member_may_not(world, login):
    assert (
        login("member@acme.test")
        .post("/settings/time-zone", {"time_zone": "Asia/Tokyo"})
        .status_code
        == 403
    )
    answer = login("admin@acme.test").post("/settings/time-zone", {"time_zone": "Asia/Tokyo"})
    assert answer.status_code == 303
    db.session.expire_all()
    assert db.session.get(Org, world.a.org.id).time_zone == "Asia/Tokyo"
    assert db.session.get(Org, world.b.org.id).time_zone == "UTC"
    page = BeautifulSoup(
        login("admin@acme.test").get("/settings").get_data(as_text=True), "html.parser"
    )
    assert page.select_one("#org_time_zone")["value"] == "Asia/Tokyo"


def test_the_browsers_zone_is_kept_at_first_sign_in_only(world, login):
    browser = login("member@acme.test")
    page = BeautifulSoup(browser.get("/profile").get_data(as_text=True), "html.parser")
    url = page.body["data-time-zone-url"]
    assert page.select_one("script[src*='js/timezone.js']") is not None
    assert browser.post(url, {"time_zone": "Asia/Tokyo"}).get_json() == {"kept": True}
    # Once chosen (by the browser or on the profile), it is not replaced, nor asked again.
    assert browser.post(url, {"time_zone": "Europe/Paris"}).get_json() == {"kept": False}
    db.session.expire_all()
    assert db.session.get(User, world.a.users["member"].id).time_zone == "Asia/Tokyo"
    page = BeautifulSoup(browser.get("/profile").get_data(as_text=True), "html.parser")
    assert not page.body.has_attr("data-time-zone-url")
    refused = browser.post(url, {"time_zone": "Mars/Base"})
    assert refused.status_code in (400, 422)
