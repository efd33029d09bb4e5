"""The records workspace as a signed-in user sees it: pages, htmx partials, forms, CSRF."""

from __future__ import annotations

import re

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.core.models import Event
from monark.extensions import db
from monark.records.models import ModelField, Record, RecordModel
from tests import factories

LIST = "/models/tasks/records"
API_LIST = "/api/v1/models/tasks/records"


# ---- helpers --------------------------------------------------------------------------


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def flashes(soup: BeautifulSoup) -> list[str]:
    return [p.get_text(strip=True) for p in soup.select(".flashes .flash")]


def row_titles(soup: BeautifulSoup) -> list[str]:
    """The first cell of each row of the records table (the record's title link)."""
    return [row.select_one("td a").get_text(strip=True) for row in soup.select("table tbody tr")]


def assert_page_frame(response, route: str, model: str = "", record_id: int | str = "") -> None:
    """One ``main#main`` with the page context; the assistant panel mounted outside it."""
    assert response.status_code in (200, 422), response.status_code
    soup = soup_of(response)
    mains = soup.select("main")
    assert len(mains) == 1 and mains[0].get("id") == "main"
    main = mains[0]
    assert main["data-route"] == route
    assert main["data-model"] == model
    assert main["data-record-id"] == str(record_id)
    slots = soup.select("#assistant-slot")
    assert len(slots) == 1
    assert slots[0].find_parent("main") is None
    panel = slots[0].select_one("aside#assistant")
    assert panel is not None and panel.get("aria-label") == "Assistant"
    assert panel.find_parent("main") is None


def event_count() -> int:
    with db.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(Event))


def record_count() -> int:
    with db.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(Record))


def last_event() -> Event:
    return db.session.scalars(select(Event).order_by(Event.id.desc())).first()


def make(world, title: str, **values) -> Record:
    return factories.make_record(world.a.principal("owner"), world.a.model, title, **values)


# ---- reading ----------------------------------------------------------------------------


def test_model_list(login, world):
    response = login("member@acme.test").get("/models")
    assert response.status_code == 200
    assert_page_frame(response, "/models")
    soup = soup_of(response)
    cards = soup.select("main .cards .card")
    assert len(cards) == 1
    link = cards[0].select_one("h2 a")
    assert link.get_text(strip=True) == "Tasks" and link["href"] == LIST
    assert "7 fields" in cards[0].get_text()
    # Members cannot manage models: no settings link, no "New model" button.
    assert soup.select_one('a[href="/models/new"]') is None
    assert soup.select_one('a[href="/models/tasks/settings"]') is None
    # The navigation lists the org's models.
    assert soup.select_one(f'nav a[href="{LIST}"]').get_text(strip=True) == "Tasks"


def test_record_list_shows_visible_records_with_a_private_badge(login, world):
    response = login("member@acme.test").get(LIST)
    assert_page_frame(response, LIST, model="tasks")
    soup = soup_of(response)
    assert set(row_titles(soup)) == {"Acme public task", "Acme private task"}
    assert "2 records" in soup.select_one("#records-table").get_text()
    badges = [
        row.select_one("td a").get_text(strip=True)
        for row in soup.select("table tbody tr")
        if row.select_one(".badge")
    ]
    assert badges == ["Acme private task"]
    link = soup.find("a", string="Acme public task")
    assert link["href"] == f"{LIST}/{world.a.public.id}"


def test_search_is_case_insensitive_and_keeps_the_query(login, world):
    make(world, "Alpha report")
    make(world, "beta REPORT", notes="quarterly numbers")
    make(world, "Gamma")
    browser = login("member@acme.test")
    soup = soup_of(browser.get(f"{LIST}?q=Report"))
    assert row_titles(soup) == ["beta REPORT", "Alpha report"]
    assert "2 records match" in soup.get_text()
    assert soup.select_one("#q")["value"] == "Report"
    assert row_titles(soup_of(browser.get(f"{LIST}?q=QUARTERLY"))) == ["beta REPORT"]
    empty = soup_of(browser.get(f"{LIST}?q=nothing-like-this"))
    assert row_titles(empty) == []
    assert empty.select_one(".empty").find("a", string="Clear the search")["href"] == LIST


