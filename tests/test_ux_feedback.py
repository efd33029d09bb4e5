"""What a page says after an action, and where: a save's confirmation in its own section,
a refusal beside its field, a demotion in the role it gave, the audit log in sentences."""

from __future__ import annotations

from bs4 import BeautifulSoup
from sqlalchemy import select

from monark.automations import services as automations
from monark.core.models import Event, Membership
from monark.extensions import db
from monark.settings import services as settings
from tests import factories
from tests.test_automation_owners import COPY


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def membership(acme: factories.OrgWorld, role: str) -> Membership:
    user_id = acme.users[role].id
    return db.session.scalars(
        select(Membership).where(Membership.user_id == user_id, Membership.org_id == acme.org.id)
    ).one()


def section_says(soup: BeautifulSoup, section: str) -> list[str]:
    return [p.get_text(" ", strip=True) for p in soup.select(f"#{section} .flash")]


def page_says(soup: BeautifulSoup) -> list[str]:
    """The page-wide messages (those outside every section)."""
    return [p.get_text(" ", strip=True) for p in soup.select("#main > .flashes .flash")]


# ---- settings: feedback in the section saved -------------------------------------------


def test_saving_approval_settings_says_saved_in_that_section(login, world):
    admin = login("admin@acme.test")
    saved = admin.post("/settings/approvals", {"chat_allowances_enabled": "on"})
    assert saved.status_code == 303
    assert saved.headers["Location"] == "/settings"  # a full load, not a scroll to an anchor
    page = soup_of(admin.get("/settings"))
    assert section_says(page, "approvals") == ["Approval settings saved."]
    assert page_says(page) == []
    # Read once: the next page says nothing.
    assert section_says(soup_of(admin.get("/settings")), "approvals") == []


def test_each_settings_section_confirms_its_own_save(login, world):
    admin = login("admin@acme.test")
    admin.post("/settings/four-eyes", {"four_eyes": "records_delete"})
    page = soup_of(admin.get("/settings"))
    assert section_says(page, "four-eyes") == ["Saved: four eyes on for records_delete."]
    assert section_says(page, "approvals") == [] and page_says(page) == []
    admin.post("/settings", {"name": "Acme", "chat_enabled": "on"})
    page = soup_of(admin.get("/settings"))
    assert section_says(page, "organization") == ["Settings saved."]


def test_a_refused_approval_setting_is_named_beside_its_field(login, world):
    admin = login("admin@acme.test")
    refused = admin.post("/settings/approvals", {"chat_always_confirm": "records_nuke"})
    assert refused.status_code == 422
    soup = soup_of(refused)
    fieldset = soup.select_one("#approvals fieldset.has-error")
    assert fieldset is not None
    assert "Always ask for these tools" in fieldset.legend.get_text()
    assert fieldset.select_one(".error").get_text(strip=True) == "No write tool named records_nuke."
    assert fieldset["aria-describedby"] == fieldset.select_one(".error")["id"]
    refused = admin.post("/settings/four-eyes", {"four_eyes": "records_nuke"})
    assert refused.status_code == 422
    error = soup_of(refused).select_one("#four-eyes fieldset.has-error .error")
    assert error.get_text(strip=True) == "Not a write tool: records_nuke."


def test_the_allowance_setting_says_what_it_trusts(login, world):
    section = soup_of(login("admin@acme.test").get("/settings")).select_one("#approvals")
    hint = section.select_one("#allowances-hint").get_text(" ", strip=True)
    assert "one tool" in hint and "one model" in hint and "one conversation" in hint
    assert "deletes always ask" in hint
    box = section.select_one("input[name=chat_allowances_enabled]")
    assert box.find_parent("fieldset")["aria-describedby"] == "allowances-hint"


def test_the_settings_header_keeps_its_buttons_together(login, world):
    head = soup_of(login("admin@acme.test").get("/settings")).select_one(".page-head")
    assert [c.name for c in head.find_all(recursive=False)] == ["h1", "div"]
    actions = head.select_one(".actions")
    assert [a.get_text(strip=True) for a in actions.select("a.button")] == [
        "AI model",
        "Usage",
        "API keys",
        "Feedback on replies",
    ]


# ---- members: the role given, and the automations it switched off --------------------------


def test_a_role_change_says_the_role_now_held(login, world):
    owner = login("owner@acme.test")
    owner.post(f"/settings/members/{membership(world.a, 'member').id}/role", {"role": "admin"})
    page = soup_of(owner.get("/settings"))
    assert section_says(page, "members") == ["Acme Member is now an admin."]


def test_a_demotion_says_how_many_automations_it_switched_off_and_links_to_them(login, world):
    acme = world.a
    for name in ("First", "Second"):
        automations.create_automation(acme.principal("admin"), name, COPY, enabled=True)
    kept = automations.create_automation(acme.principal("owner"), "Owner's", COPY, enabled=True)
    owner = login("owner@acme.test")
    response = owner.post(
        f"/settings/members/{membership(acme, 'admin').id}/role", {"role": "member"}
    )
    assert response.headers["Location"].endswith("/settings#members")
    page = soup_of(owner.get("/settings"))
    said = section_says(page, "members")
    assert said[0] == "Acme Admin is now a member."
    assert said[1].startswith("2 automations they owned were switched off")
    link = page.select("#members .flash")[1].a
    assert link["href"] == "/automations?state=needs_owner"
    listed = soup_of(owner.get(link["href"]))
    names = [a.get_text(strip=True) for a in listed.select("table a")]
    assert names == ["First", "Second"] or names == ["Second", "First"]
    assert kept.name not in names
    # A change that switches nothing off says nothing of automations.
    owner.post(f"/settings/members/{membership(acme, 'member').id}/role", {"role": "viewer"})
    assert section_says(soup_of(owner.get("/settings")), "members") == [
        "Acme Member is now a viewer."
    ]


# ---- the audit log: sentences -------------------------------------------------------------


def test_the_audit_log_says_ownership_and_role_changes_in_sentences(login, world):
    acme = world.a
    automation = automations.create_automation(acme.principal("admin"), "Copy", COPY, True)
    settings.change_role(acme.principal("owner"), membership(acme, "admin").id, "viewer")
    automations.take_ownership(acme.principal("owner"), automation.id)
    changed = db.session.scalars(
        select(Event).where(Event.type == "automation.owner_changed")
    ).one()
    assert changed.payload == {
        "automation_id": automation.id,
        "user_id": acme.users["owner"].id,
        "previous_owner_id": acme.users["admin"].id,
    }
    soup = soup_of(login("owner@acme.test").get("/audit"))
    rows = {
        tr.select_one("code").get_text(): " ".join(tr.select("td")[-1].get_text().split())
        for tr in soup.select("#audit-table tbody tr")
    }
    assert rows["member.role_changed"] == "Acme Admin's role changed from admin to viewer."
    assert rows["automation.disabled"] == (
        f"Switched off automation #{automation.id}: its owner, Acme Admin, "
        "lost the right to manage automations."
    )
    assert rows["automation.owner_changed"] == (
        f"Ownership of automation #{automation.id} passed from Acme Admin to Acme Owner."
    )
    link = soup.find("a", string=f"automation #{automation.id}")
    assert link["href"] == f"/automations/{automation.id}"
