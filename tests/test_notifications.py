"""Notifications: each kind made in its change's transaction, the bell and the list, mail
at once / in the digest / never, and nothing said that its reader may not read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.approvals import handover
from monark.automations.models import AutomationRun
from monark.chat.runtime import tool_executor
from monark.core import jobs
from monark.core.errors import NotFound, ValidationFailed
from monark.core.models import User, utcnow
from monark.core.settings import settings
from monark.extensions import db
from monark.notifications import delivery, services
from monark.notifications.kinds import DEFAULTS, Delivery, Kind
from monark.notifications.models import Notification, NotificationPreference
from monark.records import services as records
from monark.settings import budgets
from monark.settings.models import UsageDay
from tests import factories
from tests.jobs import drain
from tests.llm_script import Call
from tests.test_automations import graph, make_automation, runs_of
from tests.test_chat_loop import calls_of, send
from tests.test_handover import decide, hand, propose
from tests.test_members import invite_link


def notes(user_id: int, kind: Kind | None = None) -> list[Notification]:
    db.session.expire_all()
    stmt = select(Notification).where(Notification.user_id == user_id)
    if kind is not None:
        stmt = stmt.where(Notification.kind == kind)
    return list(db.session.scalars(stmt.order_by(Notification.id)))


def titles(browser) -> list[str]:
    page = BeautifulSoup(browser.get("/notifications").get_data(as_text=True), "html.parser")
    return [b.get_text(" ", strip=True) for b in page.select(".notification-title")]


def bell_count(browser) -> str | None:
    bell = BeautifulSoup(browser.get("/notifications/bell").get_data(as_text=True), "html.parser")
    badge = bell.select_one(".notifications-badge")
    return badge.get_text() if badge else None


def prefer(user_id: int, kind: Kind, how: Delivery) -> None:
    db.session.add(NotificationPreference(user_id=user_id, kind=kind, delivery=how))
    db.session.commit()


def second_member(world) -> factories.User:
    """Another plain member of Acme: reads shared records, not the member's private one."""
    user = factories.make_user("mia@acme.test", "Mia Member")
    factories.add_member(user, world.a.org, "member")
    db.session.commit()
    return user


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# ---- each kind ---------------------------------------------------------------------------------


def test_a_write_handed_to_you_shows_under_the_bell(world, scripted, login):
    call = propose(world, scripted, "Order chairs")
    owner = login("owner@acme.test")
    assert bell_count(owner) is None
    assert hand(login("member@acme.test"), call.id, world.a.users["owner"].id).status_code == 200
    (note,) = notes(world.a.users["owner"].id)
    assert note.kind == Kind.HANDED_TO_YOU and note.subject_id == call.id
    assert note.org_id == world.a.org.id and note.actor_id == world.a.users["member"].id
    assert bell_count(owner) == "1"
    header = BeautifulSoup(owner.get("/models").get_data(as_text=True), "html.parser")
    link = header.select_one("#notifications-bell a")
    assert link["aria-label"] == "Notifications, 1 unread"
    assert titles(owner) == ["Acme Member asks you to approve: create a record in Tasks"]
    # Nobody else hears of it; the stored row holds ids, never the card's text.
    assert notes(world.a.users["admin"].id) == [] and notes(world.a.users["member"].id) == []
    assert "Order chairs" not in str(note.data)


def test_a_refused_hand_over_leaves_no_notification(world, scripted, login):
    call = propose(world, scripted)
    assert hand(login("member@acme.test"), call.id, world.a.users["viewer"].id).status_code == 422
    assert db.session.scalar(select(func.count()).select_from(Notification)) == 0


def test_a_change_that_rolls_back_leaves_no_notification_and_no_mail(world, app):
    services.notify(world.a.org.id, [world.a.users["owner"].id], Kind.HANDED_TO_YOU, "x", 1)
    db.session.flush()
    db.session.rollback()
    assert db.session.scalar(select(func.count()).select_from(Notification)) == 0
    assert drain() == 0  # no mail job was queued


