"""How big an answer one request can make: a query of a few very wide values.

A viewer asks ``SELECT printf('%0900000d', 0) AS c1, … AS cN`` (one row of N values of
900,000 characters each): through the public API (``GET /api/v1/query`` with the viewer's
key), and through the assistant (a scripted model calls ``records_query``; the stored
result and the card the panel draws are measured). Printed: the answer's bytes and the
time per case. Before the caps, N=20 answered 18 MB; after, every answer is a few tens of
KB whatever N is.

Run from the repo root (a few seconds, a throwaway SQLite database)::

    .venv/bin/python bench/caps_bench.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import select  # noqa: E402

from monark import create_app  # noqa: E402
from monark.chat.models import ToolCall  # noqa: E402
from monark.chat.runtime import set_llm_provider  # noqa: E402
from monark.chat.turn.start import SendInput, send_message  # noqa: E402
from monark.extensions import db  # noqa: E402
from tests import factories  # noqa: E402
from tests.conftest import Browser  # noqa: E402
from tests.llm_script import Call, Say, ScriptedProvider  # noqa: E402


def wide(columns: int, width: int = 900_000) -> str:
    return "SELECT " + ", ".join(f"printf('%0{width}d', 0) AS c{i}" for i in range(columns))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(
            {
                "TESTING": True,
                "SECRET_KEY": "bench",
                "SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp}/bench.db",
                "PASSWORD_HASH_METHOD": factories.FAST_HASH,
            }
        )
        with app.app_context():
            db.create_all()
            world = factories.make_world()
            viewer_key = world.a.keys["viewer"]
            client = app.test_client()
            print(f"{'case':<44} {'bytes':>12} {'seconds':>8}")
            for n, width in (
                (1, 900_000),
                (5, 900_000),
                (20, 900_000),
                (200, 900_000),
                (20, 200_000),
                (200, 200_000),
            ):
                started = time.perf_counter()
                response = client.get(
                    "/api/v1/query",
                    query_string={"sql": wide(n, width)},
                    headers={"Authorization": f"Bearer {viewer_key}"},
                )
                took = time.perf_counter() - started
                size = len(response.get_data())
                label = f"/api/v1/query, {n} x {width:,} ({response.status_code})"
                print(f"{label:<44} {size:>12,} {took:>8.2f}")
            provider = ScriptedProvider()
            set_llm_provider(provider)
            viewer = world.a.principal("viewer")
            for n, width in ((5, 900_000), (20, 200_000)):
                sql = wide(n, width)
                provider.script.add([Call("records_query", {"sql": sql})], [Say("Zeros.")])
                started = time.perf_counter()
                result = send_message(viewer, SendInput(text="zeros"))
                took = time.perf_counter() - started
                call = db.session.scalars(
                    select(ToolCall).where(ToolCall.conversation_id == result.conversation_id)
                ).one()
                stored = len(json.dumps(call.result or call.error))
                label = f"assistant, {n} x {width:,}: stored result"
                print(f"{label:<44} {stored:>12,} {took:>8.2f}")
                page = Browser(app.test_client()).login(world.a.users["viewer"].email)
                html = page.get(f"/chat/conversations/{result.conversation_id}")
                label = f"assistant, {n} x {width:,}: thread HTML ({html.status_code})"
                print(f"{label:<44} {len(html.get_data()):>12,}")
            set_llm_provider(None)


if __name__ == "__main__":
    main()
