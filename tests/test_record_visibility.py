"""Who may change a record's visibility: its creator and roles with records.view_private.

Anyone else (a member editing a colleague's record) would otherwise hide the record from
everyone, themselves included. They get a validation error naming ``visibility`` on every
path (service, web form, API, the assistant's tool calls) and nothing is written.
"""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.api.dispatch import dispatch
from monark.core.errors import ValidationFailed
from monark.core.models import Event
from monark.extensions import db
from monark.records import services
from monark.records.models import Record

PRIVATE_LABEL = "Private: only the creator and admins"


def soup_of(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def committed(record_id: int) -> tuple[str, dict, int]:
    """The record's visibility and values, and the event count, as committed."""
    with db.engine.connect() as conn:
        row = conn.execute(
            select(Record.visibility, Record.values).where(Record.id == record_id)
        ).one()
        events = conn.scalar(select(func.count()).select_from(Event))
    return row.visibility, row.values, events


def api_url(record_id: int) -> str:
    return f"/api/v1/models/tasks/records/{record_id}"


def edit_url(record_id: int) -> str:
    return f"/models/tasks/records/{record_id}/edit"


def test_service_refuses_a_member_hiding_someone_elses_record(world):
    member = world.a.principal("member")
    record = world.a.public  # the owner's
    before = committed(record.id)
    with pytest.raises(ValidationFailed) as err:
        services.update_record(
            member, world.a.model, record.id, {"title": "Mine now"}, visibility="private"
        )
    assert "visibility" in err.value.field_errors()
    db.session.rollback()
    assert committed(record.id) == before
    # The same visibility is no change: allowed.
    _, changed = services.update_record(
        member, world.a.model, record.id, {"title": "Renamed"}, visibility="org"
    )
    assert changed == ["title"]


@pytest.mark.parametrize(
    ("role", "record_attr", "allowed"),
    [
        ("member", "public", False),  # the owner's record
        ("member", "private", True),  # the member's own
        ("admin", "public", True),
        ("admin", "private", True),
        ("owner", "private", True),
    ],
)
def test_can_change_visibility(world, role, record_attr, allowed):
    record = getattr(world.a, record_attr)
    assert services.can_change_visibility(world.a.principal(role), record) is allowed


def test_the_edit_form_offers_visibility_only_to_those_who_may_change_it(login, world):
    member = login("member@acme.test")
    others = soup_of(member.get(edit_url(world.a.public.id)))
    assert others.select("input[name=visibility]") == []
    shown = others.select_one("form fieldset .visibility-current").get_text(strip=True)
    assert shown == "Everyone in the organization"

    own = soup_of(member.get(edit_url(world.a.private.id)))
    radios = own.select("input[name=visibility]")
    assert [r["value"] for r in radios] == ["org", "private"]
    assert own.select_one("input[name=visibility][checked]")["value"] == "private"
    labels = [label.get_text(strip=True) for label in own.select("fieldset label.check")]
    assert labels == ["Everyone in the organization", PRIVATE_LABEL]

    admin = login("admin@acme.test")
    page = soup_of(admin.get(edit_url(world.a.public.id)))
    assert len(page.select("input[name=visibility]")) == 2
    new = soup_of(member.get("/models/tasks/records/new"))
    assert len(new.select("input[name=visibility]")) == 2
    assert PRIVATE_LABEL in new.get_text()


def test_the_web_form_refuses_a_forged_visibility_inline_and_writes_nothing(login, world):
    member = login("member@acme.test")
    record = world.a.public
    before = committed(record.id)
    response = member.post(edit_url(record.id), {"v_title": "Hidden", "visibility": "private"})
    assert response.status_code == 422
    soup = soup_of(response)
    error = soup.select_one("fieldset #visibility-error").get_text(strip=True)
    assert "creator or an admin" in error
    assert soup.select_one("form .error[role=alert]") is not None
    assert committed(record.id) == before


def test_the_web_form_without_radios_keeps_the_visibility(login, world):
    member = login("member@acme.test")
    record = world.a.public
    response = member.post(edit_url(record.id), {"v_title": "Edited by the member"})
    assert response.status_code == 303
    visibility, values, _ = committed(record.id)
    assert visibility == "org" and values["title"] == "Edited by the member"
    # The creator may still change their own record's visibility from the form.
    own = world.a.private
    response = member.post(edit_url(own.id), {"v_title": "Mine", "visibility": "org"})
    assert response.status_code == 303
    assert committed(own.id)[0] == "org"


def test_the_api_answers_400_naming_visibility(app, login, world):
    record = world.a.public
    before = committed(record.id)
    body = {"values": {"title": "Hidden"}, "visibility": "private"}
    session = login("member@acme.test").api("PATCH", api_url(record.id), json=body)
    key = app.test_client().patch(
        api_url(record.id),
        json=body,
        headers={"Authorization": f"Bearer {world.a.keys['member']}"},
    )
    for response in (session, key):
        assert response.status_code == 400, response.get_data(as_text=True)
        details = response.get_json()["error"]["details"]
        assert [d["field"] for d in details] == ["visibility"]
        assert details[0]["in"] == "body"
    assert committed(record.id) == before
    # An admin key may (it sees private records anyway).
    admin = app.test_client().patch(
        api_url(record.id),
        json={"values": {}, "visibility": "private"},
        headers={"Authorization": f"Bearer {world.a.keys['admin']}"},
    )
    assert admin.status_code == 200 and admin.get_json()["visibility"] == "private"


def test_the_assistant_tool_path_is_refused_the_same_way(world):
    record = world.a.public
    before = committed(record.id)
    as_assistant = world.a.principal("member").via_assistant(1)
    answer = dispatch(
        as_assistant,
        "PATCH",
        api_url(record.id),
        json_body={"values": {}, "visibility": "private"},
    )
    assert answer.status == 400
    assert [d["field"] for d in answer.error_details()] == ["visibility"]
    assert committed(record.id) == before
    # The member's own record: the assistant may change it for them.
    own = dispatch(
        as_assistant,
        "PATCH",
        api_url(world.a.private.id),
        json_body={"values": {}, "visibility": "org"},
    )
    assert own.status == 200, own.body
    assert committed(world.a.private.id)[0] == "org"