def test_filter_by_field_value(login, world):
    member_id = world.a.users["member"].id
    make(world, "Done one", status="done", points=5, urgent=True, assignee=member_id)
    make(world, "Done two", status="done", points=2.5)
    make(world, "Doing", status="doing", points=5, urgent=False)
    browser = login("member@acme.test")

    def titles(field: str, value: str) -> set[str]:
        response = browser.get(LIST, query_string={"filter": f"{field}:{value}"})
        assert response.status_code == 200
        return set(row_titles(soup_of(response)))

    assert titles("status", "done") == {"Done one", "Done two"}
    assert titles("points", "5") == {"Done one", "Doing"}
    assert titles("points", "2.5") == {"Done two"}
    assert titles("urgent", "true") == {"Done one"}
    assert titles("urgent", "false") == {"Doing"}
    assert titles("assignee", str(member_id)) == {"Done one"}
    assert titles("title", "Doing") == {"Doing"}
    soup = soup_of(browser.get(LIST, query_string={"filter": "status:done"}))
    row = soup.select_one(".filter-row")
    assert row.select_one("[name=ff] option[selected]")["value"] == "status"
    assert row.select_one("[name=fo] option[selected]")["value"] == "eq"
    assert row.select_one("[name=fv]")["value"] == "done"
    # A value that cannot match the field's type is explained, not a crash.
    bad = browser.get(LIST, query_string={"filter": "points:many"})
    assert bad.status_code == 200
    alert = soup_of(bad).select_one("#records-table [role=alert]")
    assert "not a valid number" in alert.get_text()


def test_a_value_for_any_field_asks_for_a_field(login, world):
    browser = login("member@acme.test")
    response = browser.get(LIST, query_string={"ff": "", "fo": "eq", "fv": "done"})
    assert response.status_code == 200
    table = soup_of(response).select_one("#records-table")
    assert table.select_one("[role=alert]").get_text(strip=True) == "Choose a field to filter by."
    assert "match" not in table.get_text()  # no "N records match" beside the error
    assert row_titles(table) == []
    # The htmx partial says the same.
    fragment = browser.get(
        LIST,
        query_string={"ff": "", "fv": "done"},
        headers={"HX-Request": "true", "HX-Target": "#records-table"},
    )
    assert "Choose a field to filter by." in fragment.get_data(as_text=True)


def test_filters_match_select_options_any_case_and_members_by_name(login, world):
    member = world.a.users["member"]  # "Acme Member"
    make(world, "Finished", status="done", assignee=member.id, due="2030-01-31")
    make(world, "Started", status="doing")
    browser = login("member@acme.test")

    def titles(field: str, value: str) -> set[str]:
        response = browser.get(LIST, query_string={"filter": f"{field}:{value}"})
        soup = soup_of(response)
        assert soup.select_one("#records-table [role=alert]") is None, soup.get_text()
        return set(row_titles(soup))

    for value in ("done", "Done", "DONE"):
        assert titles("status", value) == {"Finished"}
    for value in (str(member.id), "Acme Member", "acme member", "memb"):
        assert titles("assignee", value) == {"Finished"}
    # Part of a name matches everyone it is part of ("Acme" is in every Acme name).
    make(world, "Viewer's", status="todo", assignee=world.a.users["viewer"].id)
    assert titles("assignee", "acme") == {"Finished", "Viewer's"}
    assert titles("assignee", "Acme Viewer") == {"Viewer's"}
    assert titles("due", "2030-01-31") == {"Finished"}

    def alert(field: str, value: str) -> str:
        response = browser.get(LIST, query_string={"filter": f"{field}:{value}"})
        return soup_of(response).select_one("#records-table [role=alert]").get_text(strip=True)

    assert "not a valid date" in alert("due", "31/01/2030")
    assert "not a valid date" in alert("due", "2030-02-30")
    assert "not an option of Status" in alert("status", "blocked")
    assert "No member is called 'Nobody'" in alert("assignee", "Nobody")


