"""Input validation through the API and the web form: every error names its field and
nothing is written (no record, no event) when a request fails."""

from __future__ import annotations

import json

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.core.models import Event
from monark.extensions import db
from monark.records.models import Record

RECORDS = "/api/v1/models/tasks/records"
NEW_FORM = "/models/tasks/records/new"


# ---- helpers --------------------------------------------------------------------------


def committed_counts() -> tuple[int, int]:
    """Records and events as committed, read on a connection of its own."""
    with db.engine.connect() as conn:
        records = conn.scalar(select(func.count()).select_from(Record))
        events = conn.scalar(select(func.count()).select_from(Event))
    return records, events


def committed_values(record_id: int) -> dict:
    with db.engine.connect() as conn:
        return conn.scalar(select(Record.values).where(Record.id == record_id))


@pytest.fixture
def member_api(app, world):
    """Call /api/v1 with the Acme member's key."""
    client = app.test_client()
    key = world.a.keys["member"]

    def call(method: str, url: str, **kw):
        headers = {"Authorization": f"Bearer {key}", **kw.pop("headers", {})}
        return client.open(url, method=method, headers=headers, **kw)

    return call


def error_fields(response) -> list[str]:
    body = response.get_json()
    assert set(body) == {"error"}, body
    assert {"code", "message", "details"} <= set(body["error"]), body
    return [d["field"] for d in body["error"]["details"]]


