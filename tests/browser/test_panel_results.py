"""A query's result in the panel: a table and a chart drawn from it by the vendored Chart.js,
under the CSP; a records list's table opens the list with the same filters."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.test_panel import new_conversation, send, wait_turn
from tests.browser.test_usage_page import _csp_watch
from tests.llm_script import Call, Say


def test_a_query_result_renders_as_a_table_and_a_chart(world, browse, fake_anthropic):
    sql = "SELECT title, LENGTH(title) AS n FROM tasks ORDER BY title"
    arguments = {"model": "tasks", "filter": ["status:eq:todo"]}
    fake_anthropic.script.add(
        [Call("records_query", {"sql": sql})], [Call("records_list", arguments)], [Say("Done.")]
    )
    s = browse("member@acme.test")
    violations = _csp_watch(s)
    panel = new_conversation(s)
    send(panel, "Chart the title lengths")
    wait_turn(panel)
    query = panel.locator(".call").filter(has_text="records_query").locator(".result-table")
    expect(query.get_by_role("table")).to_contain_text("title")
    expect(query.locator(".result-chart")).to_have_attribute("data-drawn", "1")
    points = s.page.evaluate(
        "() => window.Chart.getChart(document.querySelector('.result-chart canvas'))"
        ".data.datasets[0].data"
    )
    cells = query.locator("tbody tr td:nth-child(2)").all_text_contents()
    assert points == [int(c) for c in cells] and len(points) == 2
    listed = panel.locator(".call").filter(has_text="records_list").locator(".result-table")
    listed.get_by_role("link", name="Open as a list").click()
    s.page.wait_for_url("**/models/tasks/records?filter=status:eq:todo")
    expect(s.page.locator("#main h1")).to_have_text("Tasks")
    s.shot("result-table-chart")
    assert violations == [] and s.errors == [], (violations, s.errors)