def test_api_filters_match_options_any_case_and_members_by_name(app, world):
    member = world.a.users["member"]
    make(world, "Finished", status="done", assignee=member.id, due="2030-01-31")
    client = app.test_client()
    headers = {"Authorization": f"Bearer {world.a.keys['member']}"}

    def titles(flt: str) -> set[str]:
        response = client.get(f"{API_LIST}?filter={flt}", headers=headers)
        assert response.status_code == 200, response.get_data(as_text=True)
        return {item["title"] for item in response.get_json()["items"]}

    assert titles("status:Done") == titles("status:done") == {"Finished"}
    assert titles("assignee:acme%20member") == {"Finished"}
    assert titles("due:2030-01-31") == {"Finished"}
    for bad in ("due:tomorrow", "status:blocked", "assignee:nobody"):
        response = client.get(f"{API_LIST}?filter={bad}", headers=headers)
        assert response.status_code == 400
        assert [d["field"] for d in response.get_json()["error"]["details"]] == ["filter"]


def test_pagination_with_a_next_page_link(login, world):
    for i in range(30):
        make(world, f"Bulk {i:02d}")
    browser = login("member@acme.test")
    first = soup_of(browser.get(f"{LIST}?q=bulk"))
    titles = row_titles(first)
    assert titles == [f"Bulk {i:02d}" for i in range(29, 4, -1)]  # 25, newest first
    assert "30 records match" in first.get_text()
    assert first.find("a", string=re.compile("First page")) is None
    nxt = first.find("a", string=re.compile("Next page"))
    assert "cursor=" in nxt["href"] and "q=bulk" in nxt["href"]
    second_response = browser.get(nxt["href"])
    assert_page_frame(second_response, LIST, model="tasks")
    second = soup_of(second_response)
    assert row_titles(second) == [f"Bulk {i:02d}" for i in range(4, -1, -1)]
    assert second.find("a", string=re.compile("Next page")) is None
    assert second.find("a", string=re.compile("First page"))["href"] == f"{LIST}?q=bulk"
    # Without a search, all 32 visible tasks page as 25 + 7.
    unfiltered = soup_of(browser.get(LIST))
    assert len(row_titles(unfiltered)) == 25
    rest = soup_of(browser.get(unfiltered.find("a", string=re.compile("Next page"))["href"]))
    assert len(row_titles(rest)) == 7


@pytest.mark.parametrize("target", ["#records-table", "div#records-table"])
def test_htmx_request_for_the_table_gets_only_the_fragment(login, world, target):
    make(world, "Fragment row")
    browser = login("member@acme.test")
    headers = {"HX-Request": "true", "HX-Target": target}
    response = browser.get(f"{LIST}?q=fragment", headers=headers)
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "<html" not in html and "<body" not in html and "<main" not in html
    soup = soup_of(response)
    roots = [el for el in soup.contents if getattr(el, "name", None)]
    assert len(roots) == 1 and roots[0].get("id") == "records-table"
    assert row_titles(soup) == ["Fragment row"]
    assert soup.select_one("#assistant-slot") is None
    assert "HX-Request" in response.headers.get("Vary", "")


def test_htmx_boosted_or_untargeted_requests_get_the_whole_page(login, world):
    browser = login("member@acme.test")
    boosted = browser.get(
        LIST, headers={"HX-Request": "true", "HX-Boosted": "true", "HX-Target": "main#main"}
    )
    assert_page_frame(boosted, LIST, model="tasks")
    other = browser.get(LIST, headers={"HX-Request": "true", "HX-Target": "div#elsewhere"})
    assert_page_frame(other, LIST, model="tasks")


