"""Rate limits (``monark.core.ratelimit``): messages per user, turns at once per org, calls
per API key, records_query per principal; 429 with Retry-After and the RateLimit headers;
limits refused at start when absurd; a limiter storage that is down."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark import create_app
from monark.api.routes import V1_ROUTES
from monark.assistant.tools import build_chat_toolset
from monark.chat import store
from monark.chat.models import Conversation, Message, ToolCall
from monark.core.models import utcnow
from monark.core.ratelimit import wait_words
from monark.extensions import db
from tests import factories
from tests.llm_script import Call, Say
from tests.test_chat_stream import post_stream, read
from tests.tuning import configure

# A port nothing listens on: a Redis that is down.
DOWN_REDIS = "redis://127.0.0.1:9/0"


def notice_text(response) -> str:
    soup = BeautifulSoup(response.get_data(as_text=True), "html.parser")
    return soup.select_one(".chat-notice").get_text(" ", strip=True)


def assert_limit_headers(response, limit: int) -> int:
    """The 429's headers: Retry-After (seconds, within the minute) and the RateLimit ones."""
    assert response.status_code == 429
    wait = int(response.headers["Retry-After"])
    assert 1 <= wait <= 60
    assert response.headers["X-RateLimit-Limit"] == str(limit)
    assert response.headers["X-RateLimit-Remaining"] == "0"
    assert int(response.headers["X-RateLimit-Reset"]) > 0
    return wait


def test_messages_past_the_per_minute_limit_get_a_429_notice_with_the_wait(
    app, world, login, scripted, monkeypatch
):
    configure(monkeypatch, app, LIMIT_MESSAGES_PER_MINUTE=2)
    for _ in range(2):
        scripted.script.add([Say("Sure.")])
    browser = login("member@acme.test")
    assert post_stream(browser, "one").status_code == 200
    conversation_id = db.session.scalar(select(Conversation.id))
    assert post_stream(browser, "two", conversation_id=conversation_id).status_code == 200
    refused = post_stream(browser, "three", conversation_id=conversation_id)
    wait = assert_limit_headers(refused, 2)
    said = f"Too many messages: 2 a minute at most; try again in {wait_words(wait)}."
    assert said in notice_text(refused)
    # Nothing of the refused message was stored.
    assert (
        db.session.scalar(select(func.count()).select_from(Message).where(Message.role == "user"))
        == 2
    )
    # Another user has a count of their own.
    scripted.script.add([Say("Hello.")])
    assert post_stream(login("admin@acme.test"), "hi").status_code == 200


def test_retry_counts_as_a_message_too(app, world, login, scripted, monkeypatch):
    configure(monkeypatch, app, LIMIT_MESSAGES_PER_MINUTE=1)
    scripted.script.add([Say("Sure.")])
    browser = login("member@acme.test")
    assert post_stream(browser, "one").status_code == 200
    conversation_id = db.session.scalar(select(Conversation.id))
    refused = browser.post(
        "/chat/retry", {"conversation_id": conversation_id}, headers={"HX-Request": "true"}
    )
    assert_limit_headers(refused, 1)


def _create(title: str) -> list:
    return [Call("records_create", {"model": "tasks", "values": {"title": title}})]


def _waiting_call_id() -> int:
    db.session.rollback()  # the requests share the test's session: read what they stored
    return db.session.scalar(select(ToolCall.id).where(ToolCall.status == "PROPOSED"))


def test_decisions_count_apart_from_messages(app, world, login, scripted, monkeypatch):
    configure(monkeypatch, app, LIMIT_MESSAGES_PER_MINUTE=2, LIMIT_DECISIONS_PER_MINUTE=3)
    # One message, then three confirms, each continuation proposing the next write.
    scripted.script.add(_create("A"), _create("B"), _create("C"), [Say("All three.")])
    browser = login("member@acme.test")
    assert post_stream(browser, "Add three").status_code == 200
    conversation_id = db.session.scalar(select(Conversation.id))
    for _ in range(3):
        decided = read(browser.post("/chat/decide", {"decision": f"confirm:{_waiting_call_id()}"}))
        assert decided.status_code == 200
    # Three decisions used none of the messages' count: the second message goes.
    scripted.script.add(_create("D"))
    assert post_stream(browser, "One more", conversation_id=conversation_id).status_code == 200
    waiting = _waiting_call_id()
    # A fourth decision of any kind is past the decisions' limit, and nothing is decided.
    refused = browser.post("/chat/decide", {"decision": f"confirm:{waiting}"})
    wait = assert_limit_headers(refused, 3)
    said = f"Too many decisions: 3 a minute at most; try again in {wait_words(wait)}."
    assert said in notice_text(refused)
    assert browser.post("/chat/allow", {"tool_call_id": waiting}).status_code == 429
    message_id = db.session.get(ToolCall, waiting).message_id
    group = {"decision": f"confirm:{message_id}", "selected": [str(waiting)]}
    assert browser.post("/chat/decide-group", group).status_code == 429
    assert _waiting_call_id() == waiting
    # And the messages' own limit still holds: a third message is refused.
    third = post_stream(browser, "And another", conversation_id=conversation_id)
    assert_limit_headers(third, 2)
    assert "Too many messages" in notice_text(third)


