"""Lists people and agents can use: several typed filters, any sort with exact cursors, the
total, kept in the URL on the records page and carried into the assistant's page context."""

from __future__ import annotations

import random
from datetime import date, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import event, select
from sqlalchemy.orm.attributes import flag_modified

from monark.extensions import db
from monark.records import services
from monark.records.models import Record, RecordValue
from monark.records.views import PAGE_SIZE
from tests import factories
from tests.llm_script import Say
from tests.tuning import configure

LIST = "/models/tasks/records"
API_LIST = "/api/v1/models/tasks/records"
TODAY = date.today()


def make(world, title: str, visibility: str = "org", **values):
    return factories.make_record(
        world.a.principal("owner"), world.a.model, title, visibility, **values
    )


@pytest.fixture
def api(app, world):
    client = app.test_client()
    headers = {"Authorization": f"Bearer {world.a.keys['member']}"}

    def get(*filters: str, expect: int = 200, **params):
        query = [("filter", f) for f in filters] + list(params.items())
        response = client.get(API_LIST, query_string=query, headers=headers)
        assert response.status_code == expect, response.get_data(as_text=True)
        return response.get_json()

    return get


def titles(answer) -> set[str]:
    return {item["title"] for item in answer["items"]}


@pytest.fixture
def tasks(world):
    member, admin = world.a.users["member"], world.a.users["admin"]
    rows = [
        ("Write docs", "todo", 3, TODAY - timedelta(days=3), member.id, "Draft the guide"),
        ("Fix login", "doing", 5, TODAY - timedelta(days=1), member.id, None),
        ("Ship it", "done", 8, TODAY - timedelta(days=9), admin.id, "x" * 250 + " needle"),
        ("Plan Q3", "todo", 2, TODAY + timedelta(days=30), admin.id, None),
        ("Untriaged", None, None, None, None, None),
    ]
    for title, status, points, due, assignee, notes in rows:
        values = {"status": status, "points": points, "assignee": assignee, "notes": notes}
        values["due"] = due.isoformat() if due else None
        make(world, title, **{k: v for k, v in values.items() if v is not None})


# ---- filters --------------------------------------------------------------------------


def test_several_filters_at_once_with_typed_operators(api, tasks):
    assert titles(api("status:in:todo,doing", "due:lt:today")) == {"Write docs", "Fix login"}
    assert titles(api("points:gte:5")) == {"Fix login", "Ship it"}
    assert titles(api("points:gt:2", "points:lte:5")) == {"Write docs", "Fix login"}
    assert titles(api("due:gte:today")) == {"Plan Q3"}
    assert titles(api(f"due:eq:{TODAY - timedelta(days=1)}")) == {"Fix login"}
    assert titles(api("assignee:eq:Acme Admin", "status:ne:done")) == {"Plan Q3"}
    assert titles(api("title:contains:LOG")) == {"Fix login"}
    assert titles(api("status:Todo")) == {"Write docs", "Plan Q3", "Acme public task"}


def test_ne_and_empty_count_records_without_a_value(api, tasks):
    # "Not done" includes the tasks with no status at all, as a person would mean it.
    not_done = titles(api("status:ne:done"))
    assert "Untriaged" in not_done and "Ship it" not in not_done
    assert titles(api("points:empty")) >= {"Untriaged", "Acme public task"}
    assert "Untriaged" not in titles(api("points:not_empty"))
    assert titles(api("points:not_empty")) == {"Write docs", "Fix login", "Ship it", "Plan Q3"}


def test_long_text_is_matched_whole_not_by_its_indexed_start(api, tasks):
    assert titles(api("notes:contains:needle")) == {"Ship it"}  # past the indexed prefix
    assert titles(api("notes:contains:guide")) == {"Write docs"}
    long = "x" * 250 + " needle"
    assert titles(api(f"notes:eq:{long}")) == {"Ship it"}
    assert titles(api(f"notes:eq:{'x' * 250}")) == set()  # its start only is not equal


def test_bad_filters_are_refused_naming_the_field(api, tasks):
    cases = {
        "status:lt:todo": "Status (select) cannot be filtered with 'lt': use one of eq, ne, "
        "in, empty, not_empty.",
        "points:many": "not a valid number",
        "due:lt:soon": "not a valid date",
        "due:lt:2026-W52-1": "not a valid date for Due",
        "due:eq:2026W521": "not a valid date for Due",
        "due:gte:2026-001": "not a valid date for Due",
        "due:in:2026-01-05,2026-W01-1": "not a valid date for Due",
        "urgent:contains:t": "with 'contains': use one of eq, ne, empty, not_empty.",
        "title:contains:": "needs a value",
        "nope:1": "Unknown field 'nope'",
        "status": "is not a filter",
        "points:gt:": "needs a value",
        "status:in:, ,": "needs a value",
        "status:in:" + ",".join(["todo"] * 51): "at most 50",
    }
    for flt, message in cases.items():
        error = api(flt, expect=400)["error"]
        assert [d["field"] for d in error["details"]] == ["filter"], flt
        assert message in error["details"][0]["message"], (flt, error)
    error = api(*["status:todo"] * 11, expect=400)["error"]
    assert error["details"][0]["field"] == "filter"