def test_your_handed_over_request_decided(world, scripted, login):
    call = propose(world, scripted)
    member_id = world.a.users["member"].id
    hand(login("member@acme.test"), call.id, world.a.users["owner"].id)
    owner = login("owner@acme.test")
    assert decide(owner, call.id, "reject", "not now").status_code in (200, 303)
    (note,) = notes(member_id, Kind.REQUEST_DECIDED)
    assert note.actor_id == world.a.users["owner"].id and note.data == {"confirmed": False}
    assert titles(login("member@acme.test")) == [
        "Acme Owner rejected your request: create a record in Tasks"
    ]
    # Decided once: a second decision loses, and tells nobody anything more.
    decide(owner, call.id, "confirm")  # refused: already decided
    assert len(notes(member_id, Kind.REQUEST_DECIDED)) == 1
    # The approver's own notification says it was decided since.
    assert titles(owner) == [
        "Acme Member asks you to approve: create a record in Tasks (decided since)"
    ]


def test_a_request_confirmed_by_the_approver(world, scripted, login):
    call = propose(world, scripted)
    hand(login("member@acme.test"), call.id, world.a.users["admin"].id)
    decide(login("admin@acme.test"), call.id, "confirm")
    (note,) = notes(world.a.users["member"].id, Kind.REQUEST_DECIDED)
    assert note.data == {"confirmed": True}
    assert titles(login("member@acme.test")) == [
        "Acme Admin approved your request: create a record in Tasks"
    ]


def test_an_api_keys_held_write_tells_those_who_may_decide_it(world, browser):
    token = factories.make_key(world.a.principal("owner"), "member", "Claude Desktop", True)
    response = browser.client.post(
        "/api/v1/models/tasks/records",
        json={"values": {"title": "Book the venue"}},
        headers=bearer(token),
    )
    assert response.status_code == 202
    approval_id = response.get_json()["id"]
    told = {
        n.user_id
        for n in db.session.scalars(
            select(Notification).where(Notification.kind == Kind.KEY_WRITE_WAITING)
        )
    }
    # records.create: owner, admin and member; never the viewer, never Globex.
    assert told == {world.a.users[r].id for r in ("owner", "admin", "member")}
    (note,) = notes(world.a.users["admin"].id)
    assert note.subject_id == approval_id


def failing_automation(world):
    """An automation whose every run fails: its record's title comes from empty notes."""
    raw = graph(
        ("t", "record.created", {"model": "tasks"}),
        ("make", "create_record", {"model": "tasks", "values": {"title": "{{record.notes}}"}}),
        edges=[("t", "make")],
    )
    return make_automation(world.a, raw, name="Copy notes")


def test_an_automation_failing_three_times_in_a_row_tells_its_owner_once(world, login):
    automation = failing_automation(world)
    tasks = records.get_model(world.a.principal("member"), "tasks")
    owner_id = world.a.users["owner"].id
    for n in range(2):
        records.create_record(world.a.principal("member"), tasks, {"title": f"T{n}"})
        drain()
    assert [r.status for r in runs_of(automation.id)] == ["failed", "failed"]
    assert notes(owner_id) == []
    records.create_record(world.a.principal("member"), tasks, {"title": "T2"})
    drain()
    (note,) = notes(owner_id)
    assert note.kind == Kind.AUTOMATION_FAILING and note.subject_id == automation.id
    # The fourth failure is the same streak: no second notification.
    records.create_record(world.a.principal("member"), tasks, {"title": "T3"})
    drain()
    assert len(notes(owner_id)) == 1
    assert titles(login("owner@acme.test")) == ["Automation “Copy notes” failed 3 times in a row"]


