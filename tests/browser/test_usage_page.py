"""Settings → Usage in Chromium: every chart drawn by the vendored Chart.js, with no CSP
violation, whether the page is loaded or reached by the app's own navigation."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.test_anthropic_provider import run_read_then_write_turn

KEYS = ("daily", "models", "users", "tools")


def _csp_watch(s) -> list[str]:
    violations: list[str] = []
    s.page.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    return violations


def _all_drawn(s) -> None:
    for key in KEYS:
        expect(s.page.locator(f"#chart-{key}")).to_have_attribute("data-drawn", "1")
    # Drawn by Chart.js itself: each canvas has its chart, with the table's labels.
    labels = s.page.evaluate(
        "() => ['daily','models','users','tools'].map("
        "k => window.Chart.getChart('chart-' + k).data.labels.length)"
    )
    assert labels[0] == 30 and all(n >= 1 for n in labels[1:]), labels


def test_the_usage_page_draws_its_charts_under_the_csp(world, browse, fake_anthropic):
    run_read_then_write_turn(world, fake_anthropic)
    s = browse("admin@acme.test")
    violations = _csp_watch(s)
    s.goto("/settings/usage")
    _all_drawn(s)
    expect(s.page.get_by_role("table", name="By model")).to_contain_text("anthropic")
    s.page.get_by_role("link", name="Last 90 days").click()
    expect(s.page.get_by_role("link", name="Last 90 days")).to_have_attribute(
        "aria-current", "page"
    )
    for key in KEYS:
        expect(s.page.locator(f"#chart-{key}")).to_have_attribute("data-drawn", "1")
    # Reached from Settings by the app's own navigation (htmx), the charts are drawn too.
    s.goto("/settings")
    s.page.get_by_role("link", name="Usage", exact=True).click()
    _all_drawn(s)
    s.shot("usage-page")
    assert violations == [] and s.errors == [], (violations, s.errors)


def test_a_members_profile_draws_their_own_usage(world, browse, fake_anthropic):
    run_read_then_write_turn(world, fake_anthropic)
    s = browse("member@acme.test")
    violations = _csp_watch(s)
    s.goto("/profile")
    for key in ("daily", "models", "tools"):
        expect(s.page.locator(f"#chart-{key}")).to_have_attribute("data-drawn", "1")
    assert s.page.locator("#chart-users").count() == 0
    assert violations == [] and s.errors == [], (violations, s.errors)