def test_turns_at_once_per_org_are_counted_from_the_leases(
    app, world, login, scripted, monkeypatch
):
    configure(monkeypatch, app, LIMIT_TURNS_PER_ORG=1)
    # A turn running elsewhere (another instance) in Acme: its conversation holds a lease.
    other = store.create_conversation(world.a.principal("admin"), "Busy")
    other.turn_id, other.turn_lease_until = "elsewhere", utcnow() + timedelta(seconds=30)
    db.session.commit()
    other_id = other.id
    browser = login("member@acme.test")
    refused = post_stream(browser, "hello")
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert "1 replies are being written in this organization at once" in notice_text(refused)
    # The claim was given back: the member's conversation holds no turn.
    db.session.remove()
    mine = db.session.scalars(select(Conversation).where(Conversation.id != other_id)).one()
    mine_id = mine.id
    assert mine.turn_id is None
    # Globex is not Acme.
    scripted.script.add([Say("Hello.")])
    assert post_stream(login("member@globex.test"), "hi").status_code == 200
    # A lease that ran out is a turn that died: it no longer counts.
    db.session.get(Conversation, other_id).turn_lease_until = utcnow() - timedelta(seconds=1)
    db.session.commit()
    scripted.script.add([Say("Hello.")])
    assert post_stream(browser, "again", conversation_id=mine_id).status_code == 200


