"""``flask seed-bench --records N``: N records a member sees, indexed and queryable."""

from __future__ import annotations

from sqlalchemy import func, select

from monark.core.models import Org, User
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records import queries, services, sql
from monark.records.models import Record, RecordValue


def test_seed_bench_loads_records_a_member_sees_and_lists(app):
    result = app.test_cli_runner().invoke(args=["seed-bench", "--records", "95"])
    assert result.exit_code == 0, result.output
    assert "Loaded 95 records" in result.output
    db.session.expire_all()
    member_user = db.session.scalar(select(User).where(User.email == "u1@acme.test"))
    acme = db.session.scalar(select(Org.id).where(Org.slug == "acme"))
    member = Principal.for_user(member_user.id, acme, "member")
    model = services.get_model(member, "tasks")
    # 101 in Acme, one in twenty (from the first) private to the owner; Globex has its own.
    assert db.session.scalar(select(func.count()).where(Record.model_id == model.id)) == 101
    assert sql.run_query(member, "SELECT count(*) FROM tasks").rows == [[95]]
    assert queries.count_records(member, model) == 95
    # The value index came with them: a filtered list reads it alone.
    params = queries.ListParams.parse(model, None, ["status:eq:todo"])
    todo = queries.count_records(member, model, params)
    assert (
        todo == sql.run_query(member, "SELECT count(*) FROM tasks WHERE status = 'todo'").rows[0][0]
    )
    assert (
        db.session.scalar(
            select(func.count()).where(
                RecordValue.model_id == model.id, RecordValue.field == "title"
            )
        )
        == 101
    )
    # New records after the load take ids past it.
    made = services.create_record(member, model, {"title": "After"}, "org")
    assert made.id > db.session.scalar(select(func.max(Record.id)).where(Record.id != made.id))
