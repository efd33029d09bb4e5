"""Layout and navigation in a real browser: narrow screens, and saves that reload the page."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests import factories

NARROW = {"viewport": {"width": 390, "height": 800}}


def _overflow(s) -> dict:
    """How wide the page is against the window, and the widest table box's own scrolling."""
    return s.page.evaluate(
        """() => ({
            page: document.documentElement.scrollWidth,
            window: window.innerWidth,
            header: document.querySelector('.topbar').getBoundingClientRect().height,
            wraps: [...document.querySelectorAll('.table-wrap')].map(w => ({
                scroll: w.scrollWidth, client: w.clientWidth,
                right: w.getBoundingClientRect().right,
            })),
        })"""
    )


@pytest.mark.parametrize("path", ["/models/tasks/records", "/settings", "/audit"])
def test_wide_tables_scroll_in_their_own_box_on_a_phone(path, world, browse):
    owner = world.a.principal("owner")
    for i in range(3):
        factories.make_record(
            owner,
            world.a.model,
            f"A rather long task title number {i}",
            status="doing",
            due="2031-12-31",
            assignee=world.a.users["viewer"].id,
        )
    s = browse("owner@acme.test", **NARROW)
    s.goto(path)
    sizes = _overflow(s)
    assert sizes["page"] <= sizes["window"], sizes  # the page itself never scrolls sideways
    assert sizes["wraps"], sizes
    for wrap in sizes["wraps"]:
        assert wrap["right"] <= sizes["window"], sizes
    assert any(w["scroll"] > w["client"] for w in sizes["wraps"]), sizes  # the table does
    assert sizes["header"] < 100, sizes  # two short rows, not five
    assert not s.errors
    s.shot(f"narrow{path.replace('/', '_')}")


def test_the_header_keeps_one_row_on_a_wide_screen(world, browse):
    s = browse("owner@acme.test", viewport={"width": 1280, "height": 800})
    s.goto("/models/tasks/records")
    sizes = _overflow(s)
    assert sizes["header"] < 70 and sizes["page"] <= sizes["window"], sizes


def test_renaming_a_model_reloads_the_page_so_the_nav_shows_it(world, browse):
    s = browse("owner@acme.test")
    s.goto("/models/tasks/settings")
    s.page.evaluate("window.__sameDocument = true")
    form = s.page.locator("form", has=s.page.get_by_role("button", name="Save")).first
    form.get_by_label("Name").fill("Chores")
    form.get_by_role("button", name="Save").click()
    nav = s.page.get_by_role("navigation", name="Main")
    nav.get_by_role("link", name="Chores").wait_for()
    assert nav.get_by_role("link", name="Tasks").count() == 0
    assert s.page.locator(".flashes .flash").inner_text() == "Model saved."
    # A full page load: the old document (and its window) is gone.
    assert s.page.evaluate("window.__sameDocument === undefined")
    assert s.page.url.endswith("/models/tasks/settings")
    assert not s.errors


def test_a_new_api_key_shows_once_and_a_reload_creates_nothing(world, browse):
    s = browse("admin@acme.test")
    s.goto("/settings/api-keys")
    s.page.get_by_label("Name").fill("Phone")
    s.page.get_by_role("button", name="Create key").click()
    token = s.page.locator("#new-token").inner_text()
    assert token.startswith("mrk_")
    assert s.page.url.endswith("/settings/api-keys")
    s.page.reload()
    s.page.get_by_role("heading", name="API keys").wait_for()
    assert s.page.locator("#new-token").count() == 0
    rows = s.page.locator("tbody tr", has_text="Phone")
    assert rows.count() == 1
    assert not s.errors


def _open_new_conversation(s):
    s.page.get_by_role("button", name="Chrysa").click()
    panel = s.page.get_by_role("complementary", name="Assistant")
    panel.get_by_role("button", name="New conversation").click()
    expect(panel.locator("#chat-title")).to_have_text("New conversation")
    return panel


def _inside_the_window(s, locator) -> None:
    box = locator.bounding_box()
    height = s.page.viewport_size["height"]
    assert box and box["y"] >= 0 and box["y"] + box["height"] <= height, (box, height)


