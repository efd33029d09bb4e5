"""Approvals at scale: N updates one step proposed, then decided with one click.

For N in 10, 40 and 100 a model (no network: it answers at once) proposes N
``records_update`` calls in one step; the bench times that step (each write gets its
preview, precheck and stored card) and then the one group decision that confirms them all
(each write runs on its own through the in-process route, as the user, with its own
permission check, result and audit row), and counts the SQL statements of each. Prints a
table (with the CPU time of each decision, and the load average, since other work on the
machine stretches the wall time) and the targets: 40 writes decided in under 1 s, at most
16 statements a write.

    .venv/bin/python bench/approvals_bench.py [--database-url postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _measure import add_database_argument, throwaway_database, verdict
from flask import Flask

from monark import create_app
from monark.approvals import own_calls
from monark.approvals import service as approval_service
from monark.chat.llm.types import (
    LlmEvent,
    LlmRequest,
    StopReason,
    TextDelta,
    ToolCallRequested,
    UsageReport,
)
from monark.chat.models import ToolCall
from monark.chat.runtime import set_llm_provider
from monark.chat.turn import start
from monark.chat.turn.run import run_turn
from monark.core.auth import hash_password
from monark.core.models import Membership, Org, User
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records import services
from monark.records.models import Record

SIZES = (10, 40, 100)


class GroupProvider:
    """Proposes an update of every record in ``targets`` in one step, then says done."""

    name = "bench"

    def __init__(self) -> None:
        self.targets: list[int] = []

    def stream(self, request: LlmRequest) -> Iterator[LlmEvent]:
        last = request.messages[-1]
        answered = any(getattr(b, "tool_use_id", None) for b in last.content)
        if answered:
            yield TextDelta("All done.")
        else:
            for i, record_id in enumerate(self.targets):
                yield ToolCallRequested(
                    f"call_{record_id}_{i}",
                    "records_update",
                    {"model": "tasks", "record_id": record_id, "values": {"status": "done"}},
                )
        yield UsageReport(100, 1, 0, 0)
        yield StopReason("end_turn" if answered else "tool_use")


def seed(total: int) -> Principal:
    org = Org(name="Bench", slug="bench")
    user = User(email="owner@bench.test", name="Owner", password_hash=hash_password("x" * 12))
    db.session.add_all([org, user])
    db.session.flush()
    db.session.add(Membership(user_id=user.id, org_id=org.id, role="owner"))
    db.session.commit()
    owner = Principal.for_user(user.id, org.id, "owner")
    model = services.create_model(owner, "tasks", "Tasks", "")
    services.add_field(owner, model, key="title", label="Title", type="text", required=True)
    services.add_field(
        owner, model, key="status", label="Status", type="select", options=["todo", "done"]
    )
    for i in range(total):
        services.create_record(owner, model, {"title": f"Task {i}", "status": "todo"}, "org")
    db.session.commit()
    return owner


def build_app(url: str) -> Flask:
    return create_app({"SQLALCHEMY_DATABASE_URI": url, "SECRET_KEY": "bench"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_database_argument(parser)
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    provider = GroupProvider()
    rows: list[tuple[int, float, int, float, float, int, int]] = []
    with throwaway_database(args.database_url, build_app) as (app, log):
        set_llm_provider(provider, app)
        with app.app_context():
            owner = seed(sum(SIZES))
            ids = list(db.session.scalars(db.select(Record.id).order_by(Record.id)))
        offset = 0
        for size in SIZES:
            provider.targets = ids[offset : offset + size]
            offset += size
            with app.app_context():
                with log.capture():
                    t0 = time.perf_counter()
                    data = start.SendInput(text=f"Mark these {size} done")
                    proposed = start.send_message(owner, data)
                    propose_ms = (time.perf_counter() - t0) * 1000
                propose_queries = log.count
                calls = own_calls.proposed_calls_of(
                    db.session.scalar(
                        db.select(ToolCall.message_id).where(
                            ToolCall.conversation_id == proposed.conversation_id
                        )
                    )
                )
                selected = {c.id for c in calls}
                message_id = calls[0].message_id
                with log.capture():
                    t0, c0 = time.perf_counter(), time.process_time()
                    turn = approval_service.begin_group_decision(owner, message_id, selected, True)
                    result = run_turn(turn)
                    decide_ms = (time.perf_counter() - t0) * 1000
                    decide_cpu_ms = (time.process_time() - c0) * 1000
                decide_queries = log.count
                done = db.session.scalar(
                    db.select(db.func.count()).where(
                        ToolCall.message_id == message_id, ToolCall.status == "SUCCEEDED"
                    )
                )
                if result.status != "done" or done != size:
                    raise SystemExit(f"unexpected: {result.status}, {done}/{size} done")
            rows.append(
                (size, propose_ms, propose_queries, decide_ms, decide_cpu_ms, decide_queries, done)
            )
        set_llm_provider(None, app)
    print()
    print(
        f"{'writes':>6} | {'propose ms':>10} | {'queries':>7} | {'decide ms':>9} | "
        f"{'cpu ms':>6} | {'queries':>7} | {'ms/write':>8} | {'queries/write':>13}"
    )
    for size, pms, pq, dms, dcpu, dq, _ in rows:
        print(
            f"{size:>6} | {pms:>10.0f} | {pq:>7} | {dms:>9.0f} | {dcpu:>6.0f} | {dq:>7} | "
            f"{dms / size:>8.1f} | {dq / size:>13.1f}"
        )
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average (1, 5, 15 min): {load}; cpu ms: this process's CPU time")
    per_write = [dq / size for size, _, _, _, _, dq, _ in rows]
    forty = next(r for r in rows if r[0] == 40)
    return verdict(
        [
            ("40 writes decided with one click in under 1 s", forty[3] < 1000),
            ("at most 16 queries per write (40 writes)", forty[5] / 40 <= 16),
            (
                "queries per write stay flat from 10 to 100 writes (within 25%)",
                max(per_write) <= 1.25 * min(per_write),
            ),
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
