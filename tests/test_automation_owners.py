"""An automation acts within its owner's current rights: switched off, with a stored reason,
when the owner leaves or loses automation.manage; an admin can take it over."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select, update

from monark.automations import services
from monark.automations.models import Automation
from monark.core.errors import Conflict
from monark.core.models import Event, Membership
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records.models import Record
from monark.settings import members
from monark.settings import services as settings
from tests import factories
from tests.jobs import drain
from tests.test_automations import graph, runs_of

COPY = graph(
    ("t", "record.created", {"model": "tasks"}),
    ("copy", "update_record", {"values": {"notes": "seen by the automation"}}),
    edges=[("t", "copy")],
)


@pytest.fixture
def acme(world: factories.World) -> factories.OrgWorld:
    return world.a


def admins_automation(acme: factories.OrgWorld, name: str = "Admin's") -> Automation:
    return services.create_automation(acme.principal("admin"), name, COPY, enabled=True)


def membership(acme: factories.OrgWorld, role: str) -> Membership:
    user_id = acme.users[role].id
    return db.session.scalars(
        select(Membership).where(Membership.user_id == user_id, Membership.org_id == acme.org.id)
    ).one()


def reload(automation: Automation) -> Automation:
    db.session.expire_all()
    return db.session.get(Automation, automation.id)


def new_task(acme: factories.OrgWorld, title: str = "New") -> Record:
    task = factories.make_record(acme.principal("member"), acme.model, title)
    drain()  # the automations it triggers run on the queue
    return task


def test_an_automation_is_owned_by_its_author_and_runs_within_their_rights(acme):
    automation = admins_automation(acme)
    assert automation.owner_id == acme.users["admin"].id
    task = new_task(acme)
    db.session.expire_all()
    assert db.session.get(Record, task.id).values["notes"] == "seen by the automation"


def test_demoting_the_owner_switches_their_automations_off_in_the_same_change(acme):
    automation = admins_automation(acme)
    settings.change_role(acme.principal("owner"), membership(acme, "admin").id, "viewer")
    automation = reload(automation)
    assert not automation.enabled
    assert "was made a viewer (who manages no automations)" in automation.disabled_reason
    event = db.session.scalars(select(Event).where(Event.type == "automation.disabled")).one()
    assert event.payload["reason"] == "owner_lost_rights"
    task = new_task(acme)
    assert runs_of(automation.id) == []
    assert "notes" not in db.session.get(Record, task.id).values


def test_removing_the_owner_switches_their_automations_off(acme):
    automation = admins_automation(acme)
    members.remove_member(acme.principal("owner"), membership(acme, "admin").id)
    automation = reload(automation)
    assert not automation.enabled and "left the organization" in automation.disabled_reason
    event = db.session.scalars(select(Event).where(Event.type == "automation.disabled")).one()
    assert (event.payload["reason"], event.actor_kind) == ("owner_left", "automation")


def test_an_owner_who_lost_rights_unnoticed_is_caught_at_the_next_run(acme):
    automation = admins_automation(acme)
    # A change no service saw (a script, a restore): the run checks the owner itself.
    db.session.execute(
        update(Membership)
        .where(Membership.id == membership(acme, "admin").id)
        .values(role="member")
    )
    db.session.commit()
    task = new_task(acme)
    assert runs_of(automation.id) == []
    assert "notes" not in db.session.get(Record, task.id).values
    assert not reload(automation).enabled


def test_a_switched_off_automation_cannot_be_enabled_or_run_until_taken_over(acme):
    automation = admins_automation(acme)
    settings.change_role(acme.principal("owner"), membership(acme, "admin").id, "member")
    owner = acme.principal("owner")
    with pytest.raises(Conflict, match="Take ownership"):
        services.set_enabled(owner, automation.id, True)
    with pytest.raises(Conflict, match="Take ownership"):
        services.run_test(owner, automation.id)
    services.take_ownership(owner, automation.id)
    services.set_enabled(owner, automation.id, True)
    automation = reload(automation)
    assert automation.enabled and automation.disabled_reason is None
    assert automation.owner_id == acme.users["owner"].id
    changed = db.session.scalars(select(Event).where(Event.type == "automation.owner_changed"))
    assert changed.one().payload["user_id"] == acme.users["owner"].id
    task = new_task(acme)
    db.session.expire_all()
    assert db.session.get(Record, task.id).values["notes"] == "seen by the automation"


def test_other_members_automations_stay_on_when_someone_is_demoted(acme):
    kept = services.create_automation(acme.principal("owner"), "Owner's", COPY, enabled=True)
    admins_automation(acme)
    settings.change_role(acme.principal("owner"), membership(acme, "admin").id, "viewer")
    assert reload(kept).enabled


def test_a_run_never_has_more_rights_than_its_owner_role():
    assert not Principal.for_automation(1, 1, "viewer").can("records.create")
    assert not Principal.for_automation(1, 1, None).can("records.view")
    admin = Principal.for_automation(1, 1, "admin")
    assert admin.can("records.update") and not admin.can("records.delete")
    assert not admin.can("org.manage")  # an automation acts on records only


def test_the_page_shows_the_owner_the_reason_and_take_ownership(acme, login):
    automation = admins_automation(acme)
    settings.change_role(acme.principal("owner"), membership(acme, "admin").id, "viewer")
    browser = login("owner@acme.test")
    page = BeautifulSoup(browser.get(f"/automations/{automation.id}").data, "html.parser")
    assert "was made a viewer" in page.get_text()
    assert page.find("button", string="Take ownership") is not None
    refused = browser.post(f"/automations/{automation.id}/enabled", data={"enabled": "true"})
    assert refused.status_code == 303
    page = BeautifulSoup(browser.get(f"/automations/{automation.id}").data, "html.parser")
    assert "Take ownership of Admin's to enable it" in page.get_text()
    assert browser.post(f"/automations/{automation.id}/owner").status_code == 303
    browser.post(f"/automations/{automation.id}/enabled", data={"enabled": "true"})
    assert reload(automation).enabled
    listing = BeautifulSoup(browser.get("/automations").data, "html.parser")
    assert "needs an owner" not in listing.get_text()


def test_the_private_records_choice_is_for_managers_and_validated(acme, login):
    automation = admins_automation(acme)
    viewer = login("viewer@acme.test")
    url = f"/automations/{automation.id}/private-records"
    assert viewer.post(url, data={"private_records": "send"}).status_code == 403
    admin = login("admin@acme.test")
    admin.post(url, data={"private_records": "everything"})
    page = BeautifulSoup(admin.get(f"/automations/{automation.id}").data, "html.parser")
    assert "Choose one of: skip, keep, send." in page.get_text()
    assert reload(automation).private_records == "skip"
    admin.post(url, data={"private_records": "keep"})
    assert reload(automation).private_records == "keep"
    checked = page.find("input", attrs={"name": "private_records", "checked": True})
    assert checked["value"] == "skip"


def test_whoever_changes_what_it_does_becomes_its_owner(acme):
    """An admin who rewrites another's automation vouches for it: it acts within their
    rights, and goes off when they lose them."""
    automation = services.create_automation(acme.principal("owner"), "Owner's", COPY, True)
    admin = acme.principal("admin")
    renamed = services.update_automation(admin, automation.id, graph=COPY, name="Admin's now")
    assert renamed.owner_id == acme.users["admin"].id
    changed = db.session.scalars(select(Event).where(Event.type == "automation.owner_changed"))
    assert changed.one().payload["user_id"] == acme.users["admin"].id
    services.set_private_records(acme.principal("owner"), automation.id, "keep")
    assert reload(automation).owner_id == acme.users["owner"].id
    services.update_automation(admin, automation.id, graph=COPY, name="Admin's now")  # no change
    assert reload(automation).owner_id == acme.users["owner"].id


def test_taking_ownership_clears_the_reason_it_was_switched_off(acme):
    automation = admins_automation(acme)
    settings.change_role(acme.principal("owner"), membership(acme, "admin").id, "member")
    assert reload(automation).disabled_reason
    services.take_ownership(acme.principal("owner"), automation.id)
    automation = reload(automation)
    assert automation.disabled_reason is None and not automation.enabled