def test_a_success_ends_the_streak_and_the_next_streak_is_told_again(world):
    automation = failing_automation(world)
    owner_id = world.a.users["owner"].id
    tasks = records.get_model(world.a.principal("member"), "tasks")
    for n in range(3):
        records.create_record(world.a.principal("member"), tasks, {"title": f"A{n}"})
        drain()
    assert len(notes(owner_id)) == 1
    # A run that succeeds (its notes give a title) ends the streak.
    records.create_record(world.a.principal("member"), tasks, {"title": "ok", "notes": "Fine"})
    drain()
    assert {r.status for r in runs_of(automation.id)} >= {"succeeded"}
    for n in range(3):
        records.create_record(world.a.principal("member"), tasks, {"title": f"B{n}"})
        drain()
    assert len(notes(owner_id)) == 2
    # Test runs never count.
    assert not db.session.scalar(
        select(func.count()).select_from(AutomationRun).where(AutomationRun.is_test.is_(True))
    )


def _spend(world, cost: str, model: str) -> None:
    db.session.add(
        UsageDay(
            org_id=world.a.org.id,
            day=utcnow().date(),
            user_id=world.a.users["member"].id,
            provider="x",
            model=model,
            replies=1,
            cost=Decimal(cost),
        )
    )
    db.session.commit()


def test_the_ai_budget_at_80_and_100_percent_tells_the_admins_once_per_period(world, login):
    budgets.set_budget(world.a.principal("admin"), {"monthly_cost": "10"})
    member = world.a.principal("member")
    _spend(world, "8.5", "first")
    budgets.spend_check(member, record=True)
    db.session.commit()
    budgets.spend_check(member, record=True)  # again in the same period: nothing new
    db.session.commit()
    admins = {world.a.users["owner"].id, world.a.users["admin"].id}
    rows = list(
        db.session.scalars(select(Notification).where(Notification.kind == Kind.BUDGET_REACHED))
    )
    assert {n.user_id for n in rows} == admins and {n.data["threshold"] for n in rows} == {80}
    _spend(world, "2", "second")
    budgets.spend_check(member, record=True)
    db.session.commit()
    budgets.spend_check(member, record=True)
    db.session.commit()
    rows = list(
        db.session.scalars(select(Notification).where(Notification.kind == Kind.BUDGET_REACHED))
    )
    assert sorted(n.data["threshold"] for n in rows) == [80, 80, 100, 100]
    assert notes(world.a.users["member"].id) == []
    shown = titles(login("admin@acme.test"))
    assert shown[0].endswith("is used up: the assistant is paused.")
    assert shown[1].endswith("is 80% used.")


def test_an_invitation_accepted_tells_the_admins(world, login, browser):
    path = invite_link(login("admin@acme.test"), "newcomer@example.test", "member")
    page = browser.get(path, follow_redirects=True)
    browser._refresh_token(page.get_data(as_text=True))
    done = browser.post("/invite", {"name": "Nia Newcomer", "password": "a long enough secret"})
    assert done.status_code == 303
    told = {n.user_id for n in db.session.scalars(select(Notification))}
    assert told == {world.a.users["owner"].id, world.a.users["admin"].id}
    assert titles(login("owner@acme.test")) == [
        "Nia Newcomer accepted the invitation and joined as member."
    ]


# ---- nothing its reader may not read -------------------------------------------------------


def test_a_held_write_on_a_private_record_names_it_only_to_those_who_may_read_it(
    world, browser, login
):
    mia = second_member(world)
    token = factories.make_key(world.a.principal("owner"), "admin", "Ops agent", True)
    private = world.a.private  # the member's, private
    response = browser.client.patch(
        f"/api/v1/models/tasks/records/{private.id}",
        json={"values": {"status": "done"}},
        headers=bearer(token),
    )
    assert response.status_code == 202, response.get_data(as_text=True)
    prefer(mia.id, Kind.KEY_WRITE_WAITING, Delivery.NOW)
    assert notes(mia.id)  # she holds records.update: she is told something waits
    shown = titles(login("mia@acme.test"))
    assert shown == ["API key “Ops agent” waits for approval: update on a record you cannot see"]
    assert "Acme private task" not in login("mia@acme.test").get("/notifications").get_data(
        as_text=True
    )
    # The owner may read it (records.view_private), and so may its creator.
    for email in ("owner@acme.test", "member@acme.test"):
        assert titles(login(email)) == [
            "API key “Ops agent” waits for approval: update on “Acme private task”"
        ]


