"""Opening the panel: server time to the screen it opens on, ready to type.

Times ``GET /chat/first`` (what the panel asks for on every page load) for a person whose
latest conversation holds 60 messages among 200 conversations, and for one with none (a new
conversation with suggestions from a records list page); counts its SQL statements. Prints a
table and the target: under 100 ms at the 95th percentile.

    .venv/bin/python bench/panel_bench.py [--database-url postgresql+psycopg://...] [--runs 50]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _measure import CaseResult, add_database_argument, throwaway_database, verdict
from flask import Flask

from monark import create_app
from monark.chat import store
from monark.core.auth import hash_password
from monark.core.models import Membership, Org, User, utcnow
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records import services

PASSWORD = "bench password 1"
REPLY = "Here is what I found:\n\n- **Renew the lease** is due on Friday\n- `Invoices` are done\n"


def build_app(url: str) -> Flask:
    return create_app(
        {"SQLALCHEMY_DATABASE_URI": url, "SECRET_KEY": "bench", "WTF_CSRF_ENABLED": False}
    )


def seed() -> None:
    """An org, a member with 200 conversations (the latest of 60 messages), one with none."""
    org = Org(name="Bench", slug="bench")
    busy = User(email="busy@bench.test", name="Busy", password_hash=hash_password(PASSWORD))
    fresh = User(email="fresh@bench.test", name="Fresh", password_hash=hash_password(PASSWORD))
    db.session.add_all([org, busy, fresh])
    db.session.flush()
    db.session.add_all(
        [Membership(user_id=u.id, org_id=org.id, role="owner") for u in (busy, fresh)]
    )
    db.session.commit()
    owner = Principal.for_user(busy.id, org.id, "owner")
    model = services.create_model(owner, "tasks", "Tasks")
    services.add_field(owner, model, key="title", label="Title", type="text", required=True)
    services.add_field(owner, model, key="due", label="Due", type="date")
    start = utcnow() - timedelta(days=200)
    for n in range(200):
        chat = store.create_conversation(owner, f"Conversation {n}")
        chat.last_activity_at = start + timedelta(days=n)
        turns = 30 if n == 199 else 1
        for t in range(turns):
            store.add_message(
                chat,
                owner,
                text=f"Question {t} about the tasks",
                author_kind="user",
                author_user_id=busy.id,
                role="user",
            )
            store.add_message(
                chat,
                owner.via_assistant(chat.id),
                author_kind="agent",
                role="assistant",
                text=REPLY,
                status="complete",
            )
        chat.last_activity_at = start + timedelta(days=n)
    db.session.commit()


def timed(app: Flask, log, email: str, url: str, runs: int) -> CaseResult:
    client = app.test_client()
    signed_in = client.post("/login", data={"email": email, "password": PASSWORD})
    assert signed_in.status_code == 302, signed_in.status_code
    result = CaseResult(url)
    for _ in range(runs + 3):
        with log.capture():
            t0 = time.perf_counter()
            response = client.get(url)
            response.get_data()
            elapsed = (time.perf_counter() - t0) * 1000
        assert response.status_code == 200 and b'id="chat-text"' in response.data
        result.times_ms.append(elapsed)
        result.query_counts.append(log.count)
    result.times_ms, result.query_counts = result.times_ms[3:], result.query_counts[3:]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_database_argument(parser)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with throwaway_database(args.database_url, build_app) as (app, log):
        with app.app_context():
            seed()
        cases = [
            ("latest of 200, 60 messages", "busy@bench.test", "/chat/first"),
            (
                "none yet: new, with suggestions",
                "fresh@bench.test",
                "/chat/first?page_route=/models/tasks/records&page_query=%3Ffilter%3Ddue%3Alt%3Atoday",
            ),
        ]
        results = [(label, timed(app, log, email, url, args.runs)) for label, email, url in cases]
    print()
    print(f"{'screen':<34} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}")
    for label, r in results:
        print(f"{label:<34} {r.median:>8.1f} {r.p95:>8.1f} {r.queries_label:>8}")
    return verdict([(f"{label}: p95 under 100 ms", r.p95 < 100) for label, r in results])


if __name__ == "__main__":
    sys.exit(main())