@pytest.mark.parametrize(
    ("flt", "message"),
    [
        ("due:between:a", "Unknown operator 'between' for due (operators: eq, ne, lt, lte, gt, "),
        ("title:bogus:x", "to match text holding ':', write title:eq:bogus:x"),
        ("due:empty:x", "'empty' takes no value: write due:empty."),
        ("points:NOT_EMPTY:3", "'not_empty' takes no value: write points:not_empty."),
    ],
)
def test_an_operator_is_one_there_is_taking_what_it_takes(api, tasks, flt, message):
    (detail,) = api(flt, expect=400)["error"]["details"]
    assert detail["field"] == "filter" and message in detail["message"]


def test_a_value_holding_colons_is_matched_with_eq(world, api, tasks):
    make(world, "Note: call Bob")
    assert titles(api("title:eq:Note: call Bob")) == {"Note: call Bob"}
    assert titles(api("title:Note 2: never")) == set()  # no word before its colon: eq


def test_a_type_takes_its_operators_listed_once_in_the_order_of_all(api, tasks):
    message = api("notes:lt:x", expect=400)["error"]["details"][0]["message"]
    assert message.endswith("use one of eq, ne, contains, empty, not_empty.")


# ---- sorting, cursors and the total -------------------------------------------------------


def _walk(api, *filters: str, sort: str, limit: int) -> tuple[list[int], set[int]]:
    ids: list[int] = []
    totals = set()
    cursor = None
    while True:
        params = {"sort": sort, "limit": limit} | ({"cursor": cursor} if cursor else {})
        answer = api(*filters, **params)
        ids += [item["id"] for item in answer["items"]]
        totals.add(answer["total"])
        cursor = answer["next_cursor"]
        if cursor is None:
            return ids, totals


@pytest.mark.parametrize("sort", ["points", "-points", "status", "-due", "assignee", "-title"])
def test_every_page_of_a_sort_in_order_with_ties_broken_by_id(world, api, sort):
    rng = random.Random(sort)
    people = [world.a.users[r].id for r in ("member", "admin", "owner")]
    for _ in range(40):
        values = {
            "points": rng.choice([1, 2, 3, None]),
            "status": rng.choice(["todo", "doing", "done", None]),
            "due": rng.choice([None, (TODAY + timedelta(days=rng.randint(-3, 3))).isoformat()]),
            "assignee": rng.choice([*people, None]),
        }
        make(world, f"Task {rng.randint(0, 9)}", **{k: v for k, v in values.items() if v})
    everything = api(limit=100)["items"]
    names = {u.id: u.name.lower() for u in world.a.users.values()}
    key, descending = sort.lstrip("-"), sort.startswith("-")

    def value(item):
        raw = item["title"] if key == "title" else item["values"].get(key)
        return (
            names.get(raw)
            if key == "assignee" and raw
            else (raw.lower() if key == "title" else raw)
        )

    present = sorted(
        (i for i in everything if value(i) is not None),
        key=lambda i: (value(i), i["id"]),
        reverse=descending,
    )
    missing = sorted(
        (i for i in everything if value(i) is None), key=lambda i: i["id"], reverse=descending
    )
    expected = [i["id"] for i in present + missing]
    ids, totals = _walk(api, sort=sort, limit=7)
    assert ids == expected
    assert totals == {len(expected)}


def test_filtered_sorted_pages_and_their_total(world, api, tasks):
    for i in range(12):
        make(world, f"Open {i}", status="todo", points=i % 3, due=TODAY.isoformat())
    ids, totals = _walk(api, "status:todo", "points:not_empty", sort="-points", limit=5)
    assert len(ids) == len(set(ids)) == 14  # 12, with Write docs and Plan Q3
    assert totals == {14}