def test_the_title_is_drawn_with_the_readers_rights_when_read(world, scripted, login, app):
    mia = second_member(world)
    member = world.a.principal("member")
    shared = factories.make_record(member, world.a.model, "Quarterly plan", status="todo")
    scripted.script.add(
        [
            Call(
                "records_update",
                {"model": "tasks", "record_id": shared.id, "values": {"status": "done"}},
            )
        ]
    )
    (call,) = calls_of(send(member, "Mark it done").conversation_id)
    handover.hand_over(member, call.id, mia.id, tool_executor())
    assert titles(login("mia@acme.test")) == [
        "Acme Member asks you to approve: update on “Quarterly plan”"
    ]
    # Its creator makes it private: Mia's notification no longer names it, in the app or mail.
    records.update_record(member, world.a.model, shared.id, {}, visibility="private")
    assert titles(login("mia@acme.test")) == [
        "Acme Member asks you to approve: update on a record you cannot see"
    ]
    drain()  # the at-once mail, drawn as she may read it when sent
    (eml,) = sorted(delivery.mail.state(app).outbox.glob("*.eml"))
    assert "Quarterly plan" not in eml.read_text() and "a record you cannot see" in eml.read_text()


# ---- tenancy, reading, marking read ----------------------------------------------------------


def test_another_users_or_orgs_notification_is_not_found(world, scripted, login):
    call = propose(world, scripted)
    hand(login("member@acme.test"), call.id, world.a.users["owner"].id)
    (note,) = notes(world.a.users["owner"].id)
    for email in ("admin@acme.test", "owner@globex.test"):
        other = login(email)
        assert other.post(f"/notifications/{note.id}/open").status_code == 404
        assert titles(other) == [] and bell_count(other) is None
        with pytest.raises(NotFound):
            services.get(
                world.a.principal("admin") if "acme" in email else world.b.principal("owner"),
                note.id,
            )
    db.session.refresh(note)
    assert note.read_at is None


def test_opening_marks_read_and_leads_to_the_request(world, scripted, login):
    call = propose(world, scripted)
    hand(login("member@acme.test"), call.id, world.a.users["owner"].id)
    owner = login("owner@acme.test")
    (note,) = notes(world.a.users["owner"].id)
    opened = owner.post(f"/notifications/{note.id}/open")
    assert opened.status_code == 303
    assert opened.headers["Location"].endswith(f"/approvals#approval-{call.id}")
    db.session.refresh(note)
    assert note.read_at is not None
    assert bell_count(owner) is None


def test_the_list_is_newest_first_paged_and_mark_all_read(world, login):
    owner_id = world.a.users["owner"].id
    for n in range(services.PAGE_SIZE + 3):
        services.notify(
            world.a.org.id,
            [owner_id],
            Kind.BUDGET_REACHED,
            "org",
            world.a.org.id,
            data={"threshold": 80, "period": f"p{n:02d}"},
        )
    db.session.commit()
    owner = login("owner@acme.test")
    first = titles(owner)
    assert len(first) == services.PAGE_SIZE and "p22" in first[0] and "p03" in first[-1]
    page = BeautifulSoup(owner.get("/notifications").get_data(as_text=True), "html.parser")
    older = page.find("a", string="Older")["href"]
    rest = BeautifulSoup(owner.get(older).get_data(as_text=True), "html.parser")
    assert [b.get_text() for b in rest.select(".notification-title")][-1].count("p00") == 1
    assert bell_count(owner) == str(services.PAGE_SIZE + 3)
    assert owner.post("/notifications/read").status_code == 303
    assert bell_count(owner) is None
    assert all(n.read_at is not None for n in notes(owner_id))


