"""A new conversation suggests what to ask about the page it is opened on, naming only what the
person may read, and offers the org's saved prompts, which only admins keep."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select

from monark.assistant.suggestions import GENERAL
from monark.automations.models import AutomationRun
from monark.core.models import Event
from monark.extensions import db
from monark.settings.models import OrgPrompt
from monark.settings.prompts import MAX_PROMPTS
from monark.wiki import services as wiki
from tests.test_automations import make_automation
from tests.test_schedules import scheduled


def offered(browser, route: str, query: str = "") -> list[str]:
    response = browser.get("/chat/new", query_string={"page_route": route, "page_query": query})
    assert response.status_code == 200
    soup = BeautifulSoup(response.get_data(as_text=True), "html.parser")
    return [b["data-suggestion"] for b in soup.select(".chat-suggestion")]


def test_a_list_page_suggests_questions_about_its_records(login, world):
    member = login("member@acme.test")
    assert offered(member, "/models/tasks/records") == [
        "Summarize the tasks",
        "How many of the tasks are overdue?",
        "Which of the tasks changed most recently?",
    ]
    filtered = offered(member, "/models/tasks/records", "?filter=status:eq:todo")
    assert filtered[1] == "How many of these are overdue?"


def test_a_record_page_names_the_record_it_is_about(login, world):
    record = world.a.public
    shown = offered(login("member@acme.test"), f"/models/tasks/records/{record.id}")
    assert shown[0] == "Summarize this record and what changed"
    assert f"What else is related to “{record.title}”?" in shown


def test_a_private_record_is_never_named_to_someone_who_cannot_read_it(login, world):
    private = world.a.private
    route = f"/models/tasks/records/{private.id}"
    assert any(private.title in s for s in offered(login("member@acme.test"), route))
    for email in ("viewer@acme.test", "owner@globex.test"):
        shown = offered(login(email), route)
        assert not any(private.title in s for s in shown), email
        assert shown == list(GENERAL)


def test_a_wiki_page_and_a_failed_run_suggest_their_own_questions(login, world):
    owner = world.a.principal("owner")
    page = wiki.create_page(owner, "Refund policy", body="Refunds within 30 days.")
    assert "What does “Refund policy” leave unanswered?" in offered(
        login("member@acme.test"), f"/wiki/{page.id}"
    )
    automation = make_automation(world.a, scheduled("0 9 * * *"), name="Daily")
    run = AutomationRun(
        org_id=world.a.org.id,
        automation_id=automation.id,
        automation_version=1,
        status="failed",
        trigger_type="schedule",
    )
    db.session.add(run)
    db.session.commit()
    admin = login("admin@acme.test")
    assert offered(admin, f"/automations/{automation.id}/runs/{run.id}")[0] == (
        "Why did this run fail?"
    )
    # Another org's run is not found there: nothing of it is suggested.
    assert offered(login("owner@globex.test"), f"/automations/{automation.id}/runs/{run.id}")[
        0
    ] == ("What can you help me with here?")


@pytest.mark.parametrize(
    "route",
    ["", "/nowhere", "models", "/models/tasks/records/999999999", "/" + "x" * 5000, "/\x00"],
)
def test_any_other_page_suggests_the_general_prompts(login, world, route):
    assert offered(login("member@acme.test"), route) == list(GENERAL)


def test_a_route_that_is_no_text_suggests_the_general_prompts(login, world):
    response = login("member@acme.test").get("/chat/new?page_route=/%ED%A0%80%FF&page_query=%FF")
    assert response.status_code == 200
    assert "What can you help me with here?" in response.get_data(as_text=True)


def test_suggestions_follow_the_page_through_their_own_endpoint(login, world):
    response = login("member@acme.test").get(
        "/chat/suggestions", query_string={"page_route": "/models/tasks/records"}
    )
    soup = BeautifulSoup(response.get_data(as_text=True), "html.parser")
    assert soup.select_one("#chat-suggestions .chat-suggestion")["data-suggestion"] == (
        "Summarize the tasks"
    )


def test_an_admin_saves_prompts_every_member_is_offered(login, world):
    admin = login("admin@acme.test")
    response = admin.post("/settings/ai/prompts", {"text": "  Which deals\nclose this month? "})
    assert response.status_code == 303
    saved = db.session.scalars(select(OrgPrompt)).all()
    assert [p.text for p in saved] == ["Which deals close this month?"]
    assert "Which deals close this month?" in offered(login("member@acme.test"), "/models")
    # Not in another org.
    assert "Which deals close this month?" not in offered(login("owner@globex.test"), "/models")
    events = db.session.scalars(select(Event).where(Event.type == "settings.prompt.added")).all()
    assert [e.subject_id for e in events] == [saved[0].id]
    page = admin.get("/settings/ai").get_data(as_text=True)
    assert "Which deals close this month?" in page
    assert admin.post(f"/settings/ai/prompts/{saved[0].id}/delete").status_code == 303
    assert db.session.scalars(select(OrgPrompt)).all() == []


def test_only_admins_keep_the_prompts(login, world):
    member = login("member@acme.test")
    assert member.post("/settings/ai/prompts", {"text": "Sneaky"}).status_code == 403
    admin = login("admin@acme.test")
    admin.post("/settings/ai/prompts", {"text": "Kept"})
    prompt = db.session.scalar(select(OrgPrompt))
    assert member.post(f"/settings/ai/prompts/{prompt.id}/delete").status_code == 403
    elsewhere = login("owner@globex.test")
    assert elsewhere.post(f"/settings/ai/prompts/{prompt.id}/delete").status_code == 404
    assert db.session.scalar(select(OrgPrompt)) is not None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "Write the prompt."),
        ("   \n\t ", "Write the prompt."),
        ("x" * 501, "500 characters at most"),
        ("evil \u202egnp.exe", "bidirectional"),
    ],
)
def test_a_bad_prompt_is_refused_naming_the_field(login, world, text, says):
    response = login("admin@acme.test").post("/settings/ai/prompts", {"text": text})
    assert response.status_code == 422
    soup = BeautifulSoup(response.get_data(as_text=True), "html.parser")
    error = soup.select_one("#prompt-text-error")
    assert error is not None and says in error.get_text()
    assert soup.select_one("#prompt-text")["aria-invalid"] == "true"
    assert db.session.scalars(select(OrgPrompt)).all() == []


def test_an_org_keeps_a_bounded_library(login, world):
    admin = login("admin@acme.test")
    for n in range(MAX_PROMPTS):
        assert admin.post("/settings/ai/prompts", {"text": f"Prompt {n}"}).status_code == 303
    response = admin.post("/settings/ai/prompts", {"text": "One too many"})
    assert response.status_code == 422
    assert "remove one first" in response.get_data(as_text=True)
    assert len(db.session.scalars(select(OrgPrompt)).all()) == MAX_PROMPTS
