"""Ids from forms, query strings, URLs and JSON: ASCII digits within the INTEGER range, or a
400 naming the field (a 404 in a URL), never a 500, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select

from monark.automations import services as automations
from monark.automations.models import AutomationRun
from monark.chat.models import ToolCall
from monark.core.errors import ValidationFailed
from monark.core.ids import parse_id
from monark.core.models import MAX_ID
from monark.extensions import db
from monark.wiki import services as wiki
from tests.llm_script import Call, Say

BIG = str(MAX_ID + 1)
# isdigit() is true for "²" (int() refuses it); int() reads "\u0661" (Arabic-Indic 1) as 1.
NOT_IDS = ["²", "\u0661", "-1", "0", "1.0", "1_0", "+1", "0x1", BIG, "9" * 5000]


@pytest.mark.parametrize("raw", NOT_IDS)
def test_parse_id_refuses_anything_but_ascii_digits_in_range(raw):
    with pytest.raises(ValidationFailed) as caught:
        parse_id(raw, "parent_id")
    assert caught.value.details == [
        {"field": "parent_id", "in": "form", "message": f"Give a whole number from 1 to {MAX_ID}."}
    ]


def test_parse_id_reads_ids_and_takes_empty_as_none():
    assert parse_id(" 42 ", "x") == 42
    assert parse_id(str(MAX_ID), "x") == MAX_ID
    assert parse_id("", "x") is None and parse_id(None, "x") is None


def error_text(response) -> str:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser").get_text(" ")


@pytest.fixture
def page(world):
    return wiki.create_page(world.a.principal("owner"), "Handbook")


@pytest.fixture
def automation(world):
    graph = {
        "nodes": [
            {"id": "t", "type": "record.created", "config": {"model": "tasks"}},
            {"id": "u", "type": "update_record", "config": {"values": {"status": "done"}}},
        ],
        "edges": [{"from": "t", "to": "u"}],
    }
    return automations.create_automation(world.a.principal("owner"), "Close", graph, False)


@pytest.mark.parametrize("raw", ["²", BIG])
def test_wiki_forms_name_a_bad_parent_id(world, login, page, raw):
    owner = login("owner@acme.test")
    new = owner.post("/wiki/new", {"title": "Child", "parent_id": raw})
    assert new.status_code == 422
    error = BeautifulSoup(new.get_data(as_text=True), "html.parser").select_one(".has-error .error")
    assert error is not None and f"from 1 to {MAX_ID}" in error.get_text()
    moved = owner.post(f"/wiki/{page.id}/move", {"parent_id": raw}, follow_redirects=True)
    assert moved.status_code == 200 and f"from 1 to {MAX_ID}" in error_text(moved)


@pytest.mark.parametrize("raw", ["²", BIG])
def test_an_automation_test_run_names_a_bad_record_id(world, login, automation, raw):
    owner = login("owner@acme.test")
    response = owner.post(
        f"/automations/{automation.id}/test", {"record_id": raw}, follow_redirects=True
    )
    assert response.status_code == 200
    assert f"from 1 to {MAX_ID}" in error_text(response)
    assert db.session.scalar(select(AutomationRun.id)) is None


@pytest.mark.parametrize("actor", ["user:²", "api_key:²", f"user:{BIG}"])
def test_audit_names_a_bad_actor_id(world, login, actor):
    response = login("owner@acme.test").get(f"/audit?actor={actor}")
    assert response.status_code == 400
    assert "actor" in error_text(response)


@pytest.mark.parametrize("raw", ["²", BIG])
def test_switching_to_a_bad_org_id_is_refused(world, login, raw):
    response = login("owner@acme.test").post("/orgs/switch", {"org_id": raw})
    assert response.status_code == 400
    assert "org_id" in error_text(response)


ARABIC_INDIC = str.maketrans("0123456789", "".join(chr(0x660 + d) for d in range(10)))
FULLWIDTH = str.maketrans("0123456789", "".join(chr(0xFF10 + d) for d in range(10)))


@pytest.mark.parametrize(
    "url",
    [
        "/models/tasks/records/{arabic}",  # Python's \d matches any script's digits
        "/models/tasks/records/{fullwidth}/edit",
        "/wiki/{page_arabic}",
        "/chat/conversations/99999999999",
        "/models/tasks/records/99999999999",
    ],
)
def test_url_ids_are_ascii_digits_in_range_or_not_found(world, login, page, url):
    record_id = str(world.a.public.id)
    url = url.format(
        arabic=record_id.translate(ARABIC_INDIC),
        fullwidth=record_id.translate(FULLWIDTH),
        page_arabic=str(page.id).translate(ARABIC_INDIC),
    )
    owner = login("owner@acme.test")
    assert owner.get(f"/models/tasks/records/{record_id}").status_code == 200
    assert owner.get(url).status_code == 404


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/internal/wiki/pages", {"title": "x", "parent_id": MAX_ID + 1}, "parent_id"),
        ("/internal/wiki/pages/{page}/move", {"parent_id": MAX_ID + 1}, "parent_id"),
        ("/internal/automations/{automation}/test", {"record_id": MAX_ID + 1}, "record_id"),
    ],
)
def test_json_ids_beyond_the_integer_range_are_validation_errors(
    world, login, page, automation, url, body, field
):
    response = login("owner@acme.test").api(
        "POST", url.format(page=page.id, automation=automation.id), json=body
    )
    assert response.status_code == 400
    detail = response.get_json()["error"]["details"][0]
    assert detail["field"] == field and str(MAX_ID) in detail["message"]


def test_api_paths_with_huge_ids_are_named_errors(world, app):
    headers = {"Authorization": f"Bearer {world.a.keys['owner']}"}
    client = app.test_client()
    for method in ("GET", "PATCH", "DELETE"):
        response = client.open(
            f"/api/v1/models/tasks/records/{BIG}", method=method, headers=headers, json={}
        )
        assert response.status_code == 400, method
        assert response.get_json()["error"]["details"][0]["field"] == "record_id"


def test_an_automation_graph_names_a_record_id_beyond_the_integer_range(world):
    owner = world.a.principal("owner")
    graph = {
        "nodes": [
            {"id": "t", "type": "record.created", "config": {"model": "tasks"}},
            {
                "id": "u",
                "type": "update_record",
                "config": {"record_id": MAX_ID + 1, "values": {"status": "done"}},
            },
        ],
        "edges": [{"from": "t", "to": "u"}],
    }
    with pytest.raises(ValidationFailed) as caught:
        automations.create_automation(owner, "Too far", graph, False)
    assert any("record_id" in d["field"] for d in caught.value.details)


def test_an_update_step_whose_record_id_renders_out_of_range_fails_cleanly(world):
    owner = world.a.principal("owner")
    graph = {
        "nodes": [
            {"id": "t", "type": "record.created", "config": {"model": "tasks"}},
            {
                "id": "u",
                "type": "update_record",
                "config": {"record_id": "{{record.id}}99999999999", "values": {"status": "done"}},
            },
        ],
        "edges": [{"from": "t", "to": "u"}],
    }
    automation = automations.create_automation(owner, "Renders too far", graph, False)
    run = automations.run_test(owner, automation.id, world.a.public.id)
    step = next(s for s in run.steps if s["node_id"] == "u")
    assert step["status"] == "failed"
    assert "not a record id" in step["error"]


def test_a_page_context_naming_a_record_beyond_the_integer_range_is_dropped(world, login, scripted):
    """The page context is a hint: an id no row can have is left out, not a database error."""
    scripted.script.add([Say("Noted.")])
    response = login("member@acme.test").post(
        "/chat/stream",
        {"text": "What is this?", "page_model": "tasks", "page_record_id": BIG},
        headers={"HX-Request": "true"},
    )
    response.get_data()
    response.close()
    assert response.status_code == 200
    assert BIG not in scripted.requests[-1].messages[-1].content[0].text


def test_the_assistant_naming_a_record_beyond_the_integer_range_gets_a_named_error(
    world, login, scripted
):
    """The card's preview looks the record up before validation: no row, not a DataError."""
    scripted.script.add(
        [Call("records_delete", {"model": "tasks", "record_id": MAX_ID + 1})], [Say("Sorry.")]
    )
    response = login("owner@acme.test").post(
        "/chat/stream", {"text": "Delete it"}, headers={"HX-Request": "true"}
    )
    body = response.get_data(as_text=True)
    response.close()
    assert "event: error" not in body
    call = db.session.scalar(select(ToolCall))
    assert call.status == "FAILED" and "record_id" in call.error
