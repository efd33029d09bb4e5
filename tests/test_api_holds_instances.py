"""Held API writes on two real gunicorn processes sharing one database: first writes of
one key arriving at once on both instances make one conversation; a held write whose
approved run is cut off by kill -9 is settled within the lease, changed
nothing, waits for approval again, and runs once approved.

The database is a fresh one on the server of ``DATABASE_URL`` (PostgreSQL) or a temporary
SQLite file. The instances serve ``tests.stalling_app``: the app, with a switch (a file) that
stalls a tool call while it stores its result, so the kill lands mid-write.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.instances import Client, Deployment, at_once, deployment, sql_on
from tests.stalling_app import STALLED

pytestmark = pytest.mark.instances  # each starts app processes of its own

LEASE = 3.0  # CHAT_TURN_LEASE_SECONDS of the deployment
NEW_TOKEN = re.compile(r'id="new-token">([^<]+)<')


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> Iterator[tuple[Deployment, Path]]:
    stall = tmp_path_factory.mktemp("stall") / "stall-writes"
    with deployment(
        2, broker=False, app="tests.stalling_app:app", MONARK_TEST_STALL_FILE=str(stall)
    ) as running:
        yield running, stall


@pytest.fixture
def sql(two):
    with sql_on(two[0].database_url) as run:
        yield run


def held_key(owner: Client, name: str) -> str:
    """A new member key whose writes need approval, made on the API keys page."""
    page = owner.post(
        "/settings/api-keys", {"name": name, "role": "member", "writes_need_approval": "on"}
    )
    return NEW_TOKEN.search(page.text).group(1)


def write(base_url: str, token: str, title: str) -> httpx2.Response:
    return httpx2.post(
        f"{base_url}/api/v1/models/tasks/records",
        json={"values": {"title": title, "status": "todo"}},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )


def status(base_url: str, token: str, approval_id: int) -> dict:
    return httpx2.get(
        f"{base_url}/api/v1/approvals/{approval_id}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ).json()


def test_first_writes_of_one_key_at_once_on_both_instances_share_one_conversation(two, sql):
    running, _ = two
    owner = Client(running[0].url)
    tokens = [held_key(owner, f"Racing agent {k}") for k in range(3)]
    per_key = 6

    def send(token: str, n: int) -> int:
        return write(running[n % 2].url, token, f"Race {token[:10]} {n}").status_code

    sends = [functools.partial(send, t, n) for t in tokens for n in range(per_key)]
    answers = at_once(sends)
    assert answers == [202] * len(sends)
    for token in tokens:
        conversations = sql(
            "SELECT c.id FROM chat_conversations c JOIN api_keys k ON k.id = c.api_key_id "
            "WHERE k.prefix = :p",
            p=token[:10],
        )
        assert len(conversations) == 1, conversations
        seqs = sql(
            "SELECT seq FROM chat_messages WHERE conversation_id = :c ORDER BY seq",
            c=conversations[0][0],
        )
        assert [s for (s,) in seqs] == list(range(1, per_key + 1))


def wait_for_log(path: Path, needle: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while needle not in path.read_text():
        assert time.monotonic() < deadline, f"{needle!r} never logged"
        time.sleep(0.05)


def test_a_held_write_cut_off_by_kill_9_is_settled_and_asked_again(two, sql):
    running, stall = two
    a, b = running[0], running[1]
    owner = Client(a.url)
    token = held_key(owner, "Cut-off agent")
    held = write(a.url, token, "Killed mid-write")
    assert held.status_code == 202
    approval_id = held.json()["id"]

    stall.touch()
    confirming = threading.Thread(target=confirm_on_doomed_instance, args=(owner, approval_id))
    confirming.start()
    try:
        wait_for_log(a.log_path, STALLED)  # the write is done, its result being stored
        a.kill()
    finally:
        stall.unlink()
    killed = time.monotonic()
    confirming.join(30)

    while (out := status(b.url, token, approval_id))["status"] == "running":
        assert time.monotonic() - killed < LEASE + 10, "still running long after the lease"
        time.sleep(0.2)
    assert out["status"] == "failed" and "nothing was changed" in out["error"]
    again_id = out["asked_again_as"]
    assert again_id and f"approval {again_id}" in out["error"]
    assert sql("SELECT count(*) FROM records WHERE title = 'Killed mid-write'") == [(0,)]
    assert sql("SELECT count(*) FROM chat_tool_calls WHERE status = 'EXECUTING'") == [(0,)]

    inbox = owner.at(b.url).http.get("/approvals").text
    assert f'id="approval-{again_id}"' in inbox and "Decide again" in inbox
    decided = owner.at(b.url).post(f"/approvals/{again_id}/decide", {"decision": "confirm"})
    assert decided.status_code < 400
    assert status(b.url, token, again_id)["status"] == "succeeded"
    assert sql("SELECT count(*) FROM records WHERE title = 'Killed mid-write'") == [(1,)]
    a.start()


def confirm_on_doomed_instance(approver: Client, approval_id: int) -> None:
    """Confirm on an instance that is killed before it answers."""
    with contextlib.suppress(httpx2.HTTPError):
        approver.post(f"/approvals/{approval_id}/decide", {"decision": "confirm"})
