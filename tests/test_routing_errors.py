"""A request no route takes answers 404 or 405, not the CSRF refusal; real routes keep CSRF."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from monark.core.models import Event
from monark.extensions import db
from monark.records.models import Record

RECORDS = "/api/v1/models/tasks/records"


def counts() -> tuple[int, int]:
    db.session.expire_all()
    return (
        db.session.scalar(select(func.count(Record.id))),
        db.session.scalar(select(func.count(Event.id))),
    )


@pytest.fixture
def key_client(app, world):
    client = app.test_client()
    headers = {"Authorization": f"Bearer {world.a.keys['owner']}"}

    def call(method: str, url: str, **kw):
        return client.open(url, method=method, headers=headers, **kw)

    return call


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_a_wrong_method_on_the_api_is_405_in_the_api_error_format(key_client, method):
    response = key_client(method, RECORDS, json={})
    assert response.status_code == 405
    assert response.get_json()["error"]["code"] == "method_not_allowed"
    assert set(response.headers["Allow"].split(", ")) >= {"GET", "POST"}


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_an_unknown_api_path_is_404_in_the_api_error_format(key_client, method):
    response = key_client(method, "/api/v1/no/such/thing", json={})
    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "not_found"


def test_routing_errors_answer_the_same_signed_in_without_a_token(world, login):
    browser = login("member@acme.test")
    browser.csrf = ""
    assert browser.client.post("/api/v1/no/such/thing", json={}).status_code == 404
    assert browser.client.put(RECORDS, json={}).status_code == 405
    assert browser.client.post("/no/such/page", data={}).status_code == 404
    assert browser.client.delete("/models/tasks/records").status_code == 405


def test_a_signed_in_browser_post_to_a_real_route_without_the_token_is_still_refused(world, login):
    browser = login("member@acme.test")
    before = counts()
    page = browser.client.post("/models/tasks/records/new", data={"v_title": "No token"})
    assert page.status_code == 400 and "CSRF" in page.get_data(as_text=True)
    api = browser.client.post(RECORDS, json={"values": {"title": "No token"}})
    assert api.status_code == 400 and "CSRF" in api.get_json()["error"]["message"]
    wiki = browser.client.post("/wiki/new", data={"title": "No token"})
    assert wiki.status_code == 400
    assert counts() == before
