"""The header's search in Chromium: Ctrl+K, type, arrows, Enter, Esc; only what the reader
may read."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from monark.wiki import services as wiki
from tests.factories import make_record


def test_ctrl_k_finds_a_wiki_page_by_its_body_and_never_a_private_record(world, browse):
    owner, member = world.a.principal("owner"), world.a.principal("member")
    page = wiki.create_page(owner, "Onboarding", "", None, "Bring the quetzal checklist.")
    make_record(member, world.a.model, "Quetzal payroll", visibility="private")
    make_record(owner, world.a.model, "Quetzal order")
    s = browse("viewer@acme.test")
    s.goto("/models/tasks/records")
    box, popup = s.page.locator("#search-q"), s.page.locator("#search-popup")

    s.page.keyboard.press("Control+k")
    expect(box).to_be_focused()
    s.page.keyboard.type("quetzal")
    expect(popup).to_be_visible()
    expect(popup.get_by_role("option", name=re.compile("Onboarding"))).to_be_visible()
    expect(popup).to_contain_text("Quetzal order")
    expect(popup).not_to_contain_text("payroll")  # the member's own: never the viewer's
    expect(popup.locator("mark").first).to_have_text(re.compile("quetzal", re.I))
    expect(popup.get_by_role("group").first).to_have_accessible_name("Wiki pages")

    s.page.keyboard.press("Escape")
    expect(popup).to_be_hidden()
    s.page.keyboard.press("ArrowDown")  # opens the list again on its first result
    expect(popup).to_be_visible()
    first = popup.get_by_role("option").first
    expect(first).to_have_attribute("aria-selected", "true")
    expect(box).to_have_attribute("aria-activedescendant", first.get_attribute("id"))
    s.page.keyboard.press("Enter")
    expect(s.page).to_have_url(re.compile(f"/wiki/{page.id}$"))
    expect(s.page.locator("#main")).to_contain_text("Bring the quetzal checklist.")
    expect(popup).to_be_hidden()
    assert not s.errors, s.errors  # no CSP violation, no script error
    s.shot("search_box")


def test_enter_with_nothing_chosen_opens_the_results_page(world, browse):
    owner = world.a.principal("owner")
    wiki.create_page(owner, "Travel", "", None, "the axolotl tank")
    s = browse("owner@acme.test")
    s.goto("/wiki")
    s.page.keyboard.press("Meta+k")
    expect(s.page.locator("#search-q")).to_be_focused()
    s.page.keyboard.type("axolotl")
    expect(s.page.locator("#search-popup")).to_be_visible()
    s.page.keyboard.press("Enter")
    expect(s.page).to_have_url(re.compile(r"/search\?q=axolotl"))
    expect(s.page.locator("#search-results")).to_contain_text("Travel")
    assert not s.errors, s.errors


def test_an_answer_that_arrives_after_esc_leaves_the_list_closed(world, browse):
    owner = world.a.principal("owner")
    wiki.create_page(owner, "Travel", "", None, "the axolotl tank")
    s = browse("owner@acme.test")
    s.goto("/wiki")
    box, popup = s.page.locator("#search-q"), s.page.locator("#search-popup")
    s.page.keyboard.press("Control+k")
    s.page.keyboard.type("axolotl")
    expect(popup).to_contain_text("Travel")
    expect(popup).to_be_visible()

    # The answer for what is typed next is held back until after Esc, as a slow server would.
    held = []
    s.page.route(re.compile(r"/search\?q=axolotl\+tank"), lambda route: held.append(route))
    with s.page.expect_request(re.compile(r"/search\?q=axolotl\+tank")):
        s.page.keyboard.type(" tank")
    s.page.keyboard.press("Escape")
    expect(popup).to_be_hidden()
    assert len(held) == 1
    with s.page.expect_response(re.compile(r"/search\?q=axolotl\+tank")):
        held[0].continue_()
    expect(popup).to_contain_text("axolotl tank")  # the late answer was drawn ...
    expect(popup).to_be_hidden()  # ... and left closed
    expect(box).to_have_attribute("aria-expanded", "false")

    s.page.keyboard.press("ArrowDown")  # the arrows open it again
    expect(popup).to_be_visible()
    assert not s.errors, s.errors
