"""A list's or a query's result shows in its card as a table of its first rows (with Open as a
list for a records list) and as a chart when its shape fits, drawn only from the stored result."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from monark.assistant.result_view import SHOWN_ROWS, chart_of, result_table
from tests.llm_script import Call, Say


def test_a_label_and_numbers_chart_as_bars_and_dates_as_a_line():
    bars = chart_of(["status", "n"], [["todo", 3], ["done", 5]])
    assert bars is not None and (bars.kind, bars.label_column, bars.series) == ("bar", 0, [1])
    line = chart_of(["day", "n", "points"], [["2026-11-01", 1, 2.5], ["2026-11-02", 4, 1.0]])
    assert line is not None and (line.kind, line.series) == ("line", [1, 2])


@pytest.mark.parametrize(
    ("columns", "rows"),
    [
        (["status", "n"], [["todo", 3]]),  # one point is no chart
        (["status", "note"], [["todo", "a"], ["done", "b"]]),  # nothing numeric
        (["n", "m"], [[1, 2], [3, 4]]),  # no label column
        (["status", "n"], [["todo", 3], ["done", None]]),  # a gap
        (["status", "n"], [["todo", True], ["done", False]]),  # Yes/No is no number
        (["status", "n"], [["todo", 1], ["done", float("nan")]]),
        (["status", "n"], [[f"s{i}", i] for i in range(51)]),  # too many to read
        (["status", "n"], [["todo", 1], ["done"]]),  # ragged
    ],
)
def test_a_result_not_of_a_chart_shape_gets_only_its_table(columns, rows):
    assert chart_of(columns, rows) is None


def test_a_query_result_shows_its_first_rows_and_how_many_more(app):
    rows = [[f"r{i}", "x"] for i in range(25)]
    with app.test_request_context():
        table = result_table(
            "records_query",
            {"sql": "select"},
            {"columns": ["a", "b"], "rows": rows, "row_count": 40, "truncated": True},
        )
    assert table.columns == ["a", "b"] and len(table.rows) == SHOWN_ROWS
    assert table.total == 40 and table.more == 30 and table.chart is None


def test_a_list_counted_past_its_cap_says_more_than_its_total(app):
    items = [{"id": i, "title": f"t{i}", "values": {"n": i}} for i in range(1, 4)]
    with app.test_request_context():
        table = result_table(
            "records_list",
            {"model": "tasks"},
            {"items": items, "total": 3, "total_is_lower_bound": True},
        )
        html = app.jinja_env.get_template("assistant/card/_table.html").render(
            c={"id": 1, "table": table}
        )
    assert table.total_is_lower_bound and table.chart is None  # not every point is there
    assert "of more than 3." in BeautifulSoup(html, "html.parser").get_text()


def test_a_cut_result_charts_nothing_it_does_not_hold(app):
    rows = [[f"s{i}", i] for i in range(5)]
    with app.test_request_context():
        result = {"columns": ["s", "n"], "rows": rows}
        cut = result_table("records_query", {}, result | {"row_count": 9})
        whole = result_table("records_query", {}, result | {"row_count": 5})
    assert cut.chart is None and whole.chart is not None


@pytest.mark.parametrize(
    "result",
    [None, "text", [], {"columns": "a", "rows": []}, {"columns": [1], "rows": [[1]]}, {"items": 3}],
)
def test_a_result_of_another_shape_gets_no_table(app, result):
    with app.test_request_context():
        assert result_table("records_query", {}, result) is None
        assert result_table("records_list", {"model": "tasks"}, result) is None
        assert result_table("wiki_get", {}, {"columns": ["a"], "rows": [["x"]]}) is None


def card_of(login, fake_anthropic, calls, email="member@acme.test"):
    fake_anthropic.script.add(calls, [Say("Here they are.")])
    browser = login(email)
    response = browser.post("/chat/stream", {"text": "Show me"}, headers={"HX-Request": "true"})
    response.get_data()
    response.close()
    thread = browser.get("/chat/first")
    return BeautifulSoup(thread.get_data(as_text=True), "html.parser")


def test_a_records_list_card_shows_a_table_linking_each_record_and_the_list(
    login, world, fake_anthropic
):
    arguments = {"model": "tasks", "filter": ["status:eq:todo"], "sort": "-created_at"}
    public = world.a.public.title
    soup = card_of(login, fake_anthropic, [Call("records_list", arguments)])
    table = soup.select_one(".result-table")
    assert table is not None
    titles = [a.get_text() for a in table.select("tbody td a")]
    assert public in titles
    # The member's private record is theirs to see; nobody else's is listed.
    link = table.select_one("tbody td a")["href"]
    assert link.startswith("/models/tasks/records/")
    assert table.select_one("figcaption a")["href"] == (
        "/models/tasks/records?filter=status:eq:todo&sort=-created_at"
    )


def test_a_query_card_shows_its_table_and_a_chart_of_it(login, world, fake_anthropic):
    sql = "SELECT title, LENGTH(title) AS n FROM tasks ORDER BY title"
    soup = card_of(login, fake_anthropic, [Call("records_query", {"sql": sql})])
    table = soup.select_one(".result-table")
    assert [th.get_text() for th in table.select("thead th")] == ["title", "n"]
    assert len(table.select("tbody tr")) == 2  # the member's public and private tasks
    chart = table.select_one(".result-chart")
    assert chart is not None and chart["data-chart"] == "bar" and chart["data-series"] == "1"
    assert "the table has the same figures" in chart.select_one("canvas")["aria-label"]


def test_a_chart_asked_for_draws_that_kind(login, world, fake_anthropic):
    sql = "SELECT title, LENGTH(title) AS n FROM tasks ORDER BY title"
    soup = card_of(login, fake_anthropic, [Call("records_query", {"sql": sql, "chart": "line"})])
    assert soup.select_one(".result-chart")["data-chart"] == "line"
    # The model heard it was drawn.
    told = fake_anthropic.requests[1]["messages"][-1]["content"][0]["content"]
    assert '"chart": "line"' in str(told)


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("SELECT title, notes FROM tasks", "no column after the first is a number"),
        ("SELECT LENGTH(title), title FROM tasks", "must be a text or date label"),
        ("SELECT title, 1 FROM tasks LIMIT 1", "at least two rows"),
    ],
)
def test_a_chart_that_cannot_be_drawn_is_a_table_and_the_model_hears_why(
    login, world, fake_anthropic, sql, why
):
    soup = card_of(login, fake_anthropic, [Call("records_query", {"sql": sql, "chart": "bar"})])
    assert soup.select_one(".result-table table") is not None
    assert soup.select_one(".result-chart") is None
    told = str(fake_anthropic.requests[1]["messages"][-1]["content"][0]["content"])
    assert "No chart drawn" in told and why in told
