"""Saves that change the header, nav or assistant panel make htmx load the whole page.

Boosted forms swap only ``#main``; after these saves the nav (model names), the org and
assistant names and the assistant's switches would go stale. htmx requests get
``HX-Redirect`` (a full page load), anything else the usual 303; the flash survives either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from bs4 import BeautifulSoup

from monark.core.htmx import redirect_full

BOOSTED = {"HX-Request": "true", "HX-Boosted": "true", "HX-Current-URL": "http://localhost/"}


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


@dataclass(frozen=True)
class Save:
    url: str
    data: dict
    target: str
    flash: str
    # What the header or panel shows after the save, checked on the reloaded page.
    check: Callable[[BeautifulSoup], bool]


def _nav(soup: BeautifulSoup) -> list[str]:
    return [a.get_text(strip=True) for a in soup.select("header nav a")]


SAVES = {
    "model create": Save(
        "/models/new",
        {"key": "projects", "name": "Projects"},
        "/models/projects/settings",
        "Model Projects created. Add its fields below.",
        lambda soup: "Projects" in _nav(soup),
    ),
    "model rename": Save(
        "/models/tasks/settings",
        {"name": "Chores", "description": ""},
        "/models/tasks/settings",
        "Model saved.",
        lambda soup: "Chores" in _nav(soup) and "Tasks" not in _nav(soup),
    ),
    "model delete": Save(
        "/models/tasks/delete",
        {"confirm_key": "tasks"},
        "/models",
        "Model Tasks and its records deleted.",
        lambda soup: "Tasks" not in _nav(soup),
    ),
    "org settings": Save(
        "/settings",
        {
            "name": "Acme Corp",
            "chat_enabled": "on",
            "ai_agent_enabled": "on",
            "branding_enabled": "on",
            "assistant_name": "Ada Bot",
        },
        "/settings",
        "Settings saved.",
        lambda soup: soup.select_one("#assistant-toggle").get_text(strip=True) == "Ada Bot",
    ),
    "profile": Save(
        "/profile",
        {},  # the box unticked: the user's assistant off
        "/profile",
        "Profile saved.",
        lambda soup: soup.select_one("#assistant-toggle").has_attr("data-gate-off"),
    ),
}


@pytest.mark.parametrize("name", SAVES)
def test_an_htmx_save_asks_for_a_full_page_load(name, login, world):
    save = SAVES[name]
    browser = login("owner@acme.test")
    response = browser.post(save.url, save.data, headers=BOOSTED)
    assert response.status_code == 204, response.get_data(as_text=True)[:500]
    assert response.headers["HX-Redirect"] == save.target
    assert "Location" not in response.headers
    assert response.get_data() == b""
    page = soup_of(browser.get(save.target))
    assert [p.get_text(strip=True) for p in page.select(".flashes .flash")] == [save.flash]
    assert save.check(page)


@pytest.mark.parametrize("name", SAVES)
def test_without_htmx_the_save_redirects_as_before(name, login, world):
    save = SAVES[name]
    browser = login("owner@acme.test")
    response = browser.post(save.url, save.data)
    assert response.status_code == 303
    assert response.headers["Location"] == save.target
    assert "HX-Redirect" not in response.headers
    page = soup_of(browser.get(save.target))
    assert [p.get_text(strip=True) for p in page.select(".flashes .flash")] == [save.flash]


def test_a_failed_save_is_still_swapped_in_place(login, world):
    browser = login("owner@acme.test")
    response = browser.post("/models/new", {"key": "Bad Key", "name": ""}, headers=BOOSTED)
    assert response.status_code == 422
    assert "HX-Redirect" not in response.headers


def test_redirect_full(app):
    with app.test_request_context(headers={"HX-Request": "true"}):
        response = redirect_full("/somewhere")
        assert (response.status_code, response.headers["HX-Redirect"]) == (204, "/somewhere")
    with app.test_request_context():
        response = redirect_full("/somewhere")
        assert (response.status_code, response.headers["Location"]) == (303, "/somewhere")