def test_record_detail(login, world):
    member = world.a.users["member"]
    record = make(
        world,
        "Detailed",
        status="doing",
        points=3,
        due="2030-02-01",
        urgent=True,
        assignee=member.id,
        notes="Line one\nLine two",
    )
    response = login("member@acme.test").get(f"{LIST}/{record.id}")
    assert_page_frame(response, f"{LIST}/{record.id}", model="tasks", record_id=record.id)
    soup = soup_of(response)
    assert soup.select_one("main h1").get_text(strip=True) == "Detailed"
    shown = {
        dt.get_text(strip=True): dt.find_next_sibling("dd").get_text(strip=True)
        for dt in soup.select("dl.record dt")
    }
    assert shown["Title"] == "Detailed"
    assert shown["Status"] == "doing"
    assert shown["Points"] == "3"
    assert shown["Due"] == "2030-02-01"
    assert shown["Urgent"] == "Yes"
    assert shown["Assignee"] == member.name
    assert shown["Notes"] == "Line one\nLine two"
    assert soup.select_one("dl.record .pre").get_text() == "Line one\nLine two"
    assert shown["Visibility"] == "Everyone in the organization"
    assert soup.find("a", string="Edit")["href"] == f"{LIST}/{record.id}/edit"
    assert soup.find("a", string="Delete")["href"] == f"{LIST}/{record.id}/delete"


# ---- writing ------------------------------------------------------------------------------


def test_create_redirects_flashes_and_shows_the_values(login, world):
    browser = login("member@acme.test")
    form_page = browser.get(f"{LIST}/new")
    assert_page_frame(form_page, f"{LIST}/new", model="tasks")
    events = event_count()
    response = browser.post(
        f"{LIST}/new",
        {"v_title": "Buy stamps", "v_status": "todo", "v_points": "2", "v_urgent": "on"},
    )
    assert response.status_code == 303
    match = re.fullmatch(rf"{LIST}/(\d+)", response.headers["Location"])
    assert match
    record = db.session.get(Record, int(match.group(1)))
    assert record.values == {"title": "Buy stamps", "status": "todo", "points": 2, "urgent": True}
    assert record.creator_id == world.a.users["member"].id
    assert event_count() == events + 1
    event = last_event()
    assert (event.type, event.actor_kind, event.actor_id) == (
        "record.created",
        "user",
        world.a.users["member"].id,
    )
    page = soup_of(browser.get(response.headers["Location"]))
    assert flashes(page) == ["Buy stamps created."]
    assert "Buy stamps" in page.select_one("dl.record").get_text()
    # The flash is shown once.
    assert flashes(soup_of(browser.get(response.headers["Location"]))) == []


def test_edit_prefills_saves_and_flashes(login, world):
    record = make(world, "Old title", status="todo", points=1)
    browser = login("member@acme.test")
    url = f"{LIST}/{record.id}/edit"
    form_page = browser.get(url)
    assert_page_frame(form_page, url, model="tasks", record_id=record.id)
    form = soup_of(form_page)
    assert form.select_one("#v_title")["value"] == "Old title"
    assert form.select_one("#v_status option[selected]")["value"] == "todo"
    assert form.select_one("#v_points")["value"] == "1"
    response = browser.post(
        url, {"v_title": "New title", "v_status": "done", "v_points": "1", "visibility": "org"}
    )
    assert response.status_code == 303
    assert response.headers["Location"] == f"{LIST}/{record.id}"
    page = soup_of(browser.get(response.headers["Location"]))
    assert flashes(page) == ["New title saved."]
    assert page.select_one("main h1").get_text(strip=True) == "New title"
    db.session.expire_all()
    stored = db.session.get(Record, record.id)
    assert stored.values["title"] == "New title" and stored.values["status"] == "done"
    event = last_event()
    assert event.type == "record.updated" and event.subject_id == record.id
    assert {"title", "status"} <= set(event.payload["fields"])
    assert "points" not in event.payload["fields"]


