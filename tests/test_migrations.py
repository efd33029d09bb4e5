"""Alembic migrations build the schema the models describe; seed-demo is idempotent."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from decimal import Decimal

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from flask import Flask, current_app
from flask_migrate import downgrade, upgrade
from sqlalchemy import JSON, column, func, insert, inspect, select, table, text, update

from monark import create_app
from monark.approvals.models import Allowance
from monark.chat.models import Conversation, Message
from monark.cli import DEMO_PASSWORD
from monark.core.models import ApiKey, Event, Membership, Org, User, utcnow
from monark.extensions import db
from monark.records.models import ModelField, Record, RecordModel
from monark.search.index import FTS_TABLE, VECTOR_COLUMN
from monark.settings.models import OrgDay, UsageDay
from tests import factories
from tests.databases import is_postgres, new_postgres_database


@pytest.fixture
def empty_database_url(tmp_path) -> Iterator[str]:
    """A fresh, empty database: a temp SQLite file, or a new PostgreSQL database."""
    url = os.environ.get("DATABASE_URL", "")
    if not is_postgres(url):
        yield f"sqlite:///{tmp_path}/migrations.db"
        return
    with new_postgres_database(url, f"monark_migr_{uuid.uuid4().hex[:12]}") as fresh:
        yield fresh


@pytest.fixture
def migrated_app(empty_database_url) -> Iterator[Flask]:
    app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": "test",
            "SQLALCHEMY_DATABASE_URI": empty_database_url,
            "PASSWORD_HASH_METHOD": factories.FAST_HASH,
        }
    )
    with app.app_context():
        try:
            yield app
        finally:
            db.session.remove()
            db.engine.dispose()


def _head() -> str:
    config = current_app.extensions["migrate"].migrate.get_config()
    return ScriptDirectory.from_config(config).get_current_head()


def _tables() -> set[str]:
    # The search index's full-text part is no model (monark/search/index.py): SQLite's FTS5
    # table and its shadow tables are left out here, PostgreSQL's tsvector column and its
    # GIN index from the comparison (``_modelled``).
    names = set(inspect(db.engine).get_table_names())
    return {n for n in names if n != FTS_TABLE and not n.startswith(f"{FTS_TABLE}_")}


def _modelled(differences: list) -> list:
    """The differences between the models and the database, less the search index's
    full-text part, which no model describes."""

    def unmodelled(diff) -> bool:
        if diff[0] == "remove_column":
            return diff[2] == "search_documents" and diff[3].name == VECTOR_COLUMN
        if diff[0] == "remove_index":
            return diff[1].name == "ix_search_documents_search_vector"
        if diff[0] == "remove_table":
            return diff[1].name == FTS_TABLE or diff[1].name.startswith(f"{FTS_TABLE}_")
        return False

    return [d for d in differences if not (isinstance(d, tuple) and unmodelled(d))]


def test_upgrade_builds_exactly_the_models_schema(migrated_app):
    assert _tables() == set()
    upgrade()
    assert _tables() == {t.name for t in db.metadata.sorted_tables} | {"alembic_version"}
    with db.engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == _head()
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = _modelled(compare_metadata(context, db.metadata))
    assert differences == []
    if db.engine.dialect.name == "sqlite":  # ids never reused (see migration 0005)
        with db.engine.connect() as conn:
            sqls = conn.execute(text("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
            plain = [n for n, sql in sqls if n in _tables() and "AUTOINCREMENT" not in sql]
        # record_values has no id of its own: its key is (record, field).
        assert sorted(plain) == ["alembic_version", "record_values"]


def test_downgrade_to_base_and_upgrade_again(migrated_app):
    upgrade()
    downgrade(revision="base")
    assert _tables() == {"alembic_version"}
    upgrade()
    with db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert _modelled(compare_metadata(context, db.metadata)) == []
        assert context.get_current_revision() == _head()


def _triggers() -> set[tuple[str, ...]]:
    """Every trigger of the database as it was written (on PostgreSQL, with the source of
    the function it calls)."""
    with db.engine.connect() as conn:
        if db.engine.dialect.name == "sqlite":
            rows = conn.execute(text("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"))
            return {tuple(r) for r in rows}
        # Only the functions a trigger calls: one a dropped table left behind is no matter.
        rows = conn.execute(
            text(
                "SELECT t.tgname, pg_get_triggerdef(t.oid), p.proname, p.prosrc"
                " FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid WHERE NOT t.tgisinternal"
            )
        )
        return {tuple(r) for r in rows}


def test_upgrade_makes_the_triggers_the_models_make(app, migrated_app):
    upgrade()
    migrated = _triggers()
    with app.app_context():  # the tests' own database, made by ``create_all``
        made = _triggers()
    assert migrated == made
    assert {"records_data_version_ai", "records_data_version_au"} <= {t[0] for t in made}


def test_the_data_version_is_the_databases_after_0031(migrated_app):
    upgrade()
    model = {"id": 2, "org_id": 1, "key": "tasks", "name": "Tasks", "data_version": 5}
    version = select(RecordModel.data_version).where(RecordModel.id == 2)
    with db.engine.begin() as conn:
        conn.execute(insert(Org.__table__), {"id": 1, "name": "O", "slug": "o"})
        conn.execute(insert(RecordModel.__table__), model)
        conn.execute(insert(Record.__table__), {"id": 3, "org_id": 1, "model_id": 2})
        after_insert = conn.execute(version).scalar_one()
        conn.execute(update(Record.__table__).values(title="Changed"))
        after_update = conn.execute(version).scalar_one()
    assert len({5, after_insert, after_update}) == 3
    downgrade(revision="0030_budget")
    with db.engine.begin() as conn:
        conn.execute(text("DELETE FROM records"))
        assert conn.execute(version).scalar_one() == after_update
    db.session.close()


def test_the_value_index_is_backfilled_from_existing_records(migrated_app):
    upgrade(revision="0009_ai_providers")
    # Core inserts (the tables are as the models say until 0010, but for the org's later
    # columns; the ORM's flush would write the index this migration is to create).
    org = {"id": 1, "name": "O", "slug": "o", "chat_enabled": True, "ai_agent_enabled": True}
    org |= {"branding_enabled": False, "created_at": utcnow()}
    with db.engine.begin() as conn:
        conn.execute(insert(table("orgs", *(column(c) for c in org))), org)
        conn.execute(
            insert(User.__table__),
            {"id": 5, "email": "a@o.test", "name": "A", "password_hash": "x"},
        )
        # The models table as it was then (no data_version before 0029).
        model = {"id": 1, "org_id": 1, "key": "t", "name": "T", "description": ""}
        model |= {"created_at": utcnow()}
        conn.execute(insert(table("models", *(column(c) for c in model))), model)
        for record_id, values, visibility in (
            (1, {"title": "Write Docs", "points": 3, "done": True}, "org"),
            (2, {"title": "Secret", "empty": ""}, "private"),
        ):
            conn.execute(
                insert(Record.__table__),
                {
                    "id": record_id,
                    "org_id": 1,
                    "model_id": 1,
                    "values": values,
                    "visibility": visibility,
                    "creator_id": 5,
                },
            )
    upgrade()
    with db.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT record_id, field, text_value, number_value, private_to "
                "FROM record_values ORDER BY record_id, field"
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        (1, "done", None, 1.0, None),
        (1, "points", None, 3.0, None),
        (1, "title", "write docs", None, None),
        (2, "title", "secret", None, 5),
    ]


def test_automations_are_owned_by_their_author_and_off_when_the_author_lapsed(migrated_app):
    upgrade(revision="0012_approvals")
    org = {"id": 1, "name": "O", "slug": "o", "chat_enabled": True, "ai_agent_enabled": True}
    org |= {"branding_enabled": False, "created_at": utcnow()}
    names = ("id", "org_id", "name", "enabled", "version", "trigger_type")
    names += ("created_by_id", "created_at", "updated_at")
    automations = table("automations", column("graph", JSON()), *(column(c) for c in names))
    with db.engine.begin() as conn:
        conn.execute(insert(table("orgs", *(column(c) for c in org))), org)
        for user_id, role in ((5, "admin"), (6, "member"), (7, None)):
            conn.execute(
                insert(User.__table__),
                {"id": user_id, "email": f"{user_id}@o.test", "name": "U", "password_hash": "x"},
            )
            if role:
                conn.execute(
                    insert(Membership.__table__),
                    {"id": user_id, "user_id": user_id, "org_id": 1, "role": role},
                )
        for automation_id, author in ((1, 5), (2, 6), (3, 7), (4, None)):
            conn.execute(
                insert(automations),
                {"id": automation_id, "org_id": 1, "name": f"A{automation_id}", "enabled": True}
                | {"version": 1, "graph": {}, "trigger_type": "manual"}
                | {"created_by_id": author, "created_at": utcnow(), "updated_at": utcnow()},
            )
    upgrade(revision="0013_automation_owner")
    with db.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id, owner_id, enabled, disabled_reason FROM automations ORDER BY id")
        ).all()
    assert [(r.id, r.owner_id, bool(r.enabled)) for r in rows] == [
        (1, 5, True),  # an admin's stays on
        (2, 6, False),  # a member (demoted since) manages no automations
        (3, 7, False),  # left the org
        (4, None, False),  # no author left at all
    ]
    assert rows[0].disabled_reason is None
    assert all("take ownership" in r.disabled_reason for r in rows[1:])


def test_allowances_of_record_tools_end_when_they_gain_a_scope(migrated_app):
    upgrade(revision="0013_automation_owner")
    org = {"id": 1, "name": "O", "slug": "o", "chat_enabled": True, "ai_agent_enabled": True}
    org |= {"branding_enabled": False, "created_at": utcnow()}
    names = ("id", "org_id", "conversation_id", "user_id", "tool", "created_at")
    allowances = table("chat_allowances", *(column(c) for c in names))
    with db.engine.begin() as conn:
        conn.execute(insert(table("orgs", *(column(c) for c in org))), org)
        conn.execute(
            insert(User.__table__),
            {"id": 5, "email": "a@o.test", "name": "A", "password_hash": "x"},
        )
        conn.execute(insert(Conversation.__table__), {"id": 3, "org_id": 1, "creator_id": 5})
        for allowance_id, tool in (
            (1, "records_update"),
            (2, "records_create"),
            (3, "wiki_set_icon"),
        ):
            conn.execute(
                insert(allowances),
                {
                    "id": allowance_id,
                    "org_id": 1,
                    "conversation_id": 3,
                    "user_id": 5,
                    "tool": tool,
                    "created_at": utcnow(),
                },
            )
    upgrade()
    open_ones = select(Allowance.tool, Allowance.scope).where(Allowance.revoked_at.is_(None))
    # Those of record tools covered every model: they end; the others stay tool-wide.
    assert db.session.execute(open_ones).all() == [("wiki_set_icon", None)]
    db.session.add(
        Allowance(id=4, org_id=1, conversation_id=3, user_id=5, tool="records_update", scope="t")
    )
    db.session.commit()
    db.session.close()
    downgrade(revision="0013_automation_owner")  # without its scope it would cover every model
    with db.engine.connect() as conn:
        still = conn.execute(text("SELECT tool FROM chat_allowances WHERE revoked_at IS NULL"))
        assert still.scalars().all() == ["wiki_set_icon"]


def test_the_orgs_day_totals_are_backfilled_and_then_kept_by_the_database(migrated_app):
    upgrade(revision="0027_feedback")
    org = {"id": 1, "name": "O", "slug": "o", "chat_enabled": True, "ai_agent_enabled": True}
    org |= {"branding_enabled": False, "created_at": utcnow()}
    day = date(2026, 11, 30)

    def spent(user_id: int, model: str, cost: str, tokens: int, on: date = day) -> dict:
        return {
            "org_id": 1,
            "day": on,
            "user_id": user_id,
            "provider": "p",
            "model": model,
            "replies": 1,
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "cost": Decimal(cost),
            "unpriced_tokens": tokens,
            "unpriced_replies": 0,
        }

    with db.engine.begin() as conn:
        conn.execute(insert(table("orgs", *(column(c) for c in org))), org)
        conn.execute(
            insert(UsageDay.__table__), [spent(5, "m", "0.5", 0), spent(6, "n", "0.25", 30)]
        )
    upgrade()
    totals = select(OrgDay.day, OrgDay.cost, OrgDay.unpriced_tokens).order_by(OrgDay.day)
    assert [tuple(r) for r in db.session.execute(totals)] == [(day, Decimal("0.75"), 30)]
    with db.engine.begin() as conn:  # the migration's triggers keep them from now on
        conn.execute(insert(UsageDay.__table__), spent(5, "m", "1", 0, day + timedelta(days=1)))
        conn.execute(update(UsageDay.__table__).where(UsageDay.model == "n").values(cost=0))
    assert [tuple(r) for r in db.session.execute(totals)] == [
        (day, Decimal("0.5"), 30),
        (day + timedelta(days=1), Decimal(1), 0),
    ]
    db.session.close()


def test_a_keys_duplicate_conversations_are_merged_into_its_oldest(migrated_app):
    upgrade(revision="0014_allowance_scope")
    # Core inserts: these tables are as the models say at 0014, but for chat_tool_calls'
    # retry_of_id (written with the columns given only).
    calls = table(
        "chat_tool_calls",
        *(column(c) for c in ("id", "org_id", "conversation_id", "message_id", "position")),
        *(column(c) for c in ("provider_call_id", "name", "mutates", "status")),
        column("input", JSON()),
        *(column(c) for c in ("skipped", "allowed", "created_at")),
    )
    # events as at 0014 (before the outbox's ``pending``).
    events_0014 = table(
        "events",
        *(column(c) for c in ("id", "org_id", "type", "actor_kind", "actor_id")),
        *(column(c) for c in ("conversation_id", "subject_type", "subject_id", "created_at")),
        column("payload", JSON()),
    )
    with db.engine.begin() as conn:
        conn.execute(insert(Org.__table__), {"id": 1, "name": "O", "slug": "o"})
        conn.execute(
            insert(User.__table__),
            {"id": 5, "email": "a@o.test", "name": "A", "password_hash": "x"},
        )
        conn.execute(
            insert(ApiKey.__table__),
            {"id": 3, "org_id": 1, "role": "member", "created_by_id": 5, "name": "Agent"}
            | {"prefix": "mrk_abc", "key_hash": "h", "writes_need_approval": True},
        )
        # Two first writes at once made two conversations, each with its held writes.
        for conversation_id in (10, 11):
            conn.execute(
                insert(Conversation.__table__),
                {"id": conversation_id, "org_id": 1, "kind": "api", "api_key_id": 3},
            )
            for seq in (1, 2):
                message_id = conversation_id * 10 + seq
                conn.execute(
                    insert(Message.__table__),
                    {"id": message_id, "org_id": 1, "conversation_id": conversation_id}
                    | {"seq": seq, "author_kind": "agent", "role": "assistant"},
                )
                conn.execute(
                    insert(calls),
                    {"id": message_id, "org_id": 1, "conversation_id": conversation_id}
                    | {"message_id": message_id, "position": 0, "provider_call_id": "api_x"}
                    | {"name": "records_create", "input": {}, "mutates": True}
                    | {"status": "PROPOSED", "skipped": False, "allowed": False}
                    | {"created_at": utcnow()},
                )
                # Its "held" event (no conversation in the column: the key's principal has
                # none), and its decision's (the approver's, via the conversation).
                for event_id, via in ((message_id * 10, False), (message_id * 10 + 1, True)):
                    conn.execute(
                        insert(events_0014),
                        {"id": event_id, "org_id": 1, "type": "chat.tool_call.held"}
                        | {"actor_kind": "api_key", "actor_id": 3, "subject_type": "tool_call"}
                        | {"subject_id": message_id, "created_at": utcnow()}
                        | {"conversation_id": conversation_id if via else None}
                        | {"payload": {"conversation_id": conversation_id, "tool": "x"}},
                    )
        # An event of something else, naming conversation 11 in its payload: left alone.
        conn.execute(
            insert(events_0014),
            {"id": 9, "org_id": 1, "type": "record.created", "actor_kind": "user"}
            | {"actor_id": 5, "subject_type": "record", "subject_id": 11}
            | {"created_at": utcnow(), "payload": {"conversation_id": 11}},
        )
    upgrade()
    with db.engine.connect() as conn:
        conversations = conn.execute(text("SELECT id FROM chat_conversations")).all()
        messages = conn.execute(
            text("SELECT id, conversation_id, seq FROM chat_messages ORDER BY seq")
        ).all()
        called = conn.execute(text("SELECT DISTINCT conversation_id FROM chat_tool_calls")).all()
        events = conn.execute(
            select(Event.id, Event.conversation_id, Event.payload).order_by(Event.id)
        ).all()
    assert [tuple(r) for r in conversations] == [(10,)]
    held = {e.id: (e.conversation_id, e.payload["conversation_id"]) for e in events if e.id > 9}
    assert held == {
        event_id: (10 if event_id % 10 else None, 10)
        for message_id in (101, 102, 111, 112)
        for event_id in (message_id * 10, message_id * 10 + 1)
    }
    assert events[0].payload == {"conversation_id": 11}
    assert [tuple(r) for r in messages] == [(101, 10, 1), (102, 10, 2), (111, 10, 3), (112, 10, 4)]
    assert [tuple(r) for r in called] == [(10,)]


# ---- seed-demo -----------------------------------------------------------------------------


def _counts() -> dict[str, int]:
    return {
        model.__tablename__: db.session.scalar(select(func.count()).select_from(model))
        for model in (User, Org, Membership, RecordModel, ModelField, Record, Event)
    }


def _org(slug: str) -> Org:
    return db.session.scalar(select(Org).where(Org.slug == slug))


def test_seed_demo_is_idempotent(app, browser):
    runner = app.test_cli_runner()
    first = runner.invoke(args=["seed-demo"])
    assert first.exit_code == 0, first.output
    assert "ada@acme.test" in first.output
    counts = _counts()
    assert counts["records"] > 0
    second = runner.invoke(args=["seed-demo"])
    assert second.exit_code == 0, second.output
    assert _counts() == counts

    acme, globex = _org("acme"), _org("globex")
    roles = dict(
        db.session.execute(
            select(User.email, Membership.role).join(Membership).where(Membership.org_id == acme.id)
        ).all()
    )
    assert roles == {"ada@acme.test": "owner", "ben@acme.test": "member", "cy@acme.test": "viewer"}
    models = db.session.scalars(select(RecordModel.key).where(RecordModel.org_id == acme.id))
    assert set(models) == {"tasks", "contacts"}
    acme_records = db.session.scalars(select(Record).where(Record.org_id == acme.id)).all()
    assert len(acme_records) == 60
    private = {r.id for r in acme_records if r.visibility == "private"}
    assert 0 < len(private) < 60
    globex_members = db.session.scalars(
        select(User.email).join(Membership).where(Membership.org_id == globex.id)
    ).all()
    assert "gil@globex.test" in globex_members
    assert db.session.scalar(select(func.count()).where(Record.org_id == globex.id)) > 0

    # The demo password signs in; the viewer sees the public tasks but no private one.
    browser.login("cy@acme.test", DEMO_PASSWORD)
    listing = browser.get("/api/v1/models/tasks/records?limit=100").get_json()
    visible = {r["id"] for r in listing["items"]}
    assert visible
    assert not visible & private