@pytest.mark.parametrize("sort", ["due", "-due", "points", "-points"])
def test_a_sort_on_a_filtered_field_pages_in_order_and_sees_only_the_callers(world, api, sort):
    rng = random.Random(sort)
    for i in range(40):
        due = TODAY + timedelta(days=rng.randint(-6, 6))
        values = {"status": rng.choice(["todo", "doing", "done"]), "points": rng.randint(0, 4)}
        make(world, f"Walk {i}", due=due.isoformat(), **values)
    make(world, "Owner's overdue", "private", status="todo", points=1, due="2000-01-01")
    key, descending = sort.lstrip("-"), sort.startswith("-")
    ranged = "due:lt:today" if key == "due" else "points:gte:1"
    everything = [i for i in api(limit=100)["items"] if i["title"].startswith("Walk")]
    matching = [
        i
        for i in everything
        if i["values"]["status"] in ("todo", "doing")
        and (i["values"]["due"] < TODAY.isoformat() if key == "due" else i["values"]["points"] >= 1)
    ]
    matching.sort(key=lambda i: (i["values"][key], i["id"]), reverse=descending)
    ids, totals = _walk(api, "status:in:todo,doing", ranged, sort=sort, limit=4)
    assert ids == [i["id"] for i in matching] and len(ids) > 8
    assert totals == {len(matching)}


def test_a_total_past_the_cap_says_more_than_the_cap(monkeypatch, app, api, tasks):
    configure(monkeypatch, app, RECORDS_LIST_TOTAL_CAP=2)
    everything = api(limit=1)  # six: the five and Acme's public task
    assert (everything["total"], everything["total_is_lower_bound"]) == (2, True)
    assert everything["next_cursor"] is not None
    walked = api("status:in:todo,doing", "due:not_empty", sort="due", limit=1)
    assert (walked["total"], walked["total_is_lower_bound"]) == (2, True)
    # A sort over every match counts them all anyway: that total is exact (three of the
    # five, and Acme's public task).
    sorted_all = api("status:in:todo,doing", sort="-title")
    assert (sorted_all["total"], sorted_all["total_is_lower_bound"]) == (4, False)
    # A first page that holds every match knows how many there are.
    exact = api("status:in:todo,doing", "due:lt:today", sort="due")
    assert (exact["total"], exact["total_is_lower_bound"]) == (2, False)
    assert api("points:gte:0", sort="points", limit=100)["total"] > 2


def test_the_page_and_the_assistant_say_more_than_the_cap(
    monkeypatch, app, login, world, scripted, tasks
):
    configure(monkeypatch, app, RECORDS_LIST_TOTAL_CAP=2)
    browser = login("member@acme.test")
    for i in range(PAGE_SIZE):
        make(world, f"More {i}", due=TODAY.isoformat())
    walked = {"filter": "due:not_empty", "sort": "due"}  # more than a page of them
    assert "More than 2 records match" in soup_of(browser.get(LIST, query_string=walked)).text
    scripted.script.add([Say("Noted.")])
    browser.post(
        "/chat/stream",
        data={
            "text": "Close these",
            "page_route": LIST,
            "page_model": "tasks",
            "page_query": "?filter=status:in:todo,doing&sort=due",
        },
    ).get_data()
    sent = scripted.requests[-1].messages[-1].content[0].text
    assert "(more than 2 records match)" in sent


def test_a_cursor_belongs_to_its_sort(api, tasks):
    first = api(sort="points", limit=2)
    error = api(sort="-points", cursor=first["next_cursor"], expect=400)["error"]
    assert error["details"][0]["field"] == "cursor"
    for bad in ("garbage!", "W10", "WyJwb2ludHMiLDEsdHJ1ZV0"):
        assert (
            api(sort="points", cursor=bad, expect=400)["error"]["details"][0]["field"] == "cursor"
        )
    error = api(sort="colour", expect=400)["error"]
    assert error["details"][0]["field"] == "sort" and "Cannot sort by 'colour'" in error["message"]


@pytest.mark.parametrize("sort", ["--due", "+due", "-+due", "- due"])
def test_a_sort_is_a_key_with_at_most_one_minus(api, tasks, sort):
    (detail,) = api(sort=sort, expect=400)["error"]["details"]
    assert detail["field"] == "sort" and f"Cannot sort by '{sort}'" in detail["message"]
    known = detail["message"].split("use one of: ")[1].split(";")[0].split(", ")
    assert len(known) == len(set(known)) and "title" in known  # a field called title, once


def test_the_default_order_is_newest_first_with_id_cursors(api, tasks):
    answer = api(limit=2)
    assert [i["title"] for i in answer["items"]] == ["Untriaged", "Plan Q3"]
    # The member's key sees the org's records: the five, and Acme's public task.
    assert answer["next_cursor"].isdigit() and answer["total"] == 6


