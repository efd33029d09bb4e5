"""An automation's page as its admins read it: one primary action when it is off, a flash
that says it is still off and why, the privacy choice saved in words, a private run noted."""

from __future__ import annotations

from bs4 import BeautifulSoup
from sqlalchemy import select

from monark.automations import services
from monark.automations.models import Automation
from monark.cli import REVIEW_GRAPH
from monark.core.models import Membership
from monark.extensions import db
from monark.records import services as records
from monark.settings import services as settings
from tests import factories
from tests.jobs import drain
from tests.test_automation_owners import COPY
from tests.test_automation_privacy import finish_private_task
from tests.test_automations import make_automation, runs_of


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def flashes(soup: BeautifulSoup, where: str = "#main") -> list[str]:
    return [p.get_text(" ", strip=True) for p in soup.select(f"{where} .flash")]


def switched_off(acme: factories.OrgWorld) -> Automation:
    """The admin's automation, switched off by their demotion to member."""
    automation = services.create_automation(acme.principal("admin"), "Copy notes", COPY, True)
    admin = db.session.scalars(
        select(Membership).where(
            Membership.user_id == acme.users["admin"].id, Membership.org_id == acme.org.id
        )
    ).one()
    settings.change_role(acme.principal("owner"), admin.id, "member")
    return automation


def test_a_switched_off_automation_offers_one_primary_action(login, world):
    automation = switched_off(world.a)
    page = soup_of(login("owner@acme.test").get(f"/automations/{automation.id}"))
    # (The JSON editor's Save is its own form's, further down.)
    primaries = [b for b in page.select("#main button.primary") if not b.find_parent(id="edit")]
    assert [b.get_text(strip=True) for b in primaries] == ["Take ownership"]
    # Offered once, not again in the rights section; no "Enable" that can only be refused.
    takes = page.find_all("button", string="Take ownership")
    assert len(takes) == 1
    assert not page.find("button", string=["Enable", "Switch on", "Switch on again"])
    # The reason once, as a notice, not as a red error.
    assert page.select("#main .flash-error, #main .error") == []
    notice = page.select_one(".off-notice")
    assert "was made a member (who manages no automations)" in notice.get_text()
    assert notice.find_parent(class_="page-head") is None


def test_taking_ownership_says_it_is_still_off_then_switch_on_is_the_action(login, world):
    automation = switched_off(world.a)
    owner = login("owner@acme.test")
    owner.post(f"/automations/{automation.id}/owner")
    page = soup_of(owner.get(f"/automations/{automation.id}"))
    assert flashes(page) == [
        "You own Copy notes now. It is still off: switch it on when you are ready."
    ]
    primaries = page.select("#main .page-head button.primary")
    assert [b.get_text(strip=True) for b in primaries] == ["Switch on"]
    assert page.select_one(".off-notice") is None
    owner.post(f"/automations/{automation.id}/enabled", {"enabled": "true"})
    page = soup_of(owner.get(f"/automations/{automation.id}"))
    assert flashes(page) == ["Copy notes is on."]
    assert [b.get_text(strip=True) for b in page.select(".page-head button")] == ["Switch off"]


def test_a_refused_switch_on_says_still_off_and_why(login, world):
    automation = switched_off(world.a)
    owner = login("owner@acme.test")
    owner.post(f"/automations/{automation.id}/enabled", {"enabled": "true"})
    said = flashes(soup_of(owner.get(f"/automations/{automation.id}")))
    assert len(said) == 1
    assert said[0].startswith("Copy notes is still off: Its owner, Acme Admin, is now a member")
    assert said[0].endswith("Take ownership of Copy notes to enable it.")


def test_the_privacy_choice_is_a_styled_list_and_its_save_says_what_was_chosen(login, world):
    automation = services.create_automation(world.a.principal("owner"), "Copy", COPY, True)
    owner = login("owner@acme.test")
    url = f"/automations/{automation.id}"
    form = soup_of(owner.get(url)).select_one("#rights form[action$=private-records]")
    labels = form.select("fieldset.choices label.choice")
    assert [lab.select_one(".choice-title").get_text(strip=True) for lab in labels] == [
        "Skip private records",
        "Run for them, keep the results private",
        "Run for them, keep the results private, send webhooks",
    ]
    for label in labels:
        radio = label.select_one("input[type=radio]")
        assert label.select_one(f"#{radio['aria-describedby']}").get_text(strip=True)
        title = label.select_one(f"#{radio['aria-labelledby']}")  # its name: the title alone
        assert "choice-title" in title["class"]
    saved = owner.post(f"{url}/private-records", {"private_records": "keep"})
    assert saved.headers["Location"].endswith(f"{url}#rights")
    page = soup_of(owner.get(url))
    assert flashes(page, "#rights") == ["Saved: Run for them, keep the results private."]
    assert flashes(page, "#main > .flashes") == []
    owner.post(f"{url}/private-records", {"private_records": "keep"})
    page = soup_of(owner.get(url))
    assert flashes(page, "#rights") == ["No change: Run for them, keep the results private."]


def test_a_run_for_a_private_record_says_so_and_links_the_record_for_its_readers(login, world):
    acme = world.a
    review = make_automation(acme, REVIEW_GRAPH, name="Review", private_records="keep")
    task = finish_private_task(acme, "Fire Dana quietly")
    public = factories.make_record(acme.principal("owner"), acme.model, "Open task", status="todo")
    records.update_record(acme.principal("owner"), acme.model, public.id, {"status": "done"})
    drain()  # the automations it triggers run on the queue
    private_run, org_run = runs_of(review.id)
    assert private_run.record_private and not org_run.record_private
    member = login("member@acme.test")  # the private task's creator
    page = soup_of(member.get(f"/automations/{review.id}/runs/{private_run.id}"))
    note = page.select_one(".private-note")
    said = note.get_text(" ", strip=True)
    assert "This run was for a private record." in said
    assert "its creator and the organization's admins" in said
    assert "Fire Dana" not in said  # the note names no value of it
    assert note.find("a", string="Open the record")["href"] == f"/models/tasks/records/{task.id}"
    record_dd = page.find("dt", string="Record").find_next_sibling("dd")
    assert record_dd.a["href"] == f"/models/tasks/records/{task.id}"
    assert record_dd.select_one(".badge-private").get_text(strip=True) == "private"
    # An org run has neither; the runs table marks the private one alone.
    org_page = soup_of(member.get(f"/automations/{review.id}/runs/{org_run.id}"))
    assert org_page.select_one(".private-note") is None
    rows = soup_of(member.get(f"/automations/{review.id}/runs")).select("tbody tr")
    marked = {tr.a.get_text(strip=True): bool(tr.select_one(".badge-private")) for tr in rows}
    assert marked == {f"#{private_run.id}": True, f"#{org_run.id}": False}
    # Someone who may not read the record sees neither the run nor a link to it.
    viewer = login("viewer@acme.test")
    assert viewer.get(f"/automations/{review.id}/runs/{private_run.id}").status_code == 404
