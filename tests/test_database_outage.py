"""While the database does not answer, Monark answers its own 503, with ``Retry-After``:
the error page for pages, the API's JSON error, a notice with Retry in the panel; nothing is
half-written, and a Confirm retried once it is back runs its write exactly once.

The database really goes away (``tests/outage.py``): a second app reaches the test database
through a path the test cuts, so the driver fails as it would in an outage."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from bs4 import BeautifulSoup
from flask import Flask
from sqlalchemy import func, select

from monark.chat.models import Message, ToolCall
from monark.chat.runtime import set_llm_provider
from monark.extensions import db
from monark.records.models import Record
from tests.conftest import Browser
from tests.llm_script import Call, Say, ScriptedProvider
from tests.outage import DatabaseSwitch, app_on_switchable_database

UNAVAILABLE = "cannot reach its database"
PANEL = {"HX-Request": "true", "HX-Target": "div#chat-live"}


@pytest.fixture
def outage(app: Flask) -> Iterator[tuple[Flask, DatabaseSwitch]]:
    """An app on the test database by a path the test can cut (``switch.down()``)."""
    with app_on_switchable_database() as (cut, switch):
        yield cut, switch


def _signed_in(cut: Flask, email: str) -> Browser:
    return Browser(cut.test_client()).login(email)


def test_pages_answer_monarks_503_page_with_retry_after(world, outage):
    cut, switch = outage
    member = _signed_in(cut, "member@acme.test")
    switch.down()
    page = member.get("/models/tasks/records?q=plan")
    assert page.status_code == 503
    assert page.headers["Retry-After"].isdigit()
    soup = BeautifulSoup(page.get_data(as_text=True), "html.parser")
    assert UNAVAILABLE in soup.select_one("main").get_text()
    assert soup.find("a", string="Retry")["href"] == "/models/tasks/records?q=plan"
    # A boosted navigation gets the same page, with a Retry that sends it again.
    boosted = member.get("/models", headers={"HX-Request": "true", "HX-Boosted": "true"})
    assert boosted.status_code == 503
    assert BeautifulSoup(boosted.get_data(as_text=True), "html.parser").select("button[data-retry]")


def test_other_errors_still_answer_while_the_database_is_down(world, outage):
    """Their page draws who is signed in; with the database down it is drawn signed out."""
    cut, switch = outage
    member = _signed_in(cut, "member@acme.test")
    switch.down()
    expired = member.client.post("/models/tasks/records/new", data={"v_title": "x"})
    assert expired.status_code == 400 and "CSRF" in expired.get_data(as_text=True)
    missing = member.get("/no/such/page")
    assert missing.status_code == 404


def test_the_api_answers_its_json_error_with_503(world, outage):
    cut, switch = outage
    switch.down()
    answer = cut.test_client().get(
        "/api/v1/models", headers={"Authorization": f"Bearer {world.a.keys['member']}"}
    )
    assert answer.status_code == 503
    assert answer.headers["Retry-After"].isdigit()
    error = answer.get_json()["error"]
    assert error["code"] == "unavailable" and UNAVAILABLE in error["message"]


def _frames_done(response) -> dict:
    response.get_data()
    response.close()
    body = response.get_data(as_text=True)
    last = [b for b in body.split("\n\n") if b.startswith("event: done")][-1]
    return json.loads(last.split("data: ", 1)[1])


def test_a_confirm_while_the_database_is_down_says_so_and_runs_once_when_it_is_back(world, outage):
    cut, switch = outage
    scripted = ScriptedProvider()
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Through the outage"}})],
        [Say("Created it.")],
    )
    set_llm_provider(scripted, app=cut)
    member = _signed_in(cut, "member@acme.test")
    proposed = member.post("/chat/stream", {"text": "Add it"}, headers=PANEL)
    assert _frames_done(proposed)["status"] == "awaiting_confirmation"
    db.session.rollback()
    call_id = db.session.scalar(select(ToolCall.id))

    switch.down()
    refused = member.post("/chat/decide", {"decision": f"confirm:{call_id}"}, headers=PANEL)
    assert refused.status_code == 503 and refused.headers["Retry-After"].isdigit()
    notice = BeautifulSoup(refused.get_data(as_text=True), "html.parser")
    assert UNAVAILABLE in notice.get_text()
    assert [b.get_text() for b in notice.select("button[data-retry]")] == ["Retry"]
    assert notice.find("html") is None  # a notice for the panel, not a page

    switch.up()
    db.session.rollback()
    assert db.session.scalar(select(ToolCall.status).where(ToolCall.id == call_id)) == "PROPOSED"
    assert (
        db.session.scalar(select(func.count(Record.id)).where(Record.title == "Through the outage"))
        == 0
    )
    retried = member.post("/chat/decide", {"decision": f"confirm:{call_id}"}, headers=PANEL)
    assert retried.mimetype == "text/event-stream"
    assert _frames_done(retried)["status"] == "done"
    db.session.rollback()
    assert db.session.scalar(select(ToolCall.status).where(ToolCall.id == call_id)) == "SUCCEEDED"
    titled = select(func.count(Record.id)).where(Record.title == "Through the outage")
    assert db.session.scalar(titled) == 1


def test_a_send_while_the_database_is_down_says_so_in_the_panel_and_stores_nothing(world, outage):
    cut, switch = outage
    set_llm_provider(ScriptedProvider(), app=cut)  # never reached
    member = _signed_in(cut, "member@acme.test")
    switch.down()
    refused = member.post("/chat/stream", {"text": "Anyone there?"}, headers=PANEL)
    assert refused.status_code == 503 and refused.mimetype == "text/html"
    notice = BeautifulSoup(refused.get_data(as_text=True), "html.parser")
    assert UNAVAILABLE in notice.get_text() and notice.select("button[data-retry]")
    switch.up()
    db.session.rollback()
    assert db.session.scalar(select(func.count(Message.id))) == 0


def test_a_stream_that_loses_the_database_ends_with_a_notice_and_a_retry(world, outage):
    cut, switch = outage
    scripted = ScriptedProvider()
    scripted.script.add([Say("Hello.")])
    set_llm_provider(scripted, app=cut)
    member = _signed_in(cut, "member@acme.test")
    sent = member.post("/chat/stream", {"text": "Hi"}, headers=PANEL)
    conversation_id = _frames_done(sent)["conversation_id"]
    # The stream's headers are out (its view read the conversation); then the database goes.
    follow = member.get(f"/chat/conversations/{conversation_id}/follow")
    assert follow.status_code == 200 and follow.mimetype == "text/event-stream"
    switch.down()
    done = _frames_done(follow)
    assert done == {"conversation_id": conversation_id, "status": "error"}
    frames = [
        "\n".join(line[6:] for line in block.split("\n") if line.startswith("data: "))
        for block in follow.get_data(as_text=True).split("\n\n")
    ]
    [live] = [f for f in frames if 'hx-target="#chat-live"' in f and UNAVAILABLE in f]
    notice = BeautifulSoup(live, "html.parser")
    retry = notice.find("button", string="Retry")
    assert retry["hx-get"] == f"/chat/conversations/{conversation_id}"


# ---- only an outage is an outage (a bug is a 500) -----------------------------------------


def test_a_sql_bug_answers_500_with_its_traceback_logged_and_an_outage_still_503(world, caplog):
    """SQLite reports SQL that cannot run (a table that does not exist) as the same
    ``OperationalError`` as a database it cannot open: only the second is an outage."""
    from sqlalchemy import text

    with app_on_switchable_database(PROPAGATE_EXCEPTIONS=False) as (cut, switch):

        def buggy() -> str:
            db.session.execute(text("SELECT id FROM no_such_table")).all()
            return "unreachable"

        cut.add_url_rule("/buggy", "buggy", buggy)
        client = cut.test_client()
        caplog.clear()
        bug = client.get("/buggy")
        assert bug.status_code == 500 and "Retry-After" not in bug.headers
        assert UNAVAILABLE not in bug.get_data(as_text=True)
        [logged] = [r for r in caplog.records if r.levelname == "ERROR"]
        assert logged.exc_info and "no_such_table" in str(logged.exc_info[1])

        caplog.clear()
        switch.down()
        down = client.get("/buggy")
        assert down.status_code == 503 and down.headers["Retry-After"].isdigit()
        assert UNAVAILABLE in down.get_data(as_text=True)
        assert [r.levelname for r in caplog.records] == ["WARNING"]
