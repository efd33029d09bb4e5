"""Twenty concurrent confirms of one proposed write: it runs exactly once."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from monark.chat import service
from monark.chat.models import ToolCall
from monark.chat.service import SendInput
from monark.core.errors import Conflict
from monark.core.models import Event
from monark.extensions import db
from monark.records.models import Record
from tests.llm_script import Call, Say

CLICKS = 20


def test_twenty_concurrent_confirms_run_the_write_once(app, world, scripted):
    member = world.a.principal("member")
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Exactly once"}})],
        [Say("Created it.")],
    )
    proposed = service.send_message(member, SendInput(text="Add exactly once"))
    call_id = db.session.scalar(
        select(ToolCall.id).where(ToolCall.conversation_id == proposed.conversation_id)
    )
    db.session.remove()  # the threads use their own sessions; leave nothing open here

    start = threading.Barrier(CLICKS)
    outcomes: list[str] = []
    lock = threading.Lock()

    def click() -> None:
        with app.app_context():
            start.wait()
            try:
                result = service.confirm_tool_call(member, call_id)
                outcome = f"ran:{result.status}"
            except Conflict:
                outcome = "conflict"
            except Exception as err:  # anything else is a bug worth seeing
                outcome = f"error:{type(err).__name__}:{err}"
            finally:
                db.session.remove()
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=click) for _ in range(CLICKS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert sorted(outcomes) == ["conflict"] * (CLICKS - 1) + ["ran:done"], outcomes
    assert db.session.scalar(select(func.count()).where(Record.title == "Exactly once")) == 1
    assert db.session.get(ToolCall, call_id).status == "SUCCEEDED"
    confirmed = db.session.scalar(
        select(func.count()).where(Event.type == "chat.tool_call.confirmed")
    )
    assert confirmed == 1