def assert_rejected(
    response, field: str, where: str, status: int = 400, code: str = "validation_error"
):
    """The answer is an error whose details name ``field`` in part ``where`` of the request."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.get_json()["error"]["code"] == code
    fields = error_fields(response)
    assert field in fields, fields
    for detail in response.get_json()["error"]["details"]:
        assert set(detail) == {"field", "in", "message"}, detail
        assert detail["message"]
        if detail["field"] == field:
            assert detail["in"] == where, detail


# ---- API: creating records --------------------------------------------------------------

BAD_CREATE_VALUES = [
    pytest.param({"title": "x", "nope": 1}, "values.nope", id="unknown-field"),
    pytest.param({"status": "todo"}, "values.title", id="missing-required"),
    pytest.param({"title": ""}, "values.title", id="required-empty"),
    pytest.param({"title": "   "}, "values.title", id="required-blank"),
    pytest.param({"title": None}, "values.title", id="required-null"),
    pytest.param({"title": 42}, "values.title", id="text-number"),
    pytest.param({"title": ["a"]}, "values.title", id="text-list"),
    pytest.param({"title": "two\nlines"}, "values.title", id="text-newline"),
    pytest.param({"title": "x" * 1001}, "values.title", id="text-too-long"),
    pytest.param({"title": "x", "notes": 5}, "values.notes", id="long-text-number"),
    pytest.param({"title": "x", "notes": "a" * 20001}, "values.notes", id="long-text-too-long"),
    pytest.param({"title": "x", "points": "5"}, "values.points", id="number-string"),
    pytest.param({"title": "x", "points": "NaN"}, "values.points", id="number-nan-string"),
    pytest.param({"title": "x", "points": True}, "values.points", id="number-bool"),
    pytest.param({"title": "x", "points": [1]}, "values.points", id="number-list"),
    pytest.param({"title": "x", "due": "2024-02-30"}, "values.due", id="date-impossible"),
    pytest.param({"title": "x", "due": "2024-1-5"}, "values.due", id="date-unpadded"),
    pytest.param({"title": "x", "due": "2024-01-05T10:00:00"}, "values.due", id="date-datetime"),
    pytest.param({"title": "x", "due": "05/01/2024"}, "values.due", id="date-format"),
    pytest.param({"title": "x", "due": 20240105}, "values.due", id="date-number"),
    pytest.param({"title": "x", "due": "2026-W52-1"}, "values.due", id="date-iso-week"),
    pytest.param({"title": "x", "due": "2026W521"}, "values.due", id="date-iso-week-compact"),
    pytest.param({"title": "x", "due": "2026-001"}, "values.due", id="date-ordinal"),
    pytest.param({"title": "x", "due": "20260105"}, "values.due", id="date-compact"),
    pytest.param(
        {"title": "x", "due": "\u0662\u0660\u0662\u0666-\u0660\u0661-\u0660\u0665"},
        "values.due",
        id="date-arabic-indic-digits",
    ),
    pytest.param({"title": "x", "due": "today"}, "values.due", id="date-today-is-a-filter-word"),
    pytest.param({"title": "x", "urgent": "true"}, "values.urgent", id="boolean-string"),
    pytest.param({"title": "x", "urgent": 1}, "values.urgent", id="boolean-int"),
    pytest.param({"title": "x", "status": "blocked"}, "values.status", id="select-unknown"),
    pytest.param({"title": "x", "status": "TODO"}, "values.status", id="select-case"),
    pytest.param({"title": "x", "status": 1}, "values.status", id="select-number"),
    pytest.param({"title": "x", "assignee": "abc"}, "values.assignee", id="user-string"),
    pytest.param({"title": "x", "assignee": True}, "values.assignee", id="user-bool"),
    pytest.param({"title": "x", "assignee": 1.5}, "values.assignee", id="user-float"),
    pytest.param({"title": "x", "assignee": 987654}, "values.assignee", id="user-unknown"),
]


def test_api_create_rejects_bad_values_and_writes_nothing(member_api, subtests):
    for case in BAD_CREATE_VALUES:
        values, field = case.values
        with subtests.test(case.id):
            before = committed_counts()
            response = member_api("POST", RECORDS, json={"values": values})
            assert_rejected(response, field, "body")
            assert committed_counts() == before


def test_api_create_rejects_a_user_of_another_org(member_api, world):
    before = committed_counts()
    outsider = world.b.users["member"].id
    response = member_api("POST", RECORDS, json={"values": {"title": "x", "assignee": outsider}})
    assert_rejected(response, "values.assignee", "body")
    assert "member of this organization" in response.get_json()["error"]["details"][0]["message"]
    assert committed_counts() == before


def test_api_create_reports_every_bad_field_at_once(member_api):
    before = committed_counts()
    values = {"points": "x", "due": "soon", "status": "nope", "extra": 1}
    response = member_api("POST", RECORDS, json={"values": values})
    assert response.status_code == 400
    assert sorted(error_fields(response)) == [
        "values.due",
        "values.extra",
        "values.points",
        "values.status",
        "values.title",
    ]
    assert {d["in"] for d in response.get_json()["error"]["details"]} == {"body"}
    assert committed_counts() == before


NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999"]


def test_api_create_rejects_non_finite_numbers(member_api, subtests):
    for literal in NON_FINITE:
        with subtests.test(literal):
            before = committed_counts()
            raw = '{"values": {"title": "x", "points": ' + literal + "}}"
            response = member_api("POST", RECORDS, data=raw, content_type="application/json")
            assert_rejected(response, "values.points", "body")
            assert "finite" in response.get_json()["error"]["details"][0]["message"]
            assert committed_counts() == before


@pytest.mark.parametrize("literal", ["9999999999999999999999", "1e308", "-1e16"])
def test_api_create_rejects_numbers_beyond_exact_range(member_api, literal):
    before = committed_counts()
    raw = '{"values": {"title": "x", "points": ' + literal + "}}"
    response = member_api("POST", RECORDS, data=raw, content_type="application/json")
    assert_rejected(response, "values.points", "body")
    assert "between -10^15 and 10^15" in response.get_json()["error"]["details"][0]["message"]
    assert committed_counts() == before


@pytest.mark.parametrize("typed", ["1_000", "1e308"])
def test_the_form_refuses_numbers_people_do_not_mean(login, world, typed):
    response = login("member@acme.test").post(
        "/models/tasks/records/new", {"v_title": "Odd number", "v_points": typed}
    )
    assert response.status_code == 422
    assert "Points must be" in response.get_data(as_text=True)


BAD_BODIES = [
    pytest.param({}, "values", id="no-values"),
    pytest.param({"title": "x"}, "title", id="values-not-wrapped"),
    pytest.param({"values": ["x"]}, "values", id="values-list"),
    pytest.param({"values": {"title": "x"}, "visibility": "secret"}, "visibility", id="vis"),
    pytest.param({"values": {"title": "x"}, "colour": "red"}, "colour", id="extra-key"),
    pytest.param([{"values": {"title": "x"}}], "body", id="top-level-array"),
]


def test_api_create_rejects_bad_body_shapes(member_api, subtests):
    for case in BAD_BODIES:
        body, field = case.values
        with subtests.test(case.id):
            before = committed_counts()
            response = member_api("POST", RECORDS, json=body)
            assert_rejected(response, field, "body")
            assert all(d["in"] == "body" for d in response.get_json()["error"]["details"])
            assert committed_counts() == before


def test_api_create_with_an_empty_body_names_the_missing_values(member_api):
    before = committed_counts()
    response = member_api("POST", RECORDS)
    assert_rejected(response, "values", "body")
    assert committed_counts() == before


MALFORMED = ['{"values": {"title": "x"', "{values: {}}", " ", "nul", '{"values": {}}}']


def test_api_malformed_json_is_a_body_error(member_api, subtests):
    for raw in MALFORMED:
        with subtests.test(raw):
            before = committed_counts()
            response = member_api(
                "POST", RECORDS, data=raw, content_type="application/json; charset=utf-8"
            )
            assert_rejected(response, "body", "body")
            assert response.get_json()["error"]["message"] == "The request body is not valid JSON."
            assert committed_counts() == before


NOT_JSON = [
    ("values=x", "application/x-www-form-urlencoded"),
    ('{"values": {"title": "x"}}', "text/plain"),
    ('{"values": {"title": "x"}}', "multipart/form-data; boundary=zzz"),
]


def test_api_rejects_bodies_that_are_not_json(member_api, subtests):
    for data, content_type in NOT_JSON:
        with subtests.test(content_type):
            before = committed_counts()
            response = member_api("POST", RECORDS, data=data, content_type=content_type)
            assert_rejected(response, "body", "body")
            assert "application/json" in response.get_json()["error"]["message"]
            assert committed_counts() == before


def test_api_rejects_an_oversized_body_with_413(app, member_api):
    limit = app.config["MAX_CONTENT_LENGTH"]
    assert limit == 1024 * 1024
    before = committed_counts()
    body = {"values": {"title": "big", "notes": "a" * (limit + 10)}}
    response = member_api("POST", RECORDS, json=body)
    assert_rejected(response, "body", "body", status=413, code="payload_too_large")
    assert str(limit) in response.get_json()["error"]["message"]
    assert committed_counts() == before


# ---- API: query parameters --------------------------------------------------------------


BAD_QUERIES = [
    ("limit=0", "limit"),
    ("limit=101", "limit"),
    ("limit=-5", "limit"),
    ("limit=ten", "limit"),
    ("cursor=abc", "cursor"),
    ("cursor=" + "9" * 41, "cursor"),
    ("filter=status", "filter"),
    ("filter=:done", "filter"),
    ("filter=colour:red", "filter"),
    ("filter=points:many", "filter"),
    ("filter=urgent:maybe", "filter"),
    ("filter=assignee:bob", "filter"),
    ("q=" + "x" * 201, "q"),
    ("colour=red", "colour"),
]


def test_api_list_rejects_invalid_query_params(member_api, subtests):
    for query, field in BAD_QUERIES:
        with subtests.test(query[:30]):
            before = committed_counts()
            response = member_api("GET", f"{RECORDS}?{query}")
            assert_rejected(response, field, "query")
            assert committed_counts() == before


def test_api_query_errors_say_they_are_in_the_query(member_api):
    response = member_api("GET", f"{RECORDS}?limit=0")
    assert response.get_json()["error"]["details"] == [
        {
            "field": "limit",
            "in": "query",
            "message": response.get_json()["error"]["details"][0]["message"],
        }
    ]


def test_api_list_accepts_the_limit_bounds_and_pages(member_api, world):
    for i in range(3):
        response = member_api("POST", RECORDS, json={"values": {"title": f"Page {i}"}})
        assert response.status_code == 201
    assert member_api("GET", f"{RECORDS}?limit=100").status_code == 200
    first = member_api("GET", f"{RECORDS}?limit=1&q=page").get_json()
    assert [r["title"] for r in first["items"]] == ["Page 2"]
    assert first["next_cursor"]
    second = member_api("GET", f"{RECORDS}?limit=1&q=page&cursor={first['next_cursor']}")
    assert [r["title"] for r in second.get_json()["items"]] == ["Page 1"]


def test_api_bad_path_param_names_it(member_api):
    response = member_api("GET", f"{RECORDS}/0")
    assert_rejected(response, "record_id", "path")
    assert response.get_json()["error"]["details"][0]["in"] == "path"


# ---- API: PATCH semantics -----------------------------------------------------------------


@pytest.fixture
def task(member_api, world):
    """A record made by the member through the API, with most fields set."""
    values = {
        "title": "Write the report",
        "status": "doing",
        "points": 3,
        "due": "2030-01-31",
        "urgent": True,
        "assignee": world.a.users["member"].id,
        "notes": "First draft",
    }
    response = member_api("POST", RECORDS, json={"values": values})
    assert response.status_code == 201, response.get_data(as_text=True)
    return response.get_json()


def _events_of(record_id: int) -> list[Event]:
    stmt = select(Event).where(Event.subject_type == "record", Event.subject_id == record_id)
    return list(db.session.scalars(stmt.order_by(Event.id)))


def test_patch_changes_only_the_given_fields(member_api, task):
    url = f"{RECORDS}/{task['id']}"
    response = member_api("PATCH", url, json={"values": {"points": 8}})
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    assert body["changed_fields"] == ["points"]
    assert body["values"] == {**task["values"], "points": 8}
    assert member_api("GET", url).get_json()["values"] == {**task["values"], "points": 8}
    events = _events_of(task["id"])
    assert [e.type for e in events] == ["record.created", "record.updated"]
    assert events[-1].payload == {"model_id": events[-1].payload["model_id"], "fields": ["points"]}
    assert events[-1].actor_kind == "api_key"


def test_patch_null_or_empty_clears_non_required_fields(member_api, task):
    url = f"{RECORDS}/{task['id']}"
    response = member_api(
        "PATCH", url, json={"values": {"status": None, "notes": "", "urgent": None}}
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.get_json()["changed_fields"] == ["notes", "status", "urgent"]
    stored = member_api("GET", url).get_json()["values"]
    expected = {k: v for k, v in task["values"].items() if k not in ("status", "notes", "urgent")}
    assert stored == expected
    assert committed_values(task["id"]) == expected


def test_patch_visibility_alone_keeps_values(app, world, task):
    # An admin key: a key has no user, so it is no record's creator, and only creators and
    # roles with records.view_private change a record's visibility.
    url = f"{RECORDS}/{task['id']}"
    admin_key = {"Authorization": f"Bearer {world.a.keys['admin']}"}
    response = app.test_client().patch(
        url, json={"values": {}, "visibility": "private"}, headers=admin_key
    )
    assert response.status_code == 200
    assert response.get_json()["changed_fields"] == ["visibility"]
    assert response.get_json()["values"] == task["values"]


BAD_PATCHES = [
    pytest.param({"title": None}, "values.title", id="null-required"),
    pytest.param({"title": ""}, "values.title", id="empty-required"),
    pytest.param({"points": 9, "due": "someday"}, "values.due", id="valid-with-invalid"),
    pytest.param({"status": "done", "nope": 1}, "values.nope", id="unknown-field"),
    pytest.param({"urgent": "no"}, "values.urgent", id="wrong-type"),
]


def test_patch_errors_write_nothing(member_api, task, subtests):
    url = f"{RECORDS}/{task['id']}"
    for case in BAD_PATCHES:
        values, field = case.values
        with subtests.test(case.id):
            before = committed_counts()
            response = member_api("PATCH", url, json={"values": values})
            assert_rejected(response, field, "body")
            assert committed_counts() == before
            assert committed_values(task["id"]) == task["values"]


def test_patch_with_bad_body_shapes(member_api, task):
    url = f"{RECORDS}/{task['id']}"
    before = committed_counts()
    assert_rejected(member_api("PATCH", url, json={"title": "x"}), "values", "body")
    assert_rejected(
        member_api("PATCH", url, json={"values": {}, "visibility": "all"}), "visibility", "body"
    )
    assert_rejected(
        member_api("PATCH", url, data="{", content_type="application/json"), "body", "body"
    )
    assert committed_counts() == before
    assert committed_values(task["id"]) == task["values"]


def test_patch_without_changes_writes_no_event(member_api, task):
    before = committed_counts()
    url = f"{RECORDS}/{task['id']}"
    response = member_api("PATCH", url, json={"values": {"points": 3, "status": "doing"}})
    assert response.status_code == 200
    assert response.get_json()["changed_fields"] == []
    assert committed_counts() == before


# ---- the web form -------------------------------------------------------------------------


def _soup(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def assert_form_error(response, key: str) -> BeautifulSoup:
    assert response.status_code == 422, response.get_data(as_text=True)[:2000]
    soup = _soup(response)
    assert soup.select_one("form .error[role=alert]") is not None
    if key == "visibility":
        assert soup.select_one("fieldset .error") is not None
        return soup
    message = soup.select_one(f"#v_{key}-error")
    assert message is not None and message.get_text(strip=True), f"no inline error for {key}"
    control = soup.find(id=f"v_{key}")
    assert control.get("aria-invalid") == "true"
    assert control.get("aria-describedby") == f"v_{key}-error"
    return soup


WEB_BAD = [
    pytest.param({"v_title": ""}, "title", id="missing-required"),
    pytest.param({"v_title": "   "}, "title", id="blank-required"),
    pytest.param({"v_title": "a\nb"}, "title", id="text-newline"),
    pytest.param({"v_title": "x" * 1001}, "title", id="text-too-long"),
    pytest.param({"v_title": "x", "v_notes": "n" * 20001}, "notes", id="long-text-too-long"),
    pytest.param({"v_title": "x", "v_points": "12abc"}, "points", id="number-letters"),
    pytest.param({"v_title": "x", "v_points": "nan"}, "points", id="number-nan"),
    pytest.param({"v_title": "x", "v_points": "inf"}, "points", id="number-inf"),
    pytest.param({"v_title": "x", "v_points": "1e999"}, "points", id="number-overflow"),
    pytest.param({"v_title": "x", "v_due": "2024-02-30"}, "due", id="date-impossible"),
    pytest.param({"v_title": "x", "v_due": "tomorrow"}, "due", id="date-words"),
    pytest.param({"v_title": "x", "v_due": "2026-W52-1"}, "due", id="date-iso-week"),
    pytest.param({"v_title": "x", "v_status": "blocked"}, "status", id="select-unknown"),
    pytest.param({"v_title": "x", "v_assignee": "bob"}, "assignee", id="user-not-an-id"),
    pytest.param({"v_title": "x", "v_assignee": "987654"}, "assignee", id="user-unknown"),
    pytest.param({"v_title": "x", "v_assignee": "1.5"}, "assignee", id="user-fraction"),
    pytest.param({"v_title": "x", "v_assignee": "\u00b2"}, "assignee", id="user-superscript"),
    pytest.param({"v_title": "x", "visibility": "secret"}, "visibility", id="visibility"),
]


def test_web_form_shows_inline_errors_and_writes_nothing(login, world, subtests):
    browser = login("member@acme.test")
    for case in WEB_BAD:
        form, key = case.values
        with subtests.test(case.id):
            before = committed_counts()
            assert_form_error(browser.post(NEW_FORM, form), key)
            assert committed_counts() == before


def test_web_form_rejects_a_user_of_another_org(login, world):
    browser = login("member@acme.test")
    before = committed_counts()
    outsider = str(world.b.users["member"].id)
    soup = assert_form_error(
        browser.post(NEW_FORM, {"v_title": "x", "v_assignee": outsider}), "assignee"
    )
    assert "member of this organization" in soup.select_one("#v_assignee-error").get_text()
    assert committed_counts() == before


def test_web_form_reports_several_fields_at_once(login, world):
    browser = login("member@acme.test")
    before = committed_counts()
    response = browser.post(NEW_FORM, {"v_title": "", "v_points": "x", "v_due": "13/13/2024"})
    assert response.status_code == 422
    soup = _soup(response)
    assert {p["id"] for p in soup.select("p.error[id]")} == {
        "v_title-error",
        "v_points-error",
        "v_due-error",
    }
    assert committed_counts() == before


def test_web_form_keeps_the_typed_input_after_an_error(login, world):
    browser = login("member@acme.test")
    member_id = world.a.users["member"].id
    form = {
        "v_title": "Typed title",
        "v_status": "doing",
        "v_points": "12abc",
        "v_due": "2031-05-06",
        "v_urgent": "on",
        "v_assignee": str(member_id),
        "v_notes": "Line one\nLine two",
        "visibility": "private",
    }
    before = committed_counts()
    soup = assert_form_error(browser.post(NEW_FORM, form), "points")
    assert committed_counts() == before
    assert soup.select_one("#v_title")["value"] == "Typed title"
    assert soup.select_one("#v_points")["value"] == "12abc"
    assert soup.select_one("#v_due")["value"] == "2031-05-06"
    assert soup.select_one("#v_status option[selected]")["value"] == "doing"
    assert soup.select_one("#v_assignee option[selected]")["value"] == str(member_id)
    assert soup.select_one("#v_urgent").has_attr("checked")
    assert soup.select_one("#v_notes").get_text() == "Line one\nLine two"
    assert soup.select_one("input[name=visibility][checked]")["value"] == "private"


def test_web_edit_form_error_keeps_input_and_the_stored_record(login, world):
    browser = login("member@acme.test")
    record = world.a.public
    stored = committed_values(record.id)
    url = f"/models/tasks/records/{record.id}/edit"
    before = committed_counts()
    response = browser.post(url, {"v_title": "", "v_points": "5", "v_notes": "kept text"})
    soup = assert_form_error(response, "title")
    assert soup.select_one("#v_points")["value"] == "5"
    assert soup.select_one("#v_notes").get_text() == "kept text"
    assert committed_counts() == before
    assert committed_values(record.id) == stored


def test_web_form_ignores_unknown_inputs(login, world):
    browser = login("member@acme.test")
    before = committed_counts()
    response = browser.post(NEW_FORM, {"v_title": "Only known", "v_nope": "x", "nope": "y"})
    assert response.status_code == 303
    record_id = int(response.headers["Location"].rsplit("/", 1)[1])
    assert committed_values(record_id) == {"title": "Only known", "urgent": False}
    assert committed_counts() == (before[0] + 1, before[1] + 1)


def test_web_form_oversized_body_is_413_and_writes_nothing(app, login, world):
    browser = login("member@acme.test")
    before = committed_counts()
    big = "a" * (app.config["MAX_CONTENT_LENGTH"] + 10)
    response = browser.post(NEW_FORM, {"v_title": "Big", "v_notes": big})
    assert response.status_code == 413
    assert "larger than" in _soup(response).select_one("main").get_text()
    assert committed_counts() == before


@pytest.mark.parametrize(
    "title",
    ["Two\nlines", "Tab\there", "\u202egnp.exe", "Isolate \u2067x"],
    ids=["line-break", "tab", "override", "isolate"],
)
def test_a_one_line_field_refuses_controls_and_direction_overrides(member_api, title):
    before = committed_counts()
    response = member_api("POST", RECORDS, json={"values": {"title": title}})
    assert response.status_code == 400  # the API's answer to invalid values
    (detail,) = response.get_json()["error"]["details"]
    assert detail["field"] == "values.title" and "bidirectional" in detail["message"]
    assert committed_counts() == before


def test_error_bodies_are_json_documents(member_api):
    response = member_api("POST", RECORDS, json={"values": {"title": 1}})
    body = json.loads(response.get_data(as_text=True))
    assert body == {
        "error": {
            "code": "validation_error",
            "message": "The record has invalid values.",
            "details": [
                {"field": "values.title", "in": "body", "message": "Title must be a string."}
            ],
        }
    }


@pytest.mark.parametrize(
    "url",
    [
        "/models/tasks/records/99999999999999999999999",
        "/models/tasks/records/2147483648/edit",
        "/automations/99999999999999999999999",
        "/wiki/99999999999999999999999",
    ],
)
def test_ids_beyond_the_database_range_are_not_found(world, login, url):
    assert login("owner@acme.test").get(url).status_code == 404


@pytest.mark.parametrize(
    "url",
    [
        "/models/tasks/records?field=assignee&value=99999999999999999999999",
        "/models/tasks/records?cursor=99999999999999999999999",
        "/models/tasks/records?field=assignee&value=" + "9" * 5000,  # past int()'s digit limit
        "/models/tasks/records?cursor=" + "9" * 5000,
    ],
)
def test_ids_beyond_the_database_range_in_a_list_are_named_errors(world, login, url):
    response = login("owner@acme.test").get(url)
    assert response.status_code == 200  # the list shows the problem inline, as for any filter
    text = response.get_data(as_text=True)
    assert "No member has the id" in text or "Use the next_cursor given" in text


def test_audit_filters_with_ids_beyond_the_database_range_are_named_errors(world, login):
    owner = login("owner@acme.test")
    for query, field in (
        ("actor=user:99999999999999999999999", "actor"),
        ("before=99999999999999999999999", "before"),
    ):
        response = owner.get(f"/audit?{query}")
        assert response.status_code == 400
        assert f"Invalid {field}" in response.get_data(as_text=True)


def test_api_names_an_out_of_range_record_id(world, app):
    client = app.test_client()
    token = world.a.keys["owner"]
    response = client.get(
        "/api/v1/models/tasks/records/99999999999999999999999",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code in (400, 404)
    filtered = client.get(
        "/api/v1/models/tasks/records?filter=assignee:99999999999999999999999",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert filtered.status_code == 400
    assert "No member has the id" in json.dumps(filtered.get_json())


@pytest.mark.parametrize("depth", [100, 5000])
def test_deeply_nested_json_is_refused_as_malformed(world, app, login, depth):
    deep = "[" * depth + "]" * depth
    body = '{"values": {"title": ' + deep + "}}"
    client = app.test_client()
    response = client.post(
        "/api/v1/models/tasks/records",
        data=body,
        headers={
            "Authorization": f"Bearer {world.a.keys['owner']}",
            "Content-Type": "application/json",
        },
    )
    assert response.status_code == 400
    assert response.get_json()["error"]["details"][0]["field"] == "body"
    owner = login("owner@acme.test")
    wiki = owner.api(
        "POST",
        "/internal/wiki/pages",
        data='{"title": ' + deep + "}",
        headers={"Content-Type": "application/json"},
    )
    assert wiki.status_code == 400
    editor = owner.post("/automations/new", {"name": "Deep", "graph": deep})
    assert editor.status_code == 422
    text = editor.get_data(as_text=True)
    assert "nested deeper than 64 levels" in text
    assert deep[:200] in text  # what the user typed is still in the editor


def test_nul_characters_are_refused_by_name_on_every_database(world, app, login):
    """PostgreSQL text cannot hold NUL: refused by name, never a database error."""
    owner = login("owner@acme.test")
    before = committed_counts()
    web = owner.post(NEW_FORM, {"v_title": "a\x00b"})
    assert web.status_code == 422
    assert owner.get("/models/ta%00sks/records").status_code == 404
    api = app.test_client().post(
        RECORDS,
        json={"values": {"title": "a\x00b"}},
        headers={"Authorization": f"Bearer {world.a.keys['owner']}"},
    )
    assert api.status_code == 400
    assert "NUL" in api.get_json()["error"]["details"][0]["message"]
    query = app.test_client().get(
        RECORDS,
        query_string={"q": "a\x00b"},
        headers={"Authorization": f"Bearer {world.a.keys['owner']}"},
    )
    assert query.status_code == 400
    assert query.get_json()["error"]["details"] == [
        {"field": "q", "in": "query", "message": "Remove the NUL character."}
    ]
    assert committed_counts() == before


def _field_error(response, field_id: str) -> str:
    """The error drawn beside the input ``field_id`` (by its aria-describedby)."""
    page = BeautifulSoup(response.get_data(as_text=True), "html.parser")
    described = page.find(id=field_id)["aria-describedby"]
    return page.find(id=described).get_text(strip=True)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("v_title", "a\x00b", "Remove the NUL character (shown as \ufffd)."),
        ("v_notes", "kept\x00", "Remove the NUL character (shown as \ufffd)."),
        ("v_due", "2026-12-31\x00", "Due must be a date as YYYY-MM-DD."),
    ],
)
def test_a_nul_in_a_record_form_is_that_fields_error_with_the_form_kept(
    world, login, field, value, message
):
    owner = login("owner@acme.test")
    before = committed_counts()
    sent = {"v_title": "Kept title", "v_points": "3", "v_notes": "Kept notes", field: value}
    response = owner.post(NEW_FORM, sent)
    assert response.status_code == 422
    assert message in _field_error(response, field)
    page = BeautifulSoup(response.get_data(as_text=True), "html.parser")
    shown = value.replace("\x00", "\ufffd")  # where the NUL was, as typed otherwise
    kept = page.find(id=field)
    assert (kept.get("value") or kept.get_text()) == shown
    assert page.find(id="v_points")["value"] == "3"
    assert committed_counts() == before


def test_a_nul_in_a_list_filter_or_search_is_said_in_the_toolbar(world, login):
    member = login("member@acme.test")
    for query in ({"ff": "title", "fo": "eq", "fv": "\x00"}, {"q": "a\x00b"}):
        response = member.get("/models/tasks/records", query_string=query)
        assert response.status_code == 200
        page = BeautifulSoup(response.get_data(as_text=True), "html.parser")
        alert = page.select_one("#records-table [role=alert]").get_text()
        assert "Remove the NUL character (shown as \ufffd)." in alert
    kept = page.select_one(".records-toolbar input[name=q]")  # not the header's search box
    assert kept["value"] == "a\ufffdb"


def test_a_nul_in_other_forms_is_named_where_each_form_names_its_errors(world, login):
    from monark.automations import services as automations
    from monark.automations.models import Automation

    admin = login("admin@acme.test")
    before = db.session.scalar(select(func.count(Automation.id)))
    graph = '{"nodes": [{"id": "t", "type": "manual", "config": {}}], "edges": []}'
    new = admin.post("/automations/new", {"name": "a\x00", "graph": graph})
    assert new.status_code == 422
    assert _field_error(new, "automation-name") == "Remove the NUL character (shown as \ufffd)."
    assert db.session.scalar(select(func.count(Automation.id))) == before
    ai = admin.post("/settings/ai", {"provider": "anthropic\x00"})
    assert ai.status_code == 422
    assert _field_error(ai, "provider") == "Choose a provider from the list."
    automation = automations.create_automation(
        world.a.principal("admin"), "Mine", json.loads(graph)
    )
    url = f"/automations/{automation.id}"
    assert admin.post(f"{url}/private-records", {"private_records": "keep\x00"}).status_code == 303
    page = BeautifulSoup(admin.get(url).get_data(as_text=True), "html.parser")
    assert "Choose one of: skip, keep, send." in page.get_text()


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        pytest.param(r'{"values": {"title": "\ud800"}}', "values.title", "surrogate", id="value"),
        pytest.param(r'{"values": {"title": "a\udfffb"}}', "values.title", "surrogate", id="low"),
        pytest.param(r'{"values": {"\ud800": "x"}}', "values", "surrogate", id="key"),
        pytest.param(r'{"values": {"notes": ["a", "\udc00"]}}', "values.notes.1", "surrogate",
                     id="in-a-list"),
        pytest.param(r'"\ud800"', "body", "surrogate", id="whole-body"),
        pytest.param(r'{"values": {"title": "a\u0000b"}}', "values.title", "NUL", id="nul"),
    ],
)  # fmt: skip
def test_unstorable_text_in_json_is_refused_naming_its_path(world, app, body, field, message):
    """A lone UTF-16 surrogate (\\ud800 escaped in JSON) cannot be encoded for the database:
    refused like NUL, naming where it is, on every database, instead of a 500 at flush."""
    before = committed_counts()
    response = app.test_client().post(
        RECORDS,
        data=body,
        headers={
            "Authorization": f"Bearer {world.a.keys['owner']}",
            "Content-Type": "application/json",
        },
    )
    assert_rejected(response, field, "body")
    assert message in response.get_json()["error"]["details"][0]["message"]
    assert committed_counts() == before


def test_a_valid_surrogate_pair_in_json_is_one_character(world, app):
    response = app.test_client().post(
        RECORDS,
        data=r'{"values": {"title": "smile \ud83d\ude00"}}',
        headers={
            "Authorization": f"Bearer {world.a.keys['owner']}",
            "Content-Type": "application/json",
        },
    )
    assert response.status_code == 201
    assert response.get_json()["title"] == "smile \U0001f600"


def test_lone_surrogates_are_refused_in_internal_bodies_and_the_automation_editor(world, login):
    owner = login("owner@acme.test")
    wiki = owner.api(
        "POST",
        "/internal/wiki/pages",
        data=r'{"title": "x\ud800"}',
        headers={"Content-Type": "application/json"},
    )
    assert wiki.status_code == 400
    assert wiki.get_json()["error"]["details"][0]["field"] == "title"
    graph = r'{"nodes": [{"id": "t", "type": "record.created", "config": {"model": "\ud800"}}]}'
    editor = owner.post("/automations/new", {"name": "Odd", "graph": graph})
    assert editor.status_code == 422
    assert "nodes.0.config.model" in editor.get_data(as_text=True)


def test_surrogate_bytes_in_forms_and_queries_are_plain_text(world, login):
    """Werkzeug keeps bytes that are not UTF-8 (``%ED%A0%80`` encodes a lone surrogate)
    percent-encoded when it decodes forms and query strings: nothing to refuse."""
    owner = login("owner@acme.test")
    response = owner.client.post(
        NEW_FORM,
        data=f"v_title=a%ED%A0%80b&csrf_token={owner.csrf}",
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 303
    title = db.session.scalar(select(Record.title).order_by(Record.id.desc()).limit(1))
    assert title == "a%ED%A0%80b"
    search = owner.get("/models/tasks/records?q=%ED%A0%80")
    assert search.status_code == 200
    assert 'value="%ED%A0%80"' in search.get_data(as_text=True)


def test_malformed_json_says_what_is_wrong(world, app):
    response = app.test_client().post(
        "/api/v1/models/tasks/records",
        data='{"values": {"title": "x",}}',
        headers={
            "Authorization": f"Bearer {world.a.keys['owner']}",
            "Content-Type": "application/json",
        },
    )
    assert response.status_code == 400
    message = response.get_json()["error"]["details"][0]["message"]
    assert message.startswith("Malformed JSON: ") and "line 1" in message