def test_delete_asks_first_then_deletes(login, world):
    record = make(world, "Doomed")
    browser = login("member@acme.test")
    url = f"{LIST}/{record.id}/delete"
    confirm = browser.get(url)
    assert_page_frame(confirm, url, model="tasks", record_id=record.id)
    soup = soup_of(confirm)
    assert "Doomed" in soup.select_one("main h1").get_text()
    form = soup.select_one("main form[method=post]")
    assert form.find("button", string="Delete record") is not None
    assert db.session.get(Record, record.id) is not None  # asking deleted nothing
    events = event_count()
    response = browser.post(url)
    assert response.status_code == 303
    assert response.headers["Location"] == LIST
    assert flashes(soup_of(browser.get(LIST))) == ["Doomed deleted."]
    db.session.expire_all()
    assert db.session.get(Record, record.id) is None
    assert event_count() == events + 1
    assert (last_event().type, last_event().subject_id) == ("record.deleted", record.id)
    assert browser.get(f"{LIST}/{record.id}").status_code == 404


# ---- models and fields (admins) -------------------------------------------------------------


def _model(key: str) -> RecordModel | None:
    db.session.expire_all()
    return db.session.scalar(select(RecordModel).where(RecordModel.key == key))


def test_admin_creates_a_model_and_a_select_field(login, world):
    browser = login("admin@acme.test")
    assert_page_frame(browser.get("/models/new"), "/models/new")
    bad = browser.post("/models/new", {"key": "Bad Key", "name": "Projects"})
    assert bad.status_code == 422
    bad_soup = soup_of(bad)
    assert bad_soup.select_one("#key-error") is not None
    assert bad_soup.select_one("#name")["value"] == "Projects"
    taken = browser.post("/models/new", {"key": "tasks", "name": "Tasks again"})
    assert taken.status_code == 422 and "exists" in soup_of(taken).select_one("#key-error").text

    response = browser.post(
        "/models/new", {"key": "projects", "name": "Projects", "description": "Big things"}
    )
    assert response.status_code == 303
    assert response.headers["Location"] == "/models/projects/settings"
    settings = browser.get("/models/projects/settings")
    assert_page_frame(settings, "/models/projects/settings", model="projects")
    assert flashes(soup_of(settings)) == ["Model Projects created. Add its fields below."]
    model = _model("projects")
    assert model.org_id == world.a.org.id and model.description == "Big things"

    no_options = browser.post(
        "/models/projects/fields",
        {"key": "stage", "label": "Stage", "type": "select", "required": "on"},
    )
    assert no_options.status_code == 422
    refused = soup_of(no_options)
    assert "option" in refused.select_one(".has-error .error").get_text()
    # Everything typed comes back, not only the field in error.
    assert refused.select_one("#new-label")["value"] == "Stage"
    assert refused.select_one("#new-key")["value"] == "stage"
    assert refused.select_one("#new-type option[selected]")["value"] == "select"
    assert refused.select_one("input[name=required]").has_attr("checked")
    added = browser.post(
        "/models/projects/fields",
        {
            "key": "stage",
            "label": "Stage",
            "type": "select",
            "options": "idea\nbuilding\nshipped",
            "required": "on",
        },
    )
    assert added.status_code == 303
    field = _model("projects").fields[0]
    assert (field.key, field.type, field.required) == ("stage", "select", True)
    assert field.options == ["idea", "building", "shipped"]
    page = soup_of(browser.get("/models/projects/settings"))
    assert page.select_one(f"#f{field.id}-options")["value"] == "idea, building, shipped"
    new_form = soup_of(browser.get("/models/projects/records/new"))
    options = [o["value"] for o in new_form.select("#v_stage option")]
    assert options == ["", "idea", "building", "shipped"]
    created = browser.post("/models/projects/records/new", {"v_stage": "building"})
    assert created.status_code == 303
    types = [e.type for e in db.session.scalars(select(Event).order_by(Event.id))][-3:]
    assert types == ["model.created", "field.created", "record.created"]