@pytest.mark.parametrize("width", [1000, 1280])
def test_the_panels_send_button_stays_in_the_window(width, world, browse):
    owner = world.a.principal("owner")
    for i in range(9):  # enough models that the nav wraps at 1000px
        factories.make_tasks_model(owner, key=f"ledger{i}")
    for i in range(40):  # and a page long enough to scroll
        factories.make_record(owner, world.a.model, f"Task {i}")
    s = browse("owner@acme.test", viewport={"width": width, "height": 800})
    s.goto("/models/tasks/records")
    panel = _open_new_conversation(s)
    send = panel.get_by_role("button", name="Send")
    _inside_the_window(s, send)
    _inside_the_window(s, panel.get_by_role("button", name="New conversation"))
    s.shot(f"panel-send-{width}")
    s.page.evaluate("() => window.scrollTo(0, 3000)")
    assert s.page.evaluate("() => window.scrollY") > 0
    _inside_the_window(s, send)
    _inside_the_window(s, panel.get_by_role("button", name="New conversation"))
    assert not s.errors


LONG = "x" * 1000


def test_a_long_unbroken_title_never_widens_the_page(world, browse):
    s = browse("member@acme.test", **NARROW)
    s.goto("/models/tasks/records/new")
    s.page.get_by_label("Title").fill(LONG)
    s.page.get_by_role("button", name="Create").click()
    expect(s.page.locator(".flash")).to_contain_text("created.")
    expect(s.page.locator("h1")).to_contain_text("x" * 300)  # the title, shortened or not
    sizes = _overflow(s)
    assert sizes["page"] <= sizes["window"], sizes
    for part in ("h1", ".flash", "dl.record"):
        assert s.page.locator(part).bounding_box()["width"] <= sizes["window"], part
    s.shot("narrow-long-title-detail")
    s.goto("/models/tasks/records")
    sizes = _overflow(s)
    assert sizes["page"] <= sizes["window"], sizes
    cell = s.page.locator("td", has=s.page.get_by_role("link", name=LONG))
    assert cell.bounding_box()["width"] <= sizes["window"], cell.bounding_box()
    s.shot("narrow-long-title-list")


COUNT_SUBMITS = """() => document.addEventListener('submit', () => {
    window.__submits = (window.__submits || 0) + 1;
})"""


def test_arrow_keys_on_the_org_switcher_do_not_switch_enter_does(world, browse):
    factories.add_member(world.a.users["member"], world.b.org, "member")
    s = browse("member@acme.test")
    s.page.evaluate(COUNT_SUBMITS)
    select = s.page.get_by_label("Organization")
    select.focus()
    s.page.keyboard.press("ArrowDown")
    expect(select).to_have_value(str(world.b.org.id))
    s.page.keyboard.press("ArrowUp")
    s.page.keyboard.press("ArrowDown")
    assert s.page.evaluate("window.__submits") is None
    assert s.page.get_by_text("Switched to").count() == 0
    s.page.keyboard.press("Enter")
    expect(s.page.locator(".flash")).to_have_text("Switched to Globex.")
    expect(s.page.get_by_label("Organization")).to_have_value(str(world.b.org.id))


def test_leaving_the_org_switcher_after_arrowing_keeps_the_current_org(world, browse):
    factories.add_member(world.a.users["member"], world.b.org, "member")
    s = browse("member@acme.test")
    select = s.page.get_by_label("Organization")
    select.focus()
    s.page.keyboard.press("ArrowDown")
    s.page.evaluate(COUNT_SUBMITS)
    s.page.keyboard.press("Tab")
    expect(select).to_have_value(str(world.a.org.id))  # it shows the org you are in
    assert s.page.evaluate("window.__submits") is None
    s.page.reload()
    expect(select).to_have_value(str(world.a.org.id))


def test_choosing_an_org_with_the_mouse_switches_at_once(world, browse):
    factories.add_member(world.a.users["member"], world.b.org, "member")
    s = browse("member@acme.test")
    s.page.get_by_label("Organization").select_option(label="Globex")
    expect(s.page.locator(".flash")).to_have_text("Switched to Globex.")


def test_a_skip_link_is_the_first_stop_and_moves_focus_to_main(world, browse):
    s = browse("member@acme.test")
    s.goto("/models/tasks/records")
    s.page.keyboard.press("Tab")
    skip = s.page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_visible()
    s.page.keyboard.press("Enter")
    expect(s.page.locator("#main")).to_be_focused()
    s.page.keyboard.press("Tab")
    assert s.page.evaluate("document.getElementById('main').contains(document.activeElement)")
