"""With no model set up, the panel says so on the conversation list too: admins get a link
to the AI settings, everyone else whom to ask."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from monark.chat.llm.common import UnavailableProvider
from monark.chat.runtime import set_llm_provider

MISSING = "No model provider is set."


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


@pytest.fixture
def no_provider():
    set_llm_provider(UnavailableProvider(MISSING))
    yield
    set_llm_provider(None)


def setup_notice(soup: BeautifulSoup):
    return soup.select_one(".chat-notice-setup")


def test_the_conversation_list_says_no_model_is_set_with_a_link_for_admins(
    login, world, no_provider
):
    notice = setup_notice(soup_of(login("admin@acme.test").get("/chat/conversations")))
    assert notice is not None and MISSING in notice.get_text()
    link = notice.find("a", string="Set up a model in the AI settings")
    assert link["href"] == "/settings/ai"
    # A thread says it the same way.
    thread = setup_notice(soup_of(login("owner@acme.test").get("/chat/new")))
    assert thread.find("a")["href"] == "/settings/ai"


def test_a_member_is_told_to_ask_an_admin(login, world, no_provider):
    for url in ("/chat/conversations", "/chat/new"):
        notice = setup_notice(soup_of(login("member@acme.test").get(url)))
        assert MISSING in notice.get_text()
        assert "Ask an admin to set up a model" in notice.get_text()
        assert notice.find("a") is None


def test_with_a_model_the_list_has_no_notice(login, world):
    assert setup_notice(soup_of(login("admin@acme.test").get("/chat/conversations"))) is None
