"""Undo exactly once across processes: twenty clicks on Undo of one done
write, split across two real gunicorn instances on one database, undo it once; the rest
answer 409. The unique ``undo_of_id`` decides, whichever instance asks first."""

from __future__ import annotations

import functools

import pytest

from tests.instances import Client, at_once, deployment, propose_task, sql_on, wait_turn_ended

pytestmark = pytest.mark.instances  # each starts app processes of its own


def test_twenty_undos_split_across_two_instances_undo_once():
    with deployment(2, broker=False) as two, sql_on(two.database_url) as sql:
        a = Client(two[0].url)
        cid, call_id = propose_task(two.fake, a, sql, "Undo race")
        assert a.post("/chat/decide", {"decision": f"confirm:{call_id}"}).status_code == 200
        wait_turn_ended(sql, cid)
        assert sql("SELECT count(*) FROM records WHERE title = 'Undo race'") == [(1,)]

        clients = [a.at(two[i % 2].url) for i in range(20)]

        def click(client: Client) -> int:
            return client.post("/chat/undo", {"tool_call_id": str(call_id)}).status_code

        statuses = at_once([functools.partial(click, c) for c in clients])
        assert sorted(statuses) == [200] + [409] * 19
        assert sql("SELECT count(*) FROM records WHERE title = 'Undo race'") == [(0,)]
        assert sql("SELECT count(*) FROM chat_tool_calls WHERE undo_of_id = :i", i=call_id) == [
            (1,)
        ]
        assert sql(
            "SELECT count(*) FROM events WHERE type = 'chat.tool_call.undone' AND subject_id = :i",
            i=call_id,
        ) == [(1,)]
