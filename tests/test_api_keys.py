"""An API key never outranks the person who made it."""

from __future__ import annotations

from sqlalchemy import select

from monark.core.models import Membership
from monark.extensions import db
from tests.factories import make_key, principal


def create(client, token: str, title: str):
    return client.post(
        "/api/v1/models/tasks/records",
        json={"values": {"title": title}},
        headers={"Authorization": f"Bearer {token}"},
    )


def test_a_key_acts_with_its_role_while_its_creator_keeps_theirs(app, world):
    admin = world.a.users["admin"]
    token = make_key(principal(admin, world.a.org, "admin"), "member", "by admin")
    assert create(app.test_client(), token, "Keyed").status_code == 201


def test_demoting_the_creator_caps_their_keys(app, world):
    admin = world.a.users["admin"]
    token = make_key(principal(admin, world.a.org, "admin"), "admin", "admin key")
    membership = db.session.scalar(
        select(Membership).where(
            Membership.user_id == admin.id, Membership.org_id == world.a.org.id
        )
    )
    membership.role = "viewer"
    db.session.commit()
    client = app.test_client()
    refused = create(client, token, "After demotion")
    assert refused.status_code == 403
    assert "viewer" in refused.get_json()["error"]["message"]
    me = client.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"}).get_json()
    assert me["role"] == "viewer"


def test_a_creator_leaving_the_org_disables_their_keys(app, world):
    admin = world.a.users["admin"]
    token = make_key(principal(admin, world.a.org, "admin"), "member", "leaver key")
    db.session.execute(
        db.delete(Membership).where(
            Membership.user_id == admin.id, Membership.org_id == world.a.org.id
        )
    )
    db.session.commit()
    response = create(app.test_client(), token, "After leaving")
    assert response.status_code == 401
    assert "creator left" in response.get_json()["error"]["message"]
