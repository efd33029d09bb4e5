"""Small factories for test data: orgs, users, models, records, API keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import DateTime, Table, text

from monark.core.auth import hash_password
from monark.core.keys import create_key
from monark.core.models import Membership, Org, User, utcnow
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records import services
from monark.records.models import Record, RecordModel

PASSWORD = "correct horse battery"
FAST_HASH = "pbkdf2:sha256:1000"


def make_org(name: str, slug: str | None = None) -> Org:
    org = Org(name=name, slug=slug or name.lower())
    db.session.add(org)
    db.session.commit()
    return org


def make_user(email: str, name: str | None = None) -> User:
    user = User(
        email=email,
        name=name or email.split("@")[0].title(),
        password_hash=hash_password(PASSWORD, FAST_HASH),
    )
    db.session.add(user)
    db.session.commit()
    return user


def add_member(user: User, org: Org, role: str) -> Membership:
    membership = Membership(user_id=user.id, org_id=org.id, role=role)
    db.session.add(membership)
    db.session.commit()
    return membership


def principal(user: User, org: Org, role: str) -> Principal:
    return Principal.for_user(user.id, org.id, role)


def make_tasks_model(owner: Principal, key: str = "tasks") -> RecordModel:
    model = services.create_model(owner, key, key.title(), "Test tasks")
    services.add_field(owner, model, key="title", label="Title", type="text", required=True)
    services.add_field(
        owner, model, key="status", label="Status", type="select", options=["todo", "doing", "done"]
    )
    services.add_field(owner, model, key="points", label="Points", type="number")
    services.add_field(owner, model, key="due", label="Due", type="date")
    services.add_field(owner, model, key="urgent", label="Urgent", type="boolean")
    services.add_field(owner, model, key="assignee", label="Assignee", type="user")
    services.add_field(owner, model, key="notes", label="Notes", type="long_text")
    return model


def make_record(
    actor: Principal, model: RecordModel, title: str, visibility: str = "org", **values: Any
) -> Record:
    return services.create_record(actor, model, {"title": title, **values}, visibility)


def make_key(
    actor: Principal, role: str, name: str = "test key", writes_need_approval: bool = False
) -> str:
    """A key; by default one whose writes run at once (as every key made before approvals)."""
    return create_key(actor, name, role, writes_need_approval)[1]


@dataclass
class OrgWorld:
    org: Org
    users: dict[str, User]
    model: RecordModel
    public: Record
    private: Record  # created by the member: hidden from the viewer and other members
    keys: dict[str, str] = field(default_factory=dict)

    def principal(self, role: str) -> Principal:
        return principal(self.users[role], self.org, role)


@dataclass
class World:
    a: OrgWorld
    b: OrgWorld


def make_org_world(name: str) -> OrgWorld:
    org = make_org(name)
    users = {}
    for role in ("owner", "admin", "member", "viewer"):
        users[role] = make_user(f"{role}@{org.slug}.test", f"{name} {role.title()}")
        add_member(users[role], org, role)
    owner = principal(users["owner"], org, "owner")
    member = principal(users["member"], org, "member")
    model = make_tasks_model(owner)
    public = make_record(owner, model, f"{name} public task", status="todo")
    private = make_record(member, model, f"{name} private task", visibility="private")
    world = OrgWorld(org=org, users=users, model=model, public=public, private=private)
    for role in ("owner", "admin", "member", "viewer"):
        world.keys[role] = make_key(owner, role, f"{role} key")
    return world


def make_world() -> World:
    return World(a=make_org_world("Acme"), b=make_org_world("Globex"))


@dataclass(frozen=True)
class _OrgIds:
    org: int
    users: dict[str, int]
    model: int
    public: int
    private: int
    keys: dict[str, str]


class WorldSnapshot:
    """The demo world made once, kept as its rows; ``restore()`` puts them back (ids as made,
    times moved to now) into emptied tables for one test, far cheaper than making it again."""

    def __init__(self) -> None:
        world = make_world()
        self._ids = tuple(
            _OrgIds(
                org=w.org.id,
                users={role: user.id for role, user in w.users.items()},
                model=w.model.id,
                public=w.public.id,
                private=w.private.id,
                keys=dict(w.keys),
            )
            for w in (world.a, world.b)
        )
        self._taken = utcnow()
        self._rows = {
            table: [dict(row._mapping) for row in db.session.execute(table.select())]
            for table in db.metadata.sorted_tables
        }

    def restore(self) -> World:
        shift = utcnow() - self._taken
        for table, rows in self._rows.items():
            if not rows:
                continue
            stamps = [c.name for c in table.columns if isinstance(c.type, DateTime)]
            fresh = [{**row, **_shifted(row, stamps, shift)} for row in rows]
            db.session.execute(table.insert(), fresh)
        _advance_sequences(self._rows)
        db.session.commit()
        a, b = (self._org_world(ids) for ids in self._ids)
        return World(a=a, b=b)

    @staticmethod
    def _org_world(ids: _OrgIds) -> OrgWorld:
        get = db.session.get
        return OrgWorld(
            org=get(Org, ids.org),
            users={role: get(User, uid) for role, uid in ids.users.items()},
            model=get(RecordModel, ids.model),
            public=get(Record, ids.public),
            private=get(Record, ids.private),
            keys=dict(ids.keys),
        )


def _shifted(row: dict[str, Any], stamps: list[str], shift: timedelta) -> dict[str, Any]:
    return {name: row[name] + shift for name in stamps if row[name] is not None}


def _advance_sequences(rows: dict[Table, list[dict[str, Any]]]) -> None:
    """PostgreSQL: each id sequence past the restored rows (SQLite's AUTOINCREMENT moves by
    itself when a row is inserted with its id)."""
    if db.engine.dialect.name != "postgresql":
        return
    calls = [
        f"setval(pg_get_serial_sequence('{table.name}', 'id'), {max(r['id'] for r in found)})"
        for table, found in rows.items()
        if found and "id" in table.columns and table.columns["id"].autoincrement is not False
    ]
    if calls:
        db.session.execute(text("SELECT " + ", ".join(calls)))
