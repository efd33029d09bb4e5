"""The dispatcher: the one entry for tool calls, dry runs and the rehearsal of held writes."""

from __future__ import annotations

import flask
import pytest
from sqlalchemy import func, select

from monark.api.dispatch import dispatch, dispatch_route
from monark.api.routes import V1_ROUTES
from monark.chat.models import ToolCall
from monark.core.errors import ValidationFailed
from monark.extensions import db
from monark.records.models import Record
from tests.factories import make_key

RECORDS = "/api/v1/models/tasks/records"
CREATE = next(r for r in V1_ROUTES if r.name == "records_create")


def titled(title: str) -> int:
    return db.session.scalar(select(func.count()).where(Record.title == title))


def test_a_dry_run_answers_as_the_view_and_keeps_nothing(world):
    owner = world.a.principal("owner")
    tried = dispatch(owner, "POST", RECORDS, json_body={"values": {"title": "Tried"}}, dry_run=True)
    assert tried.status == 201 and tried.body["title"] == "Tried"
    assert titled("Tried") == 0
    refused = dispatch(
        world.a.principal("viewer"), "POST", RECORDS, json_body={"values": {"title": "No"}}
    )
    assert refused.status == 403


def test_a_route_is_called_with_a_tools_flat_arguments_checked_by_its_models(world):
    owner = world.a.principal("owner")
    made = dispatch_route(owner, CREATE, {"model": "tasks", "values": {"title": "Flat"}})
    assert made.status == 201 and titled("Flat") == 1
    with pytest.raises(ValidationFailed) as err:
        dispatch_route(owner, CREATE, {"model": "tasks", "nope": 1})
    assert [d["field"] for d in err.value.details] == ["nope"]


def test_a_held_write_is_parsed_once_by_its_own_view(app, world, monkeypatch):
    """The hold asks the dispatcher to rehearse the request: the view parses and checks it,
    and nothing beside it parses the request again."""
    token = make_key(world.a.principal("owner"), "member", "Agent", writes_need_approval=True)
    body_model = CREATE.body_model
    validate = body_model.model_validate
    parsed: list[object] = []

    def counted(data, *args, **kwargs):
        parsed.append(data)
        return validate(data, *args, **kwargs)

    monkeypatch.setattr(body_model, "model_validate", counted)
    response = app.test_client().post(
        RECORDS, json={"values": {"title": "Once"}}, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 202, response.get_data(as_text=True)
    assert parsed == [{"values": {"title": "Once"}}]
    assert titled("Once") == 0


def test_an_error_the_app_raises_on_leaves_no_request_context_behind(app, world, monkeypatch):
    """An unhandled error (raised on under TESTING, as the app propagates it) still pops the
    call's request context, as ``Flask.wsgi_app`` would."""

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("monark.api.routes.queries.list_records", broken)
    with app.app_context():
        with pytest.raises(RuntimeError, match="boom"):
            dispatch(world.a.principal("owner"), "GET", RECORDS)
        assert not flask.has_request_context()


def test_a_held_write_whose_body_is_not_json_is_refused_by_the_view_and_never_held(app, world):
    token = make_key(world.a.principal("owner"), "member", "Agent", writes_need_approval=True)
    response = app.test_client().post(
        RECORDS,
        data=b'{"values": {"title": "Broken"',
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert response.status_code == 400, response.get_data(as_text=True)
    assert response.get_json()["error"]["details"][0]["field"] == "body"
    assert db.session.scalar(select(func.count()).select_from(ToolCall)) == 0