# ---- mail ----------------------------------------------------------------------------------------


def test_at_once_mail_arrives_after_commit(world, scripted, login, smtp):
    call = propose(world, scripted, "Order chairs")
    hand(login("member@acme.test"), call.id, world.a.users["owner"].id)
    assert smtp.messages == []  # never inside the request
    drain()
    (message,) = smtp.messages
    assert message["To"] == "owner@acme.test"
    assert message["Subject"] == "[Acme] Acme Member asks you to approve: create a record in Tasks"
    text = message.get_body(preferencelist=("plain",)).get_content()
    assert f"/approvals#approval-{call.id}" in text
    (note,) = notes(world.a.users["owner"].id)
    assert note.mail == Delivery.NOW and note.mailed_at is not None
    # A redelivery of the job, or the sweep, mails it no second time.
    delivery.mail_now.func([note.id], "http://localhost")
    assert delivery.sweep.func() == 0
    drain()
    assert len(smtp.messages) == 1


def test_the_sweep_mails_what_the_queue_lost(world, smtp, app):
    owner_id = world.a.users["owner"].id
    _made = services.notify(world.a.org.id, [owner_id], Kind.HANDED_TO_YOU, "tool_call", 999)
    db.session.commit()
    db.session.execute(
        Notification.__table__.update().values(created_at=utcnow() - timedelta(minutes=5))
    )
    db.session.commit()
    jobs.queue(app).huey.flush()  # the job queued at commit is lost
    assert delivery.sweep.func() == 1
    drain()
    (message,) = smtp.messages
    assert "no longer there" in message["Subject"]


def test_never_sends_nothing_and_digest_waits_for_the_digest(world, scripted, login, smtp):
    owner_id = world.a.users["owner"].id
    prefer(owner_id, Kind.HANDED_TO_YOU, Delivery.NEVER)
    call = propose(world, scripted)
    hand(login("member@acme.test"), call.id, owner_id)
    drain()
    assert smtp.messages == []
    (note,) = notes(owner_id)
    assert note.mail == Delivery.NEVER
    later = utcnow() + timedelta(days=2)
    assert delivery.digest.func(later) == 0 and delivery.sweep.func() == 0
    drain()
    assert smtp.messages == []


def test_the_daily_digest_collects_the_unread_ones(world, scripted, login, smtp, app):
    member_id = world.a.users["member"].id  # "your request decided" defaults to the digest
    calls = []
    for title in ("One", "Two", "Three"):
        scripted.script.add(
            [Call("records_create", {"model": "tasks", "values": {"title": title}})]
        )
        (call,) = calls_of(send(world.a.principal("member"), title).conversation_id)
        hand(login("member@acme.test"), call.id, world.a.users["owner"].id)
        calls.append(call)
    owner = login("owner@acme.test")
    for call in calls:
        decide(owner, call.id, "reject")
    drain()
    smtp.messages.clear()  # the owner's at-once mail of each hand-over
    made = notes(member_id, Kind.REQUEST_DECIDED)
    assert len(made) == 3 and {n.mail for n in made} == {Delivery.DIGEST}
    services.open_one(world.a.principal("member"), made[0].id)  # read already: not in it
    hour = settings().notifications.digest_hour
    created = made[0].created_at.replace(tzinfo=UTC)
    before_mark = created.replace(hour=hour, minute=0, second=0, microsecond=0)
    if before_mark <= created:
        before_mark += timedelta(days=1)
    # Before the digest hour after they were made: nothing goes.
    assert delivery.digest.func(before_mark - timedelta(minutes=1)) == 0
    assert delivery.digest.func(before_mark + timedelta(minutes=5)) == 1
    assert delivery.digest.func(before_mark + timedelta(hours=1)) == 0  # once
    drain()
    (message,) = smtp.messages
    assert message["To"] == "member@acme.test"
    assert message["Subject"] == "[Acme] Your daily digest: 2 unread"
    text = message.get_body(preferencelist=("plain",)).get_content()
    assert text.count("Acme Owner rejected your request") == 2


