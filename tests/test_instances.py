"""Two real gunicorn processes on one database, with Redis as their broker: a turn belongs
to no process. Proposed on one and confirmed on the other, stopped from the other, watched
from the other, decided once among twenty clicks on both, one at a time across both, and
taken over within its lease when its process is killed mid-reply.

The database is a fresh one on the server of ``DATABASE_URL`` (PostgreSQL in CI) or a
temporary SQLite file; Redis is ``MONARK_TEST_REDIS_URL`` (127.0.0.1:6379 by default).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator

import pytest

from tests.instances import (
    Client,
    Deployment,
    at_once,
    deployment,
    parse_frames,
    propose_task,
    sql_on,
    wait_turn_ended,
)
from tests.llm_script import Say

pytestmark = pytest.mark.instances  # each starts app processes of its own

LEASE = 3.0  # CHAT_TURN_LEASE_SECONDS of the deployment


@pytest.fixture(scope="module")
def two() -> Iterator[Deployment]:
    with deployment(2) as running:
        yield running


@pytest.fixture
def fake(two):
    two.fake.chunk_delay = 0.0
    two.fake.hang = None
    while two.fake.script.remaining:
        two.fake.script.next()
    return two.fake


@pytest.fixture
def sql(two):
    with sql_on(two.database_url) as run:
        yield run


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def conversation_id(sql, title: str) -> int:
    rows = sql("SELECT id FROM chat_conversations WHERE title = :t ORDER BY id DESC", t=title)
    assert rows, f"no conversation titled {title!r}"
    return rows[0][0]


def test_a_turn_proposed_on_a_is_confirmed_on_b(two, fake, sql):
    a = Client(two[0].url)
    cid, call_id = propose_task(fake, a, sql, "Crossed over")
    b = a.at(two[1].url)
    confirmed = b.stream("POST", "/chat/decide", {"decision": f"confirm:{call_id}"})
    body = confirmed.wait_done()
    assert confirmed.finished == {"conversation_id": cid, "status": "done"}
    assert "Added Crossed over." in body
    assert sql("SELECT count(*) FROM records WHERE title = 'Crossed over'") == [(1,)]


@pytest.mark.parametrize("trial", range(6))
def test_stop_sent_to_the_other_instance_stops_the_turn(two, fake, sql, trial):
    fake.chunk_delay = 0.05
    fake.script.add([Say(words(200))])
    runs, stops = (0, 1) if trial % 2 == 0 else (1, 0)
    a = Client(two[runs].url)
    title = f"Stop trial {trial}"
    streaming = a.send(title)
    streaming.wait_for("w3")
    cid = conversation_id(sql, title)
    started = time.monotonic()
    stop = a.at(two[stops].url).post(f"/chat/conversations/{cid}/stop")
    assert stop.status_code == 200 and stop.json()["status"] == "stopped", stop.text
    streaming.wait_done(10)
    assert time.monotonic() - started < 3.0
    assert streaming.finished["status"] == "stopped"
    [(status, reply)] = sql(
        "SELECT status, text FROM chat_messages WHERE conversation_id = :c AND role = 'assistant'",
        c=cid,
    )
    assert status == "incomplete" and reply.startswith("w0 w1") and "w199" not in reply


def test_a_watcher_on_b_catches_up_with_a_turn_running_on_a(two, fake, sql):
    fake.chunk_delay = 0.03
    fake.script.add([Say(words(120))])
    a = Client(two[0].url)
    running = a.send("Watch me")
    running.wait_for("w15")
    cid = conversation_id(sql, "Watch me")
    b = a.at(two[1].url)
    watcher = b.stream("GET", f"/chat/conversations/{cid}/follow")
    watcher.wait_for("w40")
    frames = parse_frames(watcher.text)
    # First the thread as stored (with the reply so far), then the turn live from the log.
    assert 'hx-target="#chat-thread" hx-swap="outerHTML"' in frames[0]["data"]
    assert any("-text" in f["data"] and "beforeend" in f["data"] for f in frames[1:])
    last_id = next(f["id"] for f in reversed(frames) if f["id"])
    watcher.response.close()
    # A reconnect with Last-Event-ID resumes after it: no snapshot, no word twice.
    resumed = b.stream("GET", f"/chat/conversations/{cid}/follow", **{"Last-Event-ID": last_id})
    body = resumed.wait_done(20)
    first = parse_frames(body)[0]["data"]
    assert "#chat-thread" not in first
    assert resumed.finished["status"] == "done"
    assert "w119" in body
    running.wait_done(20)
    [(reply,)] = sql(
        "SELECT text FROM chat_messages WHERE conversation_id = :c AND role = 'assistant'", c=cid
    )
    assert reply == words(120)
    streamed = "".join(
        f["data"].split(">", 1)[1].rsplit("<", 1)[0]
        for f in parse_frames(watcher.text + resumed.text)
        if 'hx-swap="beforeend">' in f["data"] and "-text" in f["data"]
    )
    assert streamed.count("w41 ") <= 1  # nothing the first connection drew came again


def test_twenty_confirms_split_across_both_run_the_write_once(two, fake, sql):
    a = Client(two[0].url)
    cid, call_id = propose_task(fake, a, sql, "Twenty clicks")
    clients = [a.at(two[i % 2].url) for i in range(20)]

    def click(client: Client) -> int:
        return client.post("/chat/decide", {"decision": f"confirm:{call_id}"}).status_code

    statuses = at_once([functools.partial(click, c) for c in clients])
    assert sorted(statuses) == [200] + [409] * 19
    wait_turn_ended(sql, cid)
    assert sql("SELECT count(*) FROM records WHERE title = 'Twenty clicks'") == [(1,)]
    assert sql("SELECT status FROM chat_tool_calls WHERE id = :i", i=call_id) == [("SUCCEEDED",)]
    assert sql(
        "SELECT count(*) FROM events WHERE type = 'chat.tool_call.confirmed' AND subject_id = :i",
        i=call_id,
    ) == [(1,)]


def test_twenty_mixed_decisions_across_both_one_wins_and_the_rest_hear_what_won(two, fake, sql):
    a = Client(two[0].url)
    cid, call_id = propose_task(fake, a, sql, "Mixed clicks")
    clients = [a.at(two[i % 2].url) for i in range(20)]

    def click(i: int, client: Client) -> tuple[str, int, str]:
        action = "confirm" if i % 4 < 2 else "reject"  # both kinds on both instances
        response = client.post("/chat/decide", {"decision": f"{action}:{call_id}"})
        return action, response.status_code, response.text

    answers = at_once([functools.partial(click, i, c) for i, c in enumerate(clients)])
    winners = [action for action, status, _ in answers if status == 200]
    assert len(answers) == 20 and len(winners) == 1
    assert sorted(status for _, status, _ in answers) == [200] + [409] * 19
    wait_turn_ended(sql, cid)
    confirmed = winners == ["confirm"]
    [(status,)] = sql("SELECT status FROM chat_tool_calls WHERE id = :i", i=call_id)
    assert status == ("SUCCEEDED" if confirmed else "REJECTED")
    assert sql("SELECT count(*) FROM records WHERE title = 'Mixed clicks'") == [
        (1 if confirmed else 0,)
    ]
    said = "already confirmed" if confirmed else "already rejected"
    for _, code, body in answers:
        if code == 409:  # the loser hears what won, with the card as it is now
            assert said in body and f'id="call-{call_id}"' in body
    kinds = sql(
        "SELECT type FROM events WHERE subject_id = :i AND type IN "
        "('chat.tool_call.confirmed', 'chat.tool_call.rejected')",
        i=call_id,
    )
    assert len(kinds) == 1


def test_one_turn_at_a_time_across_both(two, fake, sql):
    fake.chunk_delay = 0.05
    fake.script.add([Say(words(40))], [Say("Second answer.")])
    a = Client(two[0].url)
    first = a.send("One at a time")
    first.wait_for("w2")
    cid = conversation_id(sql, "One at a time")
    b = a.at(two[1].url)
    busy = b.post("/chat/stream", {"text": "Me too", "conversation_id": str(cid)})
    assert busy.status_code == 409 and "still being written" in busy.text
    assert b.post("/chat/retry", {"conversation_id": str(cid)}).status_code == 409
    first.wait_done(20)
    second = b.send("Now me", cid)
    second.wait_done(20)
    assert second.finished["status"] == "done" and "Second answer." in second.text
    texts = [
        t
        for (t,) in sql(
            "SELECT text FROM chat_messages WHERE conversation_id = :c ORDER BY seq", c=cid
        )
    ]
    assert texts == ["One at a time", words(40), "Now me", "Second answer."]


def test_killing_the_process_mid_reply_frees_the_conversation_within_the_lease(two, fake, sql):
    fake.chunk_delay = 0.05
    fake.script.add([Say(words(400))], [Say("I am back.")])
    a = Client(two[0].url)
    streaming = a.send("Kill me")
    streaming.wait_for("w40")
    cid = conversation_id(sql, "Kill me")
    two[0].kill()
    killed = time.monotonic()
    b = a.at(two[1].url)
    try:
        while True:
            retry = b.stream("POST", "/chat/retry", {"conversation_id": str(cid)})
            if retry.status == 200:
                break
            retry.wait_done()
            assert retry.status == 409, retry.text
            assert time.monotonic() - killed < LEASE + 3, "the conversation stayed locked"
            time.sleep(0.2)
        usable_after = time.monotonic() - killed
        retry.wait_done(20)
        assert retry.finished["status"] == "done" and "I am back." in retry.text
    finally:
        two[0].start()
    assert usable_after <= LEASE + 1.5
    rows = sql(
        "SELECT status, text, error FROM chat_messages "
        "WHERE conversation_id = :c AND role = 'assistant' ORDER BY seq",
        c=cid,
    )
    (cut_status, cut_text, cut_error), (status, reply, _) = rows
    # Saved about once a second while it streamed: most of what came before the kill.
    assert cut_status == "incomplete" and cut_text.startswith("w0 w1") and "w25" in cut_text
    assert cut_error and "stopped while writing" in cut_error
    assert (status, reply) == ("complete", "I am back.")
    assert sql("SELECT count(*) FROM chat_tool_calls WHERE status = 'EXECUTING'") == [(0,)]
    thread = b.http.get(f"/chat/conversations/{cid}").text
    assert "The reply broke off" in thread and json.dumps(cid)
