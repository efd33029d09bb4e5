"""records_query keeps a caller's sandbox between calls, and never answers from a stale one.

A kept copy is reused only while its model's data version (set afresh by every write, in
the database) and the caller's rights are what they were; a write on another connection,
a role change, a record made private or shared, a renamed member each make the next call
copy again, and one caller's copy is never another's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select, text, update
from sqlalchemy.orm import Session

from monark.core.models import Membership
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records import services, sql
from monark.records.models import Record, RecordModel
from monark.records.query_cache import SandboxCache
from tests import factories

COUNT = "SELECT count(*) FROM tasks"
TITLES = "SELECT title FROM tasks ORDER BY title"


@pytest.fixture
def copies(app, monkeypatch) -> list[str]:
    """The tables copied into sandboxes during the test, in order (a fresh cache of 64 MB)."""
    monkeypatch.setitem(app.extensions, sql._CACHE, SandboxCache(64 * 2**20))
    copied: list[str] = []
    fill = sql._Sandbox.fill

    def counting(self: Any, principal: Principal, table: Any, *args: Any) -> None:
        copied.append(table.name)
        fill(self, principal, table, *args)

    monkeypatch.setattr(sql._Sandbox, "fill", counting)
    return copied


def answer(principal: Principal, query: str = TITLES) -> list[list[Any]]:
    return sql.run_query(principal, query).rows


def test_a_repeated_query_reuses_the_copy_and_answers_the_same(world, copies):
    member = world.a.principal("member")
    first = answer(member)
    assert answer(member) == first
    assert answer(member, COUNT) == [[len(first)]]
    assert copies == ["tasks"]  # one copy, then two answers from it


def test_a_query_reading_more_columns_copies_again_with_them(world, copies):
    member = world.a.principal("member")
    answer(member, COUNT)
    assert answer(member) == [["Acme private task"], ["Acme public task"]]
    assert answer(member, "SELECT count(*), count(title) FROM tasks") == [[2, 2]]
    assert copies == ["tasks", "tasks"]


def test_a_write_on_another_connection_is_seen(app, world, copies):
    member = world.a.principal("member")
    assert answer(member) == [["Acme private task"], ["Acme public task"]]
    # Another instance's write: its own connection and session, committed there.
    with db.engine.begin() as conn:
        session = Session(bind=conn)
        session.add(
            Record(
                org_id=world.a.org.id,
                model_id=world.a.model.id,
                values={"title": "From elsewhere"},
                title="From elsewhere",
                creator_id=world.a.users["owner"].id,
            )
        )
        session.flush()
    assert answer(member) == [["Acme private task"], ["Acme public task"], ["From elsewhere"]]
    assert copies == ["tasks", "tasks"]


def test_a_write_by_raw_sql_on_another_connection_is_seen(world, copies):
    member = world.a.principal("member")
    public = world.a.public.id
    assert answer(member) == [["Acme private task"], ["Acme public task"]]
    # No ORM on the writing side: nothing of the app's session or its flush runs there.
    with db.engine.begin() as conn:
        conn.execute(
            text("UPDATE records SET title = 'Raw', \"values\" = :v WHERE id = :id"),
            {"v": '{"title": "Raw"}', "id": public},
        )
    assert answer(member) == [["Acme private task"], ["Raw"]]
    with db.engine.begin() as conn:
        conn.execute(text("DELETE FROM record_values WHERE record_id = :id"), {"id": public})
        conn.execute(text("DELETE FROM records WHERE id = :id"), {"id": public})
    assert answer(member) == [["Acme private task"]]
    with db.engine.begin() as conn:
        conn.execute(
            insert(Record.__table__),
            {
                "org_id": world.a.org.id,
                "model_id": world.a.model.id,
                "values": {"title": "Inserted raw"},
                "title": "Inserted raw",
            },
        )
    assert answer(member) == [["Acme private task"], ["Inserted raw"]]
    assert copies == ["tasks"] * 4


def test_an_update_and_a_delete_are_seen(world, copies):
    owner = world.a.principal("owner")
    model = world.a.model
    assert answer(owner) == [["Acme private task"], ["Acme public task"]]
    services.update_record(owner, model, world.a.public.id, {"title": "Renamed"})
    assert answer(owner) == [["Acme private task"], ["Renamed"]]
    services.delete_record(owner, model, world.a.public.id)
    assert answer(owner) == [["Acme private task"]]


def test_a_statement_updating_records_is_seen(world, copies):
    member = world.a.principal("member")
    assert answer(member) == [["Acme private task"], ["Acme public task"]]
    stmt = update(Record).where(Record.id == world.a.public.id).values(values={"title": "Bulk"})
    db.session.execute(stmt)
    db.session.commit()
    assert answer(member) == [["Acme private task"], ["Bulk"]]


def test_a_record_made_private_or_shared_changes_who_sees_it(world, copies):
    member, viewer = world.a.principal("member"), world.a.principal("viewer")
    model, private = world.a.model, world.a.private
    assert answer(viewer) == [["Acme public task"]]
    services.update_record(member, model, private.id, {}, visibility="org")  # shared
    assert answer(viewer) == [["Acme private task"], ["Acme public task"]]
    services.update_record(member, model, private.id, {}, visibility="private")  # unshared
    assert answer(viewer) == [["Acme public task"]]


def test_a_role_change_is_a_new_copy(world, copies):
    """The viewer made admin sees private records at once; made viewer again, not."""
    user, org = world.a.users["viewer"], world.a.org
    viewer = factories.principal(user, org, "viewer")
    assert answer(viewer) == [["Acme public task"]]
    owner = world.a.principal("owner")
    membership = db.session.scalar(
        select(Membership).where(Membership.user_id == user.id, Membership.org_id == org.id)
    )
    from monark.settings.services import change_role

    change_role(owner, membership.id, "admin")
    admin = factories.principal(user, org, "admin")
    assert answer(admin) == [["Acme private task"], ["Acme public task"]]
    change_role(owner, membership.id, "viewer")
    assert answer(factories.principal(user, org, "viewer")) == [["Acme public task"]]
    assert copies == ["tasks", "tasks", "tasks"]


def test_one_callers_copy_is_never_anothers(world, copies):
    """The member's copy holds their private record; the viewer, asking next with the same
    SQL, copies their own and never sees it."""
    member, viewer = world.a.principal("member"), world.a.principal("viewer")
    assert answer(member) == [["Acme private task"], ["Acme public task"]]
    assert answer(viewer) == [["Acme public task"]]
    assert answer(member) == [["Acme private task"], ["Acme public task"]]
    assert copies == ["tasks", "tasks"]
    # An API key of the same role is another caller too.
    key = Principal.for_api_key(1, world.a.org.id, "member")
    assert answer(key) == [["Acme public task"]]
    assert copies == ["tasks", "tasks", "tasks"]


def test_the_same_person_through_the_assistant_shares_their_copy(world, copies):
    member = world.a.principal("member")
    answer(member)
    assert answer(member.via_assistant(7)) == [["Acme private task"], ["Acme public task"]]
    assert copies == ["tasks"]


def test_a_renamed_member_is_named_anew(world, copies):
    owner = world.a.principal("owner")
    services.update_record(
        owner, world.a.model, world.a.public.id, {"assignee": world.a.users["member"].id}
    )
    names = "SELECT assignee_name FROM tasks WHERE assignee IS NOT NULL"
    assert answer(owner, names) == [["Acme Member"]]
    world.a.users["member"].name = "Acme Renamed"
    db.session.commit()
    assert answer(owner, names) == [["Acme Renamed"]]


def test_a_rename_seen_by_a_query_over_two_tables_with_names_copies_both(world, copies):
    """New names drop every copy that holds names, before any of the query's tables is
    checked: the second table's check never drops the first's copy from under the query."""
    owner = world.a.principal("owner")
    factories.make_tasks_model(owner, key="bugs")
    assert answer(owner, "SELECT assignee_name FROM tasks") == [[None]] * 2
    world.a.users["member"].name = "Acme Renamed"
    db.session.commit()
    joined = "SELECT t.title, b.assignee_name FROM tasks t LEFT JOIN bugs b ON 1 ORDER BY 1"
    assert answer(owner, joined) == [["Acme private task", None], ["Acme public task", None]]


def test_a_field_added_makes_a_new_table(world, copies):
    owner = world.a.principal("owner")
    answer(owner, COUNT)
    services.add_field(owner, world.a.model, key="size", label="Size", type="number")
    assert answer(owner, "SELECT count(size) FROM tasks") == [[0]]


def test_each_write_gives_its_model_a_new_data_version(world):
    owner = world.a.principal("owner")

    def version() -> int:
        return db.session.scalar(
            select(RecordModel.data_version).where(RecordModel.id == world.a.model.id)
        )

    before = version()
    factories.make_record(owner, world.a.model, "One more")
    after = version()
    assert after != before
    db.session.add(
        Record(org_id=world.a.org.id, model_id=world.a.model.id, values={}, title="Not kept")
    )
    db.session.flush()
    assert version() != after  # within the writing transaction
    db.session.rollback()
    assert version() == after  # a write rolled back leaves it


def test_the_bound_evicts_the_least_recently_used(app, world, monkeypatch):
    cache = SandboxCache(10 * 2**20)
    monkeypatch.setitem(app.extensions, sql._CACHE, cache)
    callers = [world.a.principal(role) for role in ("owner", "admin", "member")]
    for caller in callers:
        answer(caller)
    one = max(e.size for e in cache._entries.values())
    assert len(cache) == 3
    cache.limit = 2 * one  # room for two
    answer(callers[0])  # the owner's, used last: the admin's is the oldest now
    assert len(cache) == 2
    kept = {key[0].user_id for key in cache._entries}
    assert kept == {callers[0].user_id, callers[2].user_id}
    assert cache.held <= cache.limit
    assert cache.peak >= cache.held


def test_a_sandbox_past_the_bound_is_used_once(app, world, monkeypatch):
    cache = SandboxCache(0)
    monkeypatch.setitem(app.extensions, sql._CACHE, cache)
    member = world.a.principal("member")
    assert answer(member) == [["Acme private task"], ["Acme public task"]]
    assert len(cache) == 0


class _Fake:
    def __init__(self, size: int):
        self.bytes, self.closed = size, False

    def size(self) -> int:
        return self.bytes

    def close(self) -> None:
        self.closed = True


def test_eviction_closes_an_idle_sandbox_and_waits_for_one_in_use():
    cache = SandboxCache(100)
    old, busy = _Fake(60), _Fake(60)
    with cache.use("old", lambda: old):
        pass
    with cache.use("busy", lambda: busy):
        # "busy" is in use: the bound is passed only when it settles, closing "old".
        assert not old.closed
    assert old.closed and not busy.closed
    assert len(cache) == 1
    newer = _Fake(60)
    with cache.use("newer", lambda: newer), cache.use("busy", lambda: _Fake(1)) as held:
        assert held is busy
    # "newer" settled first and made room by marking "busy" (in use), closed as it ended.
    assert busy.closed and not newer.closed


def test_a_failed_query_drops_its_sandbox():
    cache = SandboxCache(100)
    made = _Fake(10)
    with pytest.raises(ValueError), cache.use("k", lambda: made):
        raise ValueError
    assert made.closed and len(cache) == 0


def test_a_family_keeps_only_its_newest_catalogue():
    cache = SandboxCache(1000)
    first, second = _Fake(10), _Fake(10)
    with cache.use(("me", 1), lambda: first, family="me"):
        pass
    with cache.use(("me", 2), lambda: second, family="me"):
        pass
    assert first.closed and not second.closed and len(cache) == 1


def test_a_repeated_answer_is_kept_while_its_today_is_the_same(world, copies, monkeypatch):
    member = world.a.principal("member")
    runs: list[str] = []
    run = sql._Sandbox.run
    monkeypatch.setattr(sql._Sandbox, "run", lambda self, q, *a: runs.append(q) or run(self, q, *a))
    today = "SELECT date('now'), today(), count(*) FROM tasks"
    monday = datetime(2026, 3, 2, 12, tzinfo=UTC)
    assert sql.run_query(member, today, now=monday).rows == [["2026-03-02", "2026-03-02", 2]]
    later = monday + timedelta(hours=1)
    assert sql.run_query(member, today, now=later).rows == [["2026-03-02", "2026-03-02", 2]]
    assert runs == [today]  # the same day: the kept answer
    tuesday = monday + timedelta(days=1)
    assert sql.run_query(member, today, now=tuesday).rows == [["2026-03-03", "2026-03-03", 2]]
    # 'now' with a modifier reads the time of day: an hour later is another answer.
    evening = "SELECT date('now', '+11 hours')"
    assert sql.run_query(member, evening, now=monday).rows == [["2026-03-02"]]
    assert sql.run_query(member, evening, now=later).rows == [["2026-03-03"]]
    assert runs == [today, today, evening, evening]


def test_an_answer_reading_sqlites_clock_is_never_kept(world, copies, monkeypatch):
    member = world.a.principal("member")
    runs: list[str] = []
    run = sql._Sandbox.run
    monkeypatch.setattr(sql._Sandbox, "run", lambda self, q, *a: runs.append(q) or run(self, q, *a))
    clock = "SELECT julianday('now') > 0, count(*) FROM tasks"
    assert answer(member, clock) == [[1, 2]]
    assert answer(member, clock) == [[1, 2]]
    assert runs == [clock, clock]


def test_a_kept_answer_goes_with_a_write(world, copies):
    owner = world.a.principal("owner")
    assert answer(owner, COUNT) == [[2]]
    factories.make_record(owner, world.a.model, "Third")
    assert answer(owner, COUNT) == [[3]]


def test_a_model_and_a_field_named_records_copy_as_any_other(world, copies):
    owner = world.a.principal("owner")
    model = services.create_model(owner, "records", "Records", "")
    services.add_field(owner, model, key="records", label="Records", type="text")
    services.create_record(owner, model, {"records": "kept"}, "org")
    assert answer(owner, "SELECT records FROM records") == [["kept"]]
    assert answer(owner, "SELECT count(*) FROM records, tasks") == [[2]]