def test_admin_renames_a_model_and_edits_a_field(login, world):
    browser = login("admin@acme.test")
    empty = browser.post("/models/tasks/settings", {"name": "  ", "description": ""})
    assert empty.status_code == 422
    assert soup_of(empty).select_one("#name-error") is not None
    response = browser.post("/models/tasks/settings", {"name": "Chores", "description": "Home"})
    assert response.status_code == 303
    models_page = soup_of(browser.get("/models"))
    assert models_page.select_one(".cards h2 a").get_text(strip=True) == "Chores"
    assert models_page.select_one(f'nav a[href="{LIST}"]').get_text(strip=True) == "Chores"
    status = next(f for f in world.a.model.fields if f.key == "status")
    response = browser.post(
        f"/models/tasks/fields/{status.id}",
        {"label": "State", "options": "todo, doing, done, blocked"},
    )
    assert response.status_code == 303
    db.session.expire_all()
    field = db.session.get(ModelField, status.id)
    assert field.label == "State" and field.options == ["todo", "doing", "done", "blocked"]
    assert last_event().type == "field.updated"


def test_deleting_a_field_removes_its_values_everywhere(login, world):
    record = make(world, "Zebra task", points=5, notes="zebra stripes")
    notes = next(f for f in world.a.model.fields if f.key == "notes")
    browser = login("admin@acme.test")
    assert row_titles(soup_of(browser.get(f"{LIST}?q=stripes"))) == ["Zebra task"]
    response = browser.post(f"/models/tasks/fields/{notes.id}/delete")
    assert response.status_code == 303
    db.session.expire_all()
    stored = db.session.get(Record, record.id)
    assert "notes" not in stored.values and stored.values["points"] == 5
    assert db.session.get(ModelField, notes.id) is None
    # No trace of the removed values: not in search, not on the page, not in the form.
    assert row_titles(soup_of(browser.get(f"{LIST}?q=stripes"))) == []
    detail = soup_of(browser.get(f"{LIST}/{record.id}"))
    assert "Notes" not in [dt.get_text(strip=True) for dt in detail.select("dl.record dt")]
    assert "zebra stripes" not in detail.get_text()
    assert soup_of(browser.get(f"{LIST}/new")).select_one("#v_notes") is None
    event = last_event()
    assert event.type == "field.deleted" and event.payload["field"] == "notes"


def test_deleting_a_model_requires_typing_its_key(login, world):
    browser = login("admin@acme.test")
    records = record_count()
    for typed in ("", "Tasks", "task"):
        response = browser.post("/models/tasks/delete", {"confirm_key": typed})
        assert response.status_code == 422
        assert "Type tasks to confirm" in soup_of(response).select_one("#confirm_key-error").text
        assert _model("tasks") is not None
        assert record_count() == records
    response = browser.post("/models/tasks/delete", {"confirm_key": "tasks"})
    assert response.status_code == 303 and response.headers["Location"] == "/models"
    assert flashes(soup_of(browser.get("/models"))) == ["Model Tasks and its records deleted."]
    db.session.expire_all()
    remaining = db.session.scalar(select(RecordModel).where(RecordModel.org_id == world.a.org.id))
    assert remaining is None
    assert db.session.scalar(select(func.count()).where(Record.org_id == world.a.org.id)) == 0
    # Globex's tasks model is untouched.
    assert db.session.scalar(select(func.count()).where(Record.org_id == world.b.org.id)) == 2
    assert last_event().type == "model.deleted"
    assert browser.get(LIST).status_code == 404


# ---- every page's frame, CSRF and CSP ----------------------------------------------------------


