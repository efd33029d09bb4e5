"""records_query: read-only SQL over the records a caller can see, and nothing else.

Answers come from a private in-memory database holding the caller's visible rows; the
catalogue of attempts below is refused or inert, on SQLite and on PostgreSQL alike.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from monark.api.routes import V1_ROUTES
from monark.assistant.tools import build_chat_toolset
from monark.core.settings import settings
from monark.extensions import db
from monark.records import services
from monark.records.models import Record
from tests import factories
from tests.tuning import reconfigure


@pytest.fixture
def acme(app, world):
    """Acme's tasks: five more, with statuses, points, dates and assignees; Globex has a
    ``contacts`` model Acme must never reach."""
    a = world.a
    owner, member = a.principal("owner"), a.principal("member")
    users = a.users
    rows = [
        ("Write docs", "todo", 3, "2026-01-10", True, users["member"].id),
        ("Fix login", "doing", 5, "2026-02-01", False, users["member"].id),
        ("Ship it", "done", 8, "2026-01-05", False, users["admin"].id),
        ("Plan Q3", "todo", 2, "2099-01-01", False, users["admin"].id),
    ]
    for title, status, points, due, urgent, assignee in rows:
        factories.make_record(
            owner,
            a.model,
            title,
            status=status,
            points=points,
            due=due,
            urgent=urgent,
            assignee=assignee,
        )
    factories.make_record(member, a.model, "Member secret", "private", status="todo", points=100)
    contacts = services.create_model(world.b.principal("owner"), "contacts", "Contacts", "")
    services.add_field(world.b.principal("owner"), contacts, key="name", label="Name", type="text")
    services.create_record(world.b.principal("owner"), contacts, {"name": "Zed"}, "org")
    reconfigure(app, RECORDS_QUERY_TIMEOUT=3.0)
    return a


def query(app, key: str, sql: str):
    client = app.test_client()
    return client.get(
        "/api/v1/query", query_string={"sql": sql}, headers={"Authorization": f"Bearer {key}"}
    )


def rows(app, key: str, sql: str) -> list[list]:
    response = query(app, key, sql)
    assert response.status_code == 200, response.json
    return response.json["rows"]


def refusal(app, key: str, sql: str) -> str:
    response = query(app, key, sql)
    assert response.status_code == 400, response.json
    (detail,) = response.json["error"]["details"]
    assert detail["field"] == "sql"
    return detail["message"]


def test_counts_per_status_and_assignee_with_names(app, acme):
    key = acme.keys["admin"]
    assert rows(app, key, "SELECT status, count(*) FROM tasks GROUP BY status ORDER BY status") == [
        [None, 1],
        ["doing", 1],
        ["done", 1],
        ["todo", 4],
    ]
    overdue = rows(
        app,
        key,
        "SELECT assignee_name, count(*) AS n FROM tasks WHERE due < '2026-06-01' "
        "AND status != 'done' GROUP BY assignee ORDER BY n DESC",
    )
    assert overdue == [["Acme Member", 2]]


def test_columns_are_typed(app, acme):
    key = acme.keys["admin"]
    (row,) = rows(
        app,
        key,
        "SELECT typeof(points), points * 2, urgent, typeof(id), date(due, '+1 day'), "
        "substr(created_at, 1, 4) GLOB '[0-9][0-9][0-9][0-9]' FROM tasks "
        "WHERE title = 'Write docs'",
    )
    assert row == ["real", 6.0, 1, "integer", "2026-01-11", 1]
    assert rows(app, key, "SELECT sum(points), max(due) FROM tasks WHERE urgent = 0") == [
        [15.0, "2099-01-01"]
    ]


def test_window_functions_ctes_and_joins_work(app, acme):
    key = acme.keys["admin"]
    ranked = rows(
        app,
        key,
        "WITH p AS (SELECT title, points FROM tasks WHERE points IS NOT NULL) "
        "SELECT title, rank() OVER (ORDER BY points DESC) FROM p ORDER BY 2 LIMIT 2",
    )
    assert ranked == [["Member secret", 1], ["Ship it", 2]]
    same = rows(
        app,
        key,
        "SELECT count(*) FROM tasks a JOIN tasks b ON a.assignee = b.assignee AND a.id < b.id",
    )
    assert same == [[2]]


def test_private_records_reach_only_who_may_see_them(app, acme):
    sql = "SELECT title FROM tasks WHERE visibility = 'private' ORDER BY title"
    assert rows(app, acme.keys["viewer"], sql) == []
    assert rows(app, acme.keys["owner"], sql) == [["Acme private task"], ["Member secret"]]
    # The member's own key sees the member's records only through the member's eyes:
    # API keys act with their role, not as the member, so private ones stay hidden.
    assert rows(app, acme.keys["member"], sql) == []


def test_the_assistant_sees_what_its_user_sees(app, acme):
    toolset = build_chat_toolset(V1_ROUTES)
    sql = "SELECT title FROM tasks WHERE visibility = 'private' ORDER BY title"
    member = acme.principal("member").via_assistant(1)
    outcome = toolset.execute(member, "records_query", {"sql": sql})
    assert outcome.ok and outcome.result["rows"] == [["Acme private task"], ["Member secret"]]
    viewer = acme.principal("viewer").via_assistant(1)
    assert toolset.execute(viewer, "records_query", {"sql": sql}).result["rows"] == []


def test_the_tool_description_lists_the_callers_tables(app, acme, world):
    toolset = build_chat_toolset(V1_ROUTES)
    spec = {s.name: s for s in toolset.specs(acme.principal("member"))}["records_query"]
    assert "tasks(id, title, status, points number, due date, urgent boolean" in spec.description
    assert "assignee user, assignee_name" in spec.description
    assert "contacts" not in spec.description
    globex = {s.name: s for s in toolset.specs(world.b.principal("member"))}["records_query"]
    assert "contacts(id, title, name, created_at" in globex.description
    # The same for every step of a turn: built from the models alone.
    again = {s.name: s for s in toolset.specs(acme.principal("member"))}["records_query"]
    assert again.description == spec.description


def test_the_tables_endpoint_lists_columns(app, acme):
    client = app.test_client()
    response = client.get(
        "/api/v1/query/tables", headers={"Authorization": f"Bearer {acme.keys['viewer']}"}
    )
    (tasks,) = response.json["tables"]
    columns = {c["name"]: (c["type"], c["field_type"]) for c in tasks["columns"]}
    assert columns["points"] == ("REAL", "number")
    assert columns["assignee_name"] == ("TEXT", "user")
    assert columns["created_at"] == ("TEXT", None)


# ---- the catalogue of attempts --------------------------------------------------------------

REFUSED = [
    ("SELECT 1; SELECT 2", "One statement only"),
    ("SELECT 1 -- hidden\n; DROP TABLE records", "One statement only"),
    ("WITH x AS (DELETE FROM tasks RETURNING *) SELECT * FROM x", "DELETE is not"),
    ("WITH x AS (INSERT INTO tasks(id) VALUES (1) RETURNING id) SELECT * FROM x", "INSERT"),
    ("ATTACH DATABASE '/tmp/monark-x.db' AS x", "start with SELECT"),
    ("SELECT 1 FROM tasks; ATTACH DATABASE ':memory:' AS x", "One statement only"),
    ("PRAGMA table_info(tasks)", "start with SELECT"),
    ("SELECT * FROM pragma_table_info('tasks')", "Only reading the model tables"),
    ("SELECT count(*) FROM sqlite_master", "There is no table"),
    ("SELECT load_extension('/tmp/evil')", "load_extension() is not allowed"),
    ("SELECT LOAD_EXTENSION ('/tmp/evil')", "load_extension() is not allowed"),
    ("SELECT pg_read_file('/etc/passwd')", "pg_read_file() is not allowed"),
    ("SELECT lo_import('/etc/passwd')", "lo_import() is not allowed"),
    ("SELECT * FROM dblink('host=x', 'select 1') AS t(a int)", "dblink() is not allowed"),
    ("SELECT set_config('role', 'postgres', false)", "set_config() is not allowed"),
    ("SELECT pg_sleep(10)", "pg_sleep() is not allowed"),
    ("SELECT randomblob(1000000000)", "randomblob() is not allowed"),
    ("SELECT sqlite_version()", "sqlite_version() is not allowed"),
    ("SELECT json('{}')", "json() is not allowed"),
    ("SELECT * FROM records", "no such table: records"),
    ("SELECT * FROM users", "no such table: users"),
    ("SELECT * FROM api_keys", "no such table: api_keys"),
    ("SELECT * FROM contacts", "no such table: contacts"),
    ("SELECT * FROM sqlite_master", "There is no table"),
    ("SELECT * FROM sqlite_schema", "There is no table"),
    ("SELECT * FROM main.sqlite_master", "There is no table"),
    ("SELECT * FROM temp.sqlite_master", "There is no table"),
    ("SELECT * FROM information_schema.tables", "no such table: information_schema.tables"),
    ("SELECT * FROM pg_catalog.pg_tables", "pg_catalog"),
    (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000) "
        "SELECT length(group_concat('xxxxxxxxxx', '')) FROM c",
        "past 250 KB",
    ),
    ("SELECT x'00' || zeroblob(1 << 30)", "zeroblob() is not allowed"),
    ("DELETE FROM tasks", "start with SELECT"),
    ("", "Write one SELECT"),
    ("SELECT * FROM tasks WHERE title = 'x' UNION SELECT name FROM contacts", "contacts"),
]


@pytest.mark.parametrize(("sql", "expected"), REFUSED, ids=[s[:40] for s, _ in REFUSED])
def test_attempts_are_refused_with_a_clear_reason(app, acme, sql, expected):
    assert expected in refusal(app, acme.keys["owner"], sql)


@pytest.mark.parametrize("word", ["delete", "update", "insert", "drop"])
def test_a_write_word_says_how_to_name_a_column_like_it(app, acme, word):
    message = refusal(app, acme.keys["owner"], f"select {word} from tasks")
    assert message == (
        f"Only reading is allowed: {word.upper()} is not (a column of that name goes in "
        f'double quotes: "{word}").'
    )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT printf('%0250000d', 0)",
        "SELECT printf('%0900000d', 0)",
        "SELECT format('%0250000d', 0)",
        "SELECT length(printf('%.*c', 2000000, 'x'))",
        "SELECT count(*) FROM tasks WHERE printf('%0300000d', points) IS NULL",
    ],
)
def test_printf_past_the_length_limit_is_refused_like_any_value_grown_too_long(app, acme, sql):
    # SQLite's own printf answers NULL there, which would be a wrong answer without a word.
    assert refusal(app, acme.keys["viewer"], sql).startswith("A value grew past 250 KB")


def test_printf_within_the_limit_answers_as_sqlite_does(app, acme):
    sql = (
        "SELECT printf('%05d|%.2f|%s', 42, 3.14159, title), format('%s-%s', 'a', 'b'), "
        "printf(''), printf(NULL), length(printf('%0200000d', 0)) "
        "FROM tasks WHERE title = 'Ship it'"
    )
    assert rows(app, acme.keys["viewer"], sql) == [
        ["00042|3.14|Ship it", "a-b", None, None, 200_000]
    ]


ANSWERS_AT_THE_EDGE = [
    # 300 values of 3,990 characters: each under the value limit, five of them about the cap.
    "WITH RECURSIVE c(v) AS (SELECT printf('%.*c', 3990, 'y') UNION ALL SELECT v FROM c "
    "LIMIT 300) SELECT v FROM c",
    # Five rows, each past the cap alone.
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5) "
    "SELECT printf('%0240000d', 0) FROM c",
    # Small numbers, which the API writes longer (0.00001) than a JSON column (1e-05).
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300) "
    "SELECT " + ", ".join(f"0.00001 * {i}" for i in range(1, 21)) + " FROM c",
    # Text that takes more room escaped (as stored) than in UTF-8 (as sent).
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300) "
    "SELECT printf('%.*c', 700, 'é') AS \"é\", x FROM c",
]


@pytest.mark.parametrize("sql", ANSWERS_AT_THE_EDGE, ids=["many", "wide", "numbers", "escaped"])
def test_the_whole_answer_stays_within_the_byte_limit_as_sent_and_as_stored(app, acme, sql):
    limit = app.config["RECORDS_QUERY_MAX_BYTES"]
    response = query(app, acme.keys["viewer"], sql)
    assert response.status_code == 200, response.json
    body = response.json
    assert body["truncated"] and body["note"]
    assert len(response.get_data()) <= limit  # what /api/v1/query sends
    assert len(json.dumps(body)) <= limit  # what a tool result's JSON column holds


def test_nothing_was_changed_by_the_attempts(app, acme):
    before = db.session.scalar(select(func.count()).select_from(Record))
    for sql, _ in REFUSED:
        query(app, acme.keys["owner"], sql)
    db.session.rollback()
    assert db.session.scalar(select(func.count()).select_from(Record)) == before


def test_a_recursive_bomb_is_stopped_at_the_time_limit(app, acme):
    reconfigure(app, RECORDS_QUERY_TIMEOUT=0.5)
    message = refusal(
        app,
        acme.keys["owner"],
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    )
    assert "longer than 0.5 s" in message
    doubling = refusal(
        app,
        acme.keys["owner"],
        "WITH RECURSIVE r(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM r) "
        "SELECT max(length(s)) FROM r",
    )
    assert "past 250 KB" in doubling or "longer than" in doubling


def test_words_inside_strings_comments_and_quoted_names_are_only_text(app, acme):
    key = acme.keys["owner"]
    assert rows(app, key, "SELECT 'please delete; drop' AS \"update\" /* ; DROP x */") == [
        ["please delete; drop"]
    ]
    assert rows(app, key, "VALUES (1, 'a')") == [[1, "a"]]
    assert rows(app, key, "select count(*) from tasks;") == [[7]]


def test_long_answers_are_cut_with_a_marker(app, acme):
    response = query(
        app,
        acme.keys["owner"],
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 250) "
        "SELECT x FROM c",
    )
    body = response.json
    assert len(body["rows"]) == 200 and body["row_count"] == 250 and body["truncated"]
    assert body["note"].startswith("…and 50 more rows: only the first 200 rows are shown")
    wide = query(
        app,
        acme.keys["owner"],
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100) "
        "SELECT printf('%.*c', 2000, 'y') FROM c",
    ).json
    assert 0 < len(wide["rows"]) < 100 and wide["truncated"] and "20 KB" in wide["note"]


def _wide(columns: int, width: int = 200_000) -> str:
    """One row of ``columns`` values of ``width`` zeros each (past about 250 KB a value is
    past what a query may build: printf gives NULL)."""
    return "SELECT " + ", ".join(f"printf('%0{width}d', 0) AS c{i}" for i in range(columns))


def test_an_answer_stays_small_whatever_its_first_row(app, acme):
    response = query(app, acme.keys["viewer"], _wide(20))  # 4 MB of zeros, asked for
    assert response.status_code == 200
    assert len(response.get_data()) < app.config["RECORDS_QUERY_MAX_BYTES"] + 1_000
    body = response.json
    (row,) = body["rows"]
    assert len(row) == 20 and body["truncated"]
    assert all(v.startswith("0") and v.endswith("more characters]") for v in row)
    assert "20 long values are cut to fit the 20 KB answer" in body["note"]


def test_one_long_value_is_cut_with_a_marker(app, acme):
    body = query(app, acme.keys["viewer"], _wide(1, 5_000) + ", 'short' AS s").json
    (value, short), limit = body["rows"][0], app.config["RECORDS_QUERY_MAX_VALUE"]
    assert short == "short" and body["truncated"] and body["row_count"] == 1
    assert len(value) <= limit and value.startswith("0" * 3_000)
    assert value.endswith(f"…[cut: {5_000 - value.index('…'):,} more characters]")
    assert f"1 long value is cut past {limit:,} characters" in body["note"]


def test_more_columns_than_the_limit_are_refused(app, acme):
    limit = app.config["RECORDS_QUERY_MAX_COLUMNS"]
    many = "SELECT " + ", ".join(f"{i} AS c{i}" for i in range(limit + 1))
    assert f"more than {limit} columns" in refusal(app, acme.keys["viewer"], many)
    assert len(rows(app, acme.keys["viewer"], many.rsplit(",", 1)[0])[0]) == limit


def test_the_rows_a_query_copies_in_are_bounded(app, acme):
    from dataclasses import replace

    from monark.core.errors import ValidationFailed
    from monark.records import sql

    owner = acme.principal("owner")
    for n in range(20):
        factories.make_record(owner, acme.model, f"Essay {n}", notes="word " * 3_000)
    small = replace(sql.QueryLimits.of(settings(app).query), max_memory=256 * 1024)
    with pytest.raises(ValidationFailed) as refused:
        sql.run_query(owner, "SELECT count(*) FROM tasks WHERE notes LIKE '%word%'", small)
    assert "take more than 0.25 MB" in refused.value.detail_text()
    assert sql.run_query(owner, "SELECT count(*) FROM tasks", small).rows == [[27]]


def test_a_wide_answer_stays_small_in_the_conversation_and_on_its_card(app, acme, scripted, login):
    from monark.chat.models import ToolCall
    from monark.chat.turn.start import SendInput, send_message
    from tests.llm_script import Call, Say

    scripted.script.add([Call("records_query", {"sql": _wide(5)})], [Say("Zeros.")])
    result = send_message(acme.principal("viewer"), SendInput(text="Zeros"))
    stored = db.session.scalars(select(ToolCall)).one()
    assert stored.status == "SUCCEEDED" and stored.result["truncated"]
    assert len(json.dumps(stored.result)) <= app.config["RECORDS_QUERY_MAX_BYTES"]
    page = login(acme.users["viewer"].email).get(f"/chat/conversations/{result.conversation_id}")
    assert page.status_code == 200 and len(page.get_data()) < 100_000


def test_odd_values_come_back_as_json(app, acme):
    (row,) = rows(app, acme.keys["owner"], "SELECT char(55296), x'0102', 1e999, -1e999, NULL")
    assert set(row[0]) == {"\ufffd"}  # a lone surrogate is no text: replaced
    assert row[1:] == ["<2 bytes>", "inf", "-inf", None]


def test_bad_requests_name_the_field(app, acme):
    too_long = query(app, acme.keys["owner"], "SELECT 1" + " " * 10_001)
    assert too_long.status_code == 400
    assert too_long.json["error"]["details"][0]["field"] == "sql"
    client = app.test_client()
    missing = client.get("/api/v1/query", headers={"Authorization": f"Bearer {acme.keys['owner']}"})
    assert missing.status_code == 400 and missing.json["error"]["details"][0]["field"] == "sql"
    nul = query(app, acme.keys["owner"], "SELECT '\x00'")
    assert nul.status_code == 400
    syntax = refusal(app, acme.keys["owner"], "SELECT FROM WHERE")
    assert syntax.startswith("SQL error:")
    column = refusal(app, acme.keys["owner"], "SELECT nope FROM tasks")
    assert "no such column: nope" in column


def test_a_field_named_like_a_record_column_gets_its_own_name(app, world):
    owner = world.a.principal("owner")
    model = services.create_model(owner, "things", "Things", "")
    services.add_field(owner, model, key="id", label="Code", type="text")
    services.add_field(owner, model, key="created_at", label="Made", type="date")
    services.create_record(owner, model, {"id": "A-1", "created_at": "2020-01-01"}, "org")
    result = rows(
        app, world.a.keys["owner"], "SELECT typeof(id), id_field, created_at_field FROM things"
    )
    assert result == [["integer", "A-1", "2020-01-01"]]


# ---- what the model reads of results ------------------------------------------------------


def _tool_result(request, name: str) -> str:
    """The text of the last tool result in a request the model got."""
    from monark.chat.llm.types import ToolResultBlock

    results = [b for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)]
    return [r for r in results if r.name == name][-1].content


def test_a_refused_query_fails_before_anything_runs(app, acme, scripted):
    from monark.chat.models import ToolCall
    from monark.chat.turn.start import SendInput, send_message
    from tests.llm_script import Call, Say

    scripted.script.add(
        [Call("records_query", {"sql": "DELETE FROM tasks"})], [Say("I may only read.")]
    )
    before = db.session.scalar(select(func.count()).select_from(Record))
    result = send_message(acme.principal("member"), SendInput(text="Delete all"))
    (call,) = db.session.scalars(select(ToolCall)).all()
    assert (call.status, call.preview) == ("FAILED", None)  # refused before a preview ran
    assert "start with SELECT" in call.error
    assert "start with SELECT" in _tool_result(scripted.requests[1], "records_query")
    assert result.status == "done"
    assert db.session.scalar(select(func.count()).select_from(Record)) == before


def test_lists_and_answers_reach_the_model_as_compact_rows(app, acme, scripted):
    from monark.chat.models import ToolCall
    from monark.chat.turn.start import SendInput, send_message
    from tests.llm_script import Call, Say

    scripted.script.add(
        [Call("records_list", {"model": "tasks", "limit": 3})],
        [Call("records_query", {"sql": "SELECT status, count(*) FROM tasks GROUP BY 1"})],
        [Say("Done.")],
    )
    send_message(acme.principal("member"), SendInput(text="Tasks?"))
    listed = _tool_result(scripted.requests[1], "records_list")
    assert '"columns": ["id", "title"' in listed and '"rows": [[' in listed
    assert '"values"' not in listed and '"creator_id"' not in listed
    answered = _tool_result(scripted.requests[2], "records_query")
    assert '"row_count"' not in answered  # nothing was left out
    # The stored result (and the user's card) keep everything.
    stored = db.session.scalars(select(ToolCall).order_by(ToolCall.id)).first()
    assert "values" in stored.result["items"][0]


def test_a_long_result_is_cut_for_the_model_with_a_marker(app, acme, scripted):
    from monark.chat.models import ToolCall
    from monark.chat.turn.start import SendInput, send_message
    from tests.llm_script import Call, Say

    owner = acme.principal("owner")
    for n in range(40):
        factories.make_record(owner, acme.model, f"Long {n}", notes="word " * 300)
    scripted.script.add(
        [Call("records_list", {"model": "tasks", "limit": 100})], [Say("That is a lot.")]
    )
    send_message(owner, SendInput(text="Everything"))
    seen = _tool_result(scripted.requests[1], "records_list")
    assert len(seen) < 20_500
    assert "more characters of this result are not shown. Ask for less" in seen
    stored = db.session.scalars(select(ToolCall)).one()
    assert len(stored.result["items"]) == 47  # all of them, for the card
