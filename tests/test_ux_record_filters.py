"""A refused filter of the records toolbar is named beside the row and control at fault, and
a date field's value box says the form it takes."""

from __future__ import annotations

from bs4 import BeautifulSoup

LIST = "/models/tasks/records"


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def rows_of(soup: BeautifulSoup):
    return soup.select(".records-toolbar .filters > .filter-row")


def test_a_bad_date_is_named_beside_its_value_box(login, world):
    browser = login("member@acme.test")
    response = browser.get(
        LIST,
        query_string={"ff": ["status", "due"], "fo": ["eq", "lt"], "fv": ["todo", "2026-W52-1"]},
    )
    soup = soup_of(response)
    first, second = rows_of(soup)[:2]
    assert first.select_one(".error") is None
    error = second.select_one(".filter-row-error")
    assert error.get_text(strip=True) == (
        "'2026-W52-1' is not a valid date for Due (use YYYY-MM-DD or today)."
    )
    value = second.select_one("[name=fv]")
    assert value["aria-invalid"] == "true" and value["aria-describedby"] == error["id"]
    assert not second.select_one("[name=ff]").has_attr("aria-invalid")
    assert value["placeholder"] == "YYYY-MM-DD"
    assert first.select_one("[name=fv]")["placeholder"] == "value"
    # Still announced, and named for the script that places it after an htmx answer.
    alert = soup.select_one("#filter-error")
    assert alert["role"] == "alert" and "visually-hidden" in alert["class"]
    assert (alert["data-row"], alert["data-part"]) == ("1", "value")


def test_an_operator_the_field_cannot_take_is_named_beside_the_operator(login, world):
    browser = login("member@acme.test")
    soup = soup_of(browser.get(LIST, query_string={"ff": "urgent", "fo": "lt", "fv": "true"}))
    row = rows_of(soup)[0]
    assert row.select_one("[name=fo]")["aria-invalid"] == "true"
    assert "cannot be filtered with 'lt'" in row.select_one(".filter-row-error").get_text()


def test_a_value_without_a_field_is_named_beside_the_field(login, world):
    browser = login("member@acme.test")
    soup = soup_of(browser.get(LIST, query_string={"ff": "", "fo": "eq", "fv": "todo"}))
    row = rows_of(soup)[0]
    assert row.select_one("[name=ff]")["aria-invalid"] == "true"
    assert row.select_one(".filter-row-error").get_text(strip=True) == "Choose a field."


def test_the_htmx_answer_names_the_row_for_the_toolbar_it_leaves_in_place(login, world):
    browser = login("member@acme.test")
    response = browser.get(
        LIST,
        query_string={"ff": ["due"], "fo": ["gt"], "fv": ["soon"]},
        headers={"HX-Request": "true", "HX-Target": "records-table"},
    )
    alert = soup_of(response).select_one("#filter-error")
    assert (alert["data-row"], alert["data-part"]) == ("0", "value")
    assert "not a valid date for Due" in alert["data-message"]


def test_an_empty_list_of_filters_shows_date_placeholders_for_a_date_field(login, world):
    soup = soup_of(login("member@acme.test").get(LIST, query_string={"filter": "due:lt:today"}))
    assert rows_of(soup)[0].select_one("[name=fv]")["placeholder"] == "YYYY-MM-DD"
    options = rows_of(soup)[0].select("[name=ff] option[data-type=date]")
    assert [o["value"] for o in options] == ["due"]