def test_every_signed_in_page_has_the_page_context(login, world):
    rid = world.a.public.id
    pages = [
        ("/models", "", ""),
        ("/models/new", "", ""),
        (LIST, "tasks", ""),
        (f"{LIST}/new", "tasks", ""),
        (f"{LIST}/{rid}", "tasks", rid),
        (f"{LIST}/{rid}/edit", "tasks", rid),
        (f"{LIST}/{rid}/delete", "tasks", rid),
        ("/models/tasks/settings", "tasks", ""),
        ("/settings", "", ""),
        ("/settings/api-keys", "", ""),
        ("/audit", "", ""),
        ("/profile", "", ""),
    ]
    browser = login("owner@acme.test")
    for path, model, record_id in pages:
        response = browser.get(path + "?q=x" if path == LIST else path)
        assert response.status_code == 200, path
        assert_page_frame(response, path, model=model, record_id=record_id)
        soup = soup_of(response)
        # Nothing a strict CSP would block: no inline script, handlers or styles.
        assert all(script.get("src") for script in soup.select("script")), path
        for tag in soup.find_all(True):
            assert not any(a.startswith("on") or a == "style" for a in tag.attrs), (path, tag)
    missing = browser.get(f"{LIST}/999999")
    assert missing.status_code == 404
    soup = soup_of(missing)
    assert soup.select_one("main#main")["data-route"] == f"{LIST}/999999"
    assert soup.select_one("#assistant-slot").find_parent("main") is None


def test_post_without_csrf_token_is_rejected_and_writes_nothing(login, world):
    browser = login("member@acme.test")
    records, events = record_count(), event_count()
    response = browser.client.post(f"{LIST}/new", data={"v_title": "No token"})
    assert response.status_code == 400
    assert "CSRF" in soup_of(response).select_one("main").get_text()
    wrong = browser.client.post(f"{LIST}/new", data={"v_title": "Bad", "csrf_token": "forged"})
    assert wrong.status_code == 400
    deleted = browser.client.post(f"{LIST}/{world.a.public.id}/delete")
    assert deleted.status_code == 400
    # The API with a session cookie also needs the token (in the header).
    api = browser.client.post("/api/v1/models/tasks/records", json={"values": {"title": "x"}})
    assert api.status_code == 400
    assert api.get_json()["error"]["code"] == "bad_request"
    assert (record_count(), event_count()) == (records, events)


def test_htmx_post_with_the_csrf_header_works(login, world):
    browser = login("member@acme.test")
    # The layout hands htmx the token for every request it makes.
    page = soup_of(browser.get(LIST))
    # (The same token, signed anew each second: compare what is signed, not the stamp.)
    assert browser.csrf.split(".")[0] in page.body["hx-headers:inherited"]
    response = browser.client.post(
        f"{LIST}/new",
        data={"v_title": "Via htmx"},
        headers={"X-CSRFToken": browser.csrf, "HX-Request": "true"},
    )
    assert response.status_code == 303
    assert db.session.scalar(select(Record).where(Record.title == "Via htmx")) is not None
    api = browser.api("POST", "/api/v1/models/tasks/records", json={"values": {"title": "API"}})
    assert api.status_code == 201


def test_csp_forbids_inline_script_and_limits_images(login, world):
    response = login("member@acme.test").get(LIST)
    header = response.headers["Content-Security-Policy"]
    policy = {
        part.split()[0]: part.split()[1:] for part in (p.strip() for p in header.split(";")) if part
    }
    assert policy["script-src"] == ["'self'"]
    assert policy["img-src"] == ["'self'"]
    assert policy["default-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert "'unsafe-inline'" not in header and "'unsafe-eval'" not in header
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_a_deleted_records_id_is_never_given_to_a_new_one(world):
    from monark.records import services

    owner = world.a.principal("owner")
    newest = factories.make_record(owner, world.a.model, "Newest")
    gone = newest.id
    services.delete_record(owner, world.a.model, gone)
    assert factories.make_record(owner, world.a.model, "Next").id > gone


def test_a_key_with_a_trailing_newline_is_refused(world):
    from monark.core.errors import ValidationFailed
    from monark.records import services

    owner = world.a.principal("owner")
    with pytest.raises(ValidationFailed):
        services.create_model(owner, "notes\n", "Notes", "")