# ---- preferences ---------------------------------------------------------------------------------


def test_the_profile_form_stores_preferences_and_refuses_a_bad_value(world, login):
    member = login("member@acme.test")
    page = BeautifulSoup(member.get("/profile").get_data(as_text=True), "html.parser")
    section = page.select_one("#notifications")
    assert section.find("select", attrs={"name": Kind.HANDED_TO_YOU})
    chosen = section.select_one(f"select[name='{Kind.HANDED_TO_YOU}'] option[selected]")
    assert chosen["value"] == "now"
    saved = member.post("/profile/notifications", {k.value: "digest" for k in Kind})
    assert saved.status_code == 303
    assert set(services.preferences(world.a.users["member"].id).values()) == {Delivery.DIGEST}
    bad = member.post(
        "/profile/notifications", {Kind.HANDED_TO_YOU.value: "hourly", Kind.MEMBER_JOINED: "now"}
    )
    assert bad.status_code == 422
    soup = BeautifulSoup(bad.get_data(as_text=True), "html.parser")
    invalid = soup.select_one(f"select[name='{Kind.HANDED_TO_YOU}']")
    assert invalid["aria-invalid"] == "true"
    assert "Choose at once" in soup.select_one(f"#{invalid['aria-describedby']}").get_text()
    prefs = services.preferences(world.a.users["member"].id)
    assert prefs[Kind.HANDED_TO_YOU] == prefs[Kind.MEMBER_JOINED] == Delivery.DIGEST  # unchanged
    with pytest.raises(ValidationFailed):
        services.set_preferences(world.a.principal("member"), {Kind.BUDGET_REACHED: "x"})


def test_defaults_mail_at_once_only_what_waits_on_you():
    assert DEFAULTS[Kind.HANDED_TO_YOU] == Delivery.NOW
    assert {DEFAULTS[k] for k in Kind if k != Kind.HANDED_TO_YOU} <= {
        Delivery.DIGEST,
        Delivery.NEVER,
    }


def test_the_digest_mark_is_the_latest_digest_hour():
    now = datetime(2026, 12, 3, 6, 30, tzinfo=UTC)
    assert delivery.digest_mark(now, 7) == datetime(2026, 12, 2, 7, tzinfo=UTC)
    assert delivery.digest_mark(now.replace(hour=7), 7) == datetime(2026, 12, 3, 7, tzinfo=UTC)


def test_the_digest_goes_at_the_digest_hour_of_the_members_own_clock(world, scripted, login, smtp):
    member_id = world.a.users["member"].id
    db.session.get(User, member_id).time_zone = "Asia/Tokyo"  # UTC+9, no summer time
    db.session.commit()
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "Far"}})])
    (call,) = calls_of(send(world.a.principal("member"), "Far").conversation_id)
    hand(login("member@acme.test"), call.id, world.a.users["owner"].id)
    decide(login("owner@acme.test"), call.id, "reject")
    drain()
    smtp.messages.clear()
    (made,) = notes(member_id, Kind.REQUEST_DECIDED)
    made.created_at = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)  # 19:00 in Tokyo
    db.session.commit()
    hour = settings().notifications.digest_hour
    tokyo_mark = datetime(2026, 12, 2, hour, tzinfo=ZoneInfo("Asia/Tokyo")).astimezone(UTC)
    assert delivery.digest.func(tokyo_mark - timedelta(minutes=1)) == 0
    assert delivery.digest.func(tokyo_mark + timedelta(minutes=5)) == 1
    drain()
    (message,) = smtp.messages
    assert message["To"] == "member@acme.test"