def test_api_calls_per_key_per_minute(app, world, monkeypatch):
    configure(monkeypatch, app, LIMIT_API_PER_MINUTE=3)
    client = app.test_client()

    def call(key: str):
        return client.get("/api/v1/models", headers={"Authorization": f"Bearer {key}"})

    answers = [call(world.a.keys["member"]) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert [a.headers["X-RateLimit-Remaining"] for a in answers] == ["2", "1", "0"]
    # Retry-After is for a refusal only: under the limit, nothing to wait for.
    assert all("Retry-After" not in a.headers for a in answers)
    refused = call(world.a.keys["member"])
    assert_limit_headers(refused, 3)
    assert refused.json["error"]["code"] == "rate_limited"
    # The count is the key's, not a route's: its other routes and methods are refused too.
    member = {"Authorization": f"Bearer {world.a.keys['member']}"}
    for other in (
        client.get("/api/v1/me", headers=member),
        client.get("/api/v1/models/tasks/records", headers=member),
        client.post("/api/v1/models/tasks/records", json={"values": {}}, headers=member),
    ):
        assert_limit_headers(other, 3)
    # Another key counts on its own.
    assert call(world.a.keys["admin"]).status_code == 200


def test_the_api_limit_is_for_keys_not_pages_or_the_assistant(app, world, login, monkeypatch):
    configure(monkeypatch, app, LIMIT_API_PER_MINUTE=1)
    browser = login("member@acme.test")
    for _ in range(3):
        assert browser.get("/models").status_code == 200
    toolset = build_chat_toolset(V1_ROUTES)
    member = world.a.principal("member").via_assistant(1)
    for _ in range(3):
        assert toolset.execute(member, "records_list", {"model": "tasks"}).ok


def test_records_query_over_the_limit_is_an_error_result_for_the_model(app, world, monkeypatch):
    configure(monkeypatch, app, LIMIT_QUERIES_PER_MINUTE=2)
    toolset = build_chat_toolset(V1_ROUTES)
    member = world.a.principal("member").via_assistant(1)
    sql = {"sql": "SELECT count(*) FROM tasks"}
    assert toolset.execute(member, "records_query", sql).ok
    assert toolset.execute(member, "records_query", sql).ok
    over = toolset.execute(member, "records_query", sql)
    assert not over.ok
    assert "Too many queries: 2 a minute at most; try again in" in over.error
    # Another principal (the admin, or an API key) has a count of its own; over HTTP, 429.
    assert toolset.execute(world.a.principal("admin").via_assistant(1), "records_query", sql).ok
    client = app.test_client()
    headers = {"Authorization": f"Bearer {world.a.keys['member']}"}
    answers = [client.get("/api/v1/query", query_string=sql, headers=headers) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert int(answers[2].headers["Retry-After"]) >= 1
    # The figures are the limit that refused, once (not joined with the key's own).
    assert answers[2].headers.getlist("X-RateLimit-Limit") == ["2"]
    assert answers[2].headers.getlist("X-RateLimit-Remaining") == ["0"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("LIMIT_MESSAGES_PER_MINUTE", -1),
        ("LIMIT_DECISIONS_PER_MINUTE", 10**7),
        ("LIMIT_API_PER_MINUTE", 10**9),
        ("LIMIT_QUERIES_PER_MINUTE", "lots"),
        ("LIMIT_TURNS_PER_ORG", 2.5),
        ("LIMIT_SIGNIN_FAILURES", 0),
        ("LIMIT_SIGNIN_WINDOW", -5),
    ],
)
def test_absurd_limits_are_refused_at_start_naming_the_key(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        create_app({"SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path}/x.db", key: value})


def test_a_limit_from_the_environment_that_is_no_number_names_its_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("LIMIT_API_PER_MINUTE", "many")
    with pytest.raises(RuntimeError, match="LIMIT_API_PER_MINUTE"):
        create_app({"SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path}/x.db"})


@pytest.fixture
def down_app(tmp_path):
    """An app whose limiter storage (Redis) does not answer."""
    from monark.extensions import db as _db

    down = create_app(
        {
            "SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path}/down.db",
            "SECRET_KEY": "down",
            "WTF_CSRF_ENABLED": False,
            "RATELIMIT_STORAGE_URI": DOWN_REDIS,
        }
    )
    with down.app_context():
        _db.create_all()
        yield down
        _db.session.remove()
        _db.engine.dispose()


def test_a_limiter_that_is_down_fails_open_for_pages_with_a_warning(down_app, caplog):
    client = down_app.test_client()
    with caplog.at_level(logging.WARNING):
        answer = client.post("/login", data={"email": "a@b.test", "password": "guess"})
    assert answer.status_code == 401  # checked, not limited
    assert any("sign-in not limited" in r.getMessage() for r in caplog.records)
    # /api/v1: Flask-Limiter swallows the error and the request goes on (to its 401 here).
    assert client.get("/api/v1/models", headers={"Authorization": "Bearer x"}).status_code == 401


def test_a_limiter_that_is_down_fails_closed_for_the_model_path(down_app, caplog):
    from monark.core import ratelimit

    with down_app.test_request_context("/chat/stream"), caplog.at_level(logging.WARNING):
        with pytest.raises(ratelimit.LimiterDown) as refused:
            ratelimit.check_messages(1)
        with pytest.raises(ratelimit.LimiterDown):
            ratelimit.check_decisions(1)
        with pytest.raises(ratelimit.LimiterDown):
            ratelimit.check_queries("1:user:1")
    assert refused.value.status == 503
    assert refused.value.headers["Retry-After"]
    assert any("messages refused" in r.getMessage() for r in caplog.records)


def test_with_rate_limits_off_signing_in_works_and_failures_block_nothing(tmp_path):
    from monark.extensions import db as _db

    off = create_app(
        {
            "SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path}/off.db",
            "SECRET_KEY": "off",
            "WTF_CSRF_ENABLED": False,
            "RATELIMIT_ENABLED": False,
        }
    )
    with off.app_context():
        _db.create_all()
        try:
            user = factories.make_user("off@acme.test")
            factories.add_member(user, factories.make_org("Off"), "owner")
            _db.session.commit()
            client = off.test_client()
            for _ in range(30):  # far past every sign-in limit: none applies
                wrong = client.post("/login", data={"email": user.email, "password": "guess"})
                assert wrong.status_code == 401
            right = client.post(
                "/login", data={"email": user.email, "password": factories.PASSWORD}
            )
            assert right.status_code == 302
        finally:
            _db.session.remove()
            _db.engine.dispose()
