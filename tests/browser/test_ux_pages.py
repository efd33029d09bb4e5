"""Pages as a browser shows them: no CSP violation in the console while pages load and
htmx swaps, a save's message in view beside its section, and nothing wider than a phone."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from monark.automations import services as automations
from monark.core.models import Membership
from monark.extensions import db
from monark.settings import services as settings
from tests import factories
from tests.test_automation_owners import COPY

PHONE = {"viewport": {"width": 375, "height": 740}}


def switched_off(acme: factories.OrgWorld, name: str) -> int:
    """An automation of the admin's, switched off by their demotion (its id)."""
    automation = automations.create_automation(acme.principal("admin"), name, COPY, True)
    admin = db.session.scalars(
        select(Membership).where(
            Membership.user_id == acme.users["admin"].id, Membership.org_id == acme.org.id
        )
    ).one()
    settings.change_role(acme.principal("owner"), admin.id, "member")
    return automation.id


def test_pages_and_swaps_log_no_csp_violation(world, browse):
    s = browse("owner@acme.test")
    violations: list[str] = []
    s.page.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    for path in ("/settings", "/automations", "/audit", "/models/tasks/records", "/wiki"):
        s.goto(path)
    # Boosted forms swap #main (whose text inputs the browser has touched) ...
    s.goto("/settings")
    s.page.get_by_role("button", name="Save approval settings").click()  # a full reload
    expect(s.page.locator("#approvals .flash")).to_have_text("Approval settings saved.")
    # An element screenshot leaves style="" on the page's text inputs (as any script or
    # extension touching an element's style may): a swap must not copy it onto the new
    # inputs, which the CSP refuses as an inline style.
    s.page.locator("#approvals").screenshot()
    s.page.get_by_label("Role of Acme Member").select_option("viewer")
    s.page.locator("#members form", has=s.page.get_by_label("Role of Acme Member")).get_by_role(
        "button", name="Change"
    ).click()
    expect(s.page.locator("#members .flash")).to_have_text("Acme Member is now a viewer.")
    s.page.get_by_role("button", name="Save four eyes").click()
    expect(s.page.locator("#four-eyes .flash")).to_contain_text("Saved: four eyes is off.")
    # ... as the records toolbar swaps its table, and the panel opens.
    s.goto("/models/tasks/records")
    s.page.get_by_label("Search", exact=True).fill("task")  # the toolbar's, not the header's
    expect(s.page.locator("#records-table")).to_contain_text("match")
    s.page.get_by_role("button", name="Chrysa").click()
    expect(s.page.get_by_role("complementary", name="Assistant")).to_be_visible()
    s.page.wait_for_timeout(300)
    assert violations == [] and s.errors == [], (violations, s.errors)


def test_a_save_brings_its_section_and_message_into_view(world, browse):
    s = browse("owner@acme.test")
    s.goto("/settings")
    s.page.get_by_role("button", name="Save approval settings").click()
    said = s.page.locator("#approvals .flash")
    expect(said).to_have_text("Approval settings saved.")
    expect(said).to_be_in_viewport()
    s.page.get_by_role("button", name="Save four eyes").click()
    expect(s.page.locator("#four-eyes .flash")).to_be_in_viewport()
    assert s.page.locator("#main > .flashes").count() == 0
    s.shot("ux_settings_saved_in_section")


def test_a_refused_filter_row_is_named_beside_it_after_an_htmx_answer(world, browse):
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    s.page.get_by_label("Filter field").first.select_option("due")
    value = s.page.get_by_label("Value").first
    expect(value).to_have_attribute("placeholder", "YYYY-MM-DD")
    s.page.get_by_label("Operator").first.select_option("lt")
    value.fill("next week")
    row = s.page.locator(".filters > .filter-row").first
    expect(row.locator(".filter-row-error")).to_have_text(
        "'next week' is not a valid date for Due (use YYYY-MM-DD or today)."
    )
    expect(value).to_have_attribute("aria-invalid", "true")
    expect(value).to_be_focused()  # typing was not interrupted
    value.fill("2031-01-01")
    expect(row.locator(".filter-row-error")).to_have_count(0)
    expect(value).not_to_have_attribute("aria-invalid", "true")
    s.shot("ux_filter_error_beside_row")


def _widths(s) -> dict:
    return s.page.evaluate(
        """() => ({
            page: document.documentElement.scrollWidth,
            window: window.innerWidth,
            nav: document.querySelector('.nav').getBoundingClientRect().right,
            wraps: [...document.querySelectorAll('.table-wrap')].map(
                w => w.getBoundingClientRect().right),
        })"""
    )


@pytest.mark.parametrize("page", ["list", "detail", "runs"])
def test_automation_pages_fit_a_phone(page, world, browse):
    automation_id = switched_off(world.a, "Copy the notes of every new task into a long name")
    automations.take_ownership(world.a.principal("owner"), automation_id)
    automations.run_test(world.a.principal("owner"), automation_id)
    path = {
        "list": "/automations",
        "detail": f"/automations/{automation_id}",
        "runs": f"/automations/{automation_id}/runs",
    }[page]
    s = browse("owner@acme.test", **PHONE)
    s.goto(path)
    sizes = _widths(s)
    assert sizes["page"] <= sizes["window"], sizes  # nothing scrolls the page sideways
    assert sizes["nav"] <= sizes["window"], sizes  # the nav scrolls within itself
    assert all(right <= sizes["window"] for right in sizes["wraps"]), sizes
    assert not s.errors
    s.shot(f"ux_phone_automations_{page}")