# ---- what a caller may see, and the index kept in step ------------------------------------


def test_filters_and_sorts_see_only_what_the_caller_may(world, app, tasks):
    make(world, "Owner's secret", visibility="private", status="todo", points=99)
    factories.make_record(
        world.b.principal("owner"), world.b.model, "Globex todo", status="todo", points=99
    )
    client = app.test_client()
    for role, sees_secret in (("member", False), ("admin", True)):
        headers = {"Authorization": f"Bearer {world.a.keys[role]}"}
        answer = client.get(
            API_LIST, query_string={"filter": "points:gte:9", "sort": "-points"}, headers=headers
        ).get_json()
        assert ("Owner's secret" in titles(answer)) is sees_secret
        assert "Globex todo" not in titles(answer)
        assert answer["total"] == (1 if sees_secret else 0)


def index_of(record_id: int) -> dict[str, object]:
    rows = db.session.scalars(select(RecordValue).where(RecordValue.record_id == record_id))
    return {r.field: r.text_value if r.text_value is not None else r.number_value for r in rows}


def test_the_index_follows_every_write(world, api):
    owner = world.a.principal("owner")
    record = make(world, "Tracked", status="todo", points=3)
    assert index_of(record.id) == {"title": "tracked", "status": "todo", "points": 3.0}
    services.update_record(owner, world.a.model, record.id, {"status": "done", "points": None})
    assert index_of(record.id) == {"title": "tracked", "status": "done"}
    assert titles(api("status:done")) == {"Tracked"}
    assert "Tracked" not in titles(api("status:todo"))
    field = next(f for f in world.a.model.fields if f.key == "status")
    services.delete_field(owner, field)
    assert index_of(record.id) == {"title": "tracked"}
    services.delete_record(owner, world.a.model, record.id)
    assert index_of(record.id) == {}


def test_a_changed_value_is_rewritten_in_place_and_an_unseen_change_still_followed(world):
    owner = world.a.principal("owner")
    record = make(world, "Tracked", status="todo", points=3)
    seen: list[str] = []

    def listen(conn, cursor, statement, parameters, context, executemany):
        if "record_values" in statement:
            seen.append(statement.split()[0])

    event.listen(db.engine, "before_cursor_execute", listen)
    try:
        services.update_record(owner, world.a.model, record.id, {"status": "done"})
    finally:
        event.remove(db.engine, "before_cursor_execute", listen)
    assert seen == ["INSERT"]  # one upsert: nothing to take away
    assert index_of(record.id) == {"title": "tracked", "status": "done", "points": 3.0}
    # Changed in place and marked (the session has no copy of what the values were): the
    # rows of fields it has no more still go.
    row = db.session.get(Record, record.id)
    del row.values["points"]
    row.values["status"] = "doing"
    flag_modified(row, "values")
    db.session.commit()
    assert index_of(record.id) == {"title": "tracked", "status": "doing"}


def test_deleting_a_model_leaves_no_index_rows(world):
    owner = world.a.principal("owner")
    model = factories.make_tasks_model(owner, key="chores")
    record_id = factories.make_record(owner, model, "Sweep", status="todo").id
    assert index_of(record_id) == {"title": "sweep", "status": "todo"}
    services.delete_model(owner, model)
    assert index_of(record_id) == {}


# ---- the records page ---------------------------------------------------------------------


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def test_the_toolbar_keeps_filters_and_sort_in_the_url(login, world, tasks):
    browser = login("member@acme.test")
    rows = {
        "ff": ["status", "due", ""],
        "fo": ["in", "lt", "eq"],
        "fv": ["todo,doing", "today", ""],
    }
    response = browser.get(LIST, query_string={**rows, "sort": "-points"})
    assert response.status_code == 303
    url = urlsplit(response.headers["Location"])
    assert parse_qs(url.query) == {
        "filter": ["status:in:todo,doing", "due:lt:today"],
        "sort": ["-points"],
    }
    page = soup_of(browser.get(response.headers["Location"]))
    assert [a.get_text() for a in page.select("table tbody tr td a")] == ["Fix login", "Write docs"]
    assert "2 records match" in page.get_text()
    shown = [
        (
            r.select_one("[name=ff] [selected]")["value"],
            r.select_one("[name=fo] [selected]")["value"],
            r.select_one("[name=fv]")["value"],
        )
        for r in page.select(".filter-row")[:2]
    ]
    assert shown == [("status", "in", "todo,doing"), ("due", "lt", "today")]
    assert page.select_one("#sort [selected]")["value"] == "-points"
    # An htmx request gets the table and the address to show.
    partial = browser.get(
        LIST,
        query_string={**rows, "sort": "-points"},
        headers={"HX-Request": "true", "HX-Target": "#records-table"},
    )
    assert partial.status_code == 200
    assert partial.headers["HX-Push-Url"] == response.headers["Location"]


