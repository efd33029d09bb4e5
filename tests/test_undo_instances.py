"""Undo exactly once across processes: twenty clicks on Undo of one done
write, split across two real gunicorn instances on one database, undo it once; the rest
answer 409. The unique ``undo_of_id`` decides, whichever instance asks first."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import create_engine, text

from tests.instances import Client, deployment
from tests.llm_script import Call, Say

pytestmark = pytest.mark.instances  # each starts app processes of its own


def test_twenty_undos_split_across_two_instances_undo_once():
    with deployment(2, broker=False) as two:
        engine = create_engine(two.database_url)

        def sql(statement: str, **params):
            with engine.connect() as conn:
                return conn.execute(text(statement), params).all()

        two.fake.script.add(
            [
                Call(
                    "records_create",
                    {"model": "tasks", "values": {"title": "Undo race", "status": "todo"}},
                )
            ],
            [Say("Created.")],
        )
        a = Client(two[0].url)
        proposed = a.send("Add Undo race")
        proposed.wait_done()
        cid = proposed.finished["conversation_id"]
        [(call_id,)] = sql(
            "SELECT id FROM chat_tool_calls WHERE conversation_id = :c AND status = 'PROPOSED'",
            c=cid,
        )
        assert a.post("/chat/decide", {"decision": f"confirm:{call_id}"}).status_code == 200
        deadline = time.monotonic() + 20
        while sql("SELECT turn_id FROM chat_conversations WHERE id = :c", c=cid) != [(None,)]:
            assert time.monotonic() < deadline, "the turn never ended"
            time.sleep(0.1)
        assert sql("SELECT count(*) FROM records WHERE title = 'Undo race'") == [(1,)]

        clients = [a.at(two[i % 2].url) for i in range(20)]
        barrier = threading.Barrier(20)
        statuses: list[int] = []
        lock = threading.Lock()

        def click(client: Client) -> None:
            barrier.wait()
            response = client.post("/chat/undo", {"tool_call_id": str(call_id)})
            with lock:
                statuses.append(response.status_code)

        threads = [threading.Thread(target=click, args=(c,)) for c in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(statuses) == [200] + [409] * 19
        assert sql("SELECT count(*) FROM records WHERE title = 'Undo race'") == [(0,)]
        assert sql("SELECT count(*) FROM chat_tool_calls WHERE undo_of_id = :i", i=call_id) == [
            (1,)
        ]
        assert sql(
            "SELECT count(*) FROM events WHERE type = 'chat.tool_call.undone' AND subject_id = :i",
            i=call_id,
        ) == [(1,)]
        engine.dispose()