def test_the_next_page_keeps_filters_and_sort(login, world):
    for i in range(30):
        make(world, f"Bulk {i:02d}", status="todo", points=i)
    browser = login("member@acme.test")
    first = soup_of(browser.get(LIST, query_string={"filter": "status:todo", "sort": "points"}))
    link = first.find("a", string=lambda s: s and "Next page" in s)["href"]
    assert parse_qs(urlsplit(link).query)["filter"] == ["status:eq:todo"]
    second = soup_of(browser.get(link))
    names = [a.get_text() for a in second.select("table tbody tr td a")]
    assert names[0] == "Bulk 25" and "Acme public task" in names


def test_these_on_a_filtered_page_means_the_filtered_records(login, world, scripted, tasks):
    scripted.script.add([Say("Noted.")])
    browser = login("member@acme.test")
    response = browser.post(
        "/chat/stream",
        data={
            "text": "Close these",
            "page_route": LIST,
            "page_model": "tasks",
            "page_query": "?filter=status:in:todo,doing&filter=due:lt:today&sort=due",
        },
    )
    response.get_data()
    sent = scripted.requests[-1].messages[-1].content[0].text
    assert '"filter": ["status:in:todo,doing", "due:lt:today"]' in sent
    assert '"sort": "due"' in sent and "(2 records match)" in sent
    # A query this user cannot read adds nothing, and is no error.
    scripted.script.add([Say("Noted.")])
    browser.post(
        "/chat/stream",
        data={
            "text": "Hi",
            "page_route": LIST,
            "page_model": "tasks",
            "page_query": "?sort=secret",
        },
    ).get_data()
    assert "records_list" not in scripted.requests[-1].messages[-1].content[0].text


def test_a_member_sees_their_own_private_records_in_filtered_lists(world, login, tasks):
    member = world.a.principal("member")
    mine = factories.make_record(member, world.a.model, "Mine, private", "private", status="todo")
    make(world, "Owner's private", visibility="private", status="todo")
    browser = login("member@acme.test")
    for sort in ("", "-points", "status"):
        page = BeautifulSoup(
            browser.get(LIST, query_string={"filter": "status:todo", "sort": sort}).get_data(
                as_text=True
            ),
            "html.parser",
        )
        shown = {a.get_text() for a in page.select("table tbody tr td a")}
        assert "Mine, private" in shown and "Owner's private" not in shown, sort
    # Making it shared or private again moves it in and out of others' filtered lists.
    viewer = world.a.principal("viewer")
    from monark.records import queries

    def viewer_sees() -> bool:
        params = queries.ListParams.parse(world.a.model, None, ["status:todo"], "points")
        page = queries.list_records(viewer, world.a.model, params, limit=100)
        return mine.id in {r.id for r in page.items}

    assert not viewer_sees()
    services.update_record(member, world.a.model, mine.id, {}, visibility="org")
    assert viewer_sees()
    assert index_of(mine.id)["status"] == "todo"
    services.update_record(member, world.a.model, mine.id, {}, visibility="private")
    assert not viewer_sees()


def test_forged_cursors_holding_text_no_database_takes_are_refused(api, tasks):
    import base64
    import json

    for value in ("\ud800", "a\x00b"):
        raw = json.dumps(["due", value, 5]).encode()
        cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        error = api(sort="due", cursor=cursor, expect=400)["error"]
        assert error["details"][0]["field"] == "cursor"


def test_long_text_matches_whole_in_any_script(world, api):
    title = "a" * 200 + " Émile tail"
    make(world, title)
    assert titles(api("title:contains:émile tail")) == {title}
    assert titles(api(f"title:eq:{title.upper()}")) == {title}
    assert title not in titles(api(f"title:ne:{title.lower()}"))


def test_contains_is_bounded(api, tasks):
    error = api("title:contains:" + "a" * 101, expect=400)["error"]
    assert "at most 100 characters" in error["details"][0]["message"]


def test_an_unknown_operator_from_the_toolbar_is_named(login, world, tasks):
    browser = login("member@acme.test")
    page = BeautifulSoup(
        browser.get(LIST, query_string={"ff": "title", "fo": "bogus", "fv": "x"}).get_data(
            as_text=True
        ),
        "html.parser",
    )
    assert "Unknown operator 'bogus'" in page.select_one("#records-table [role=alert]").get_text()
