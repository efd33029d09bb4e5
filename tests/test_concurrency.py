"""Concurrent writers: twenty confirms of one proposed write run it once; read-modify-writes
of one record or automation run one after the other."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from sqlalchemy import func, select

from monark.approvals import service as approval_service
from monark.chat.models import ToolCall
from monark.chat.turn.run import run_turn
from monark.chat.turn.start import SendInput, begin_retry, send_message
from monark.core.errors import Conflict
from monark.core.models import Event
from monark.core.rbac import Principal
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
    proposed = send_message(member, SendInput(text="Add exactly once"))
    call_id = db.session.scalar(
        select(ToolCall.id).where(ToolCall.conversation_id == proposed.conversation_id)
    )
    db.session.remove()  # the threads use their own sessions; leave nothing open here

    def click() -> str:
        result = approval_service.confirm_tool_call(member, call_id)
        return f"ran:{result.status}"

    outcomes = _at_once(app, [click] * CLICKS, {Conflict: "conflict"})

    assert sorted(outcomes) == ["conflict"] * (CLICKS - 1) + ["ran:done"], outcomes
    assert db.session.scalar(select(func.count()).where(Record.title == "Exactly once")) == 1
    assert db.session.get(ToolCall, call_id).status == "SUCCEEDED"
    confirmed = db.session.scalar(
        select(func.count()).where(Event.type == "chat.tool_call.confirmed")
    )
    assert confirmed == 1


def _at_once(app, acts: list[Callable[[], str]], expected: dict[type[Exception], str]) -> list[str]:
    """Run ``acts`` in threads of their own, each in its own app context, released at once;
    each one's outcome: what it returned, ``expected``'s word for an error it raised, or the
    error itself for anything else (a bug worth seeing)."""
    start = threading.Barrier(len(acts))
    outcomes: list[str] = []
    lock = threading.Lock()

    def run(act: Callable[[], str]) -> None:
        with app.app_context():
            start.wait()
            try:
                outcome = act()
            except tuple(expected) as err:
                outcome = next(w for kind, w in expected.items() if isinstance(err, kind))
            except Exception as err:
                outcome = f"error:{type(err).__name__}:{err}"
            finally:
                db.session.remove()
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=run, args=(act,)) for act in acts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


def _in_threads(app, *jobs, stagger: float = 0.1) -> list[str]:
    """Run each job in its own app context and thread, started ``stagger`` s apart."""
    outcomes: dict[int, str] = {}

    def run(i, job) -> None:
        time.sleep(i * stagger)
        with app.app_context():
            try:
                job()
                outcomes[i] = "ok"
            except Conflict:
                outcomes[i] = "conflict"
            except Exception as err:  # anything else is a bug worth seeing
                outcomes[i] = f"error:{type(err).__name__}:{err}"
            finally:
                db.session.remove()

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return [outcomes.get(i, "hung") for i in range(len(jobs))]


def _slow_first_call(monkeypatch, module, name: str, seconds: float = 0.4) -> None:
    """The first call of ``module.name`` waits ``seconds``: a read-modify-write held open."""
    original = getattr(module, name)
    first = threading.Lock()

    def slow(*args, **kwargs):
        if first.acquire(blocking=False):
            time.sleep(seconds)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, slow)


@pytest.mark.parametrize("preloaded", [False, True], ids=["fresh", "preloaded"])
def test_two_concurrent_partial_updates_of_one_record_both_stick(
    app, world, monkeypatch, preloaded
):
    from monark.records import services

    owner, member = world.a.principal("owner"), world.a.principal("member")
    record_id = world.a.public.id
    db.session.remove()
    _slow_first_call(monkeypatch, services, "validate_values")

    def update(principal, values):
        def job():
            model = services.get_model(principal, "tasks")
            # As the web view does: the record is already in the session before the update.
            held = services.get_record(principal, model, record_id) if preloaded else None
            services.update_record(principal, model, record_id, values)
            del held

        return job

    outcomes = _in_threads(app, update(owner, {"status": "done"}), update(member, {"points": 5}))
    assert outcomes == ["ok", "ok"]
    values = db.session.get(Record, record_id).values
    assert (values.get("status"), values.get("points")) == ("done", 5), values


@pytest.mark.parametrize("preloaded", [False, True], ids=["fresh", "preloaded"])
def test_two_concurrent_edits_of_one_automation_version_one_wins(
    app, world, monkeypatch, preloaded
):
    from monark.automations import services

    owner, admin = world.a.principal("owner"), world.a.principal("admin")
    graph = {
        "nodes": [
            {"id": "t", "type": "record.created", "config": {"model": "tasks"}},
            {"id": "n", "type": "add_audit_note", "config": {"note": "Seen {{record.id}}."}},
        ],
        "edges": [{"from": "t", "to": "n"}],
    }
    automation_id = services.create_automation(owner, "Flow", graph).id
    db.session.remove()
    _slow_first_call(monkeypatch, services, "check_automation")

    def rename(principal, name):
        def job():
            held = services.get_automation(principal, automation_id) if preloaded else None
            services.update_automation(principal, automation_id, graph=graph, name=name, version=1)
            del held

        return job

    outcomes = _in_threads(app, rename(owner, "By owner"), rename(admin, "By admin"))
    assert sorted(outcomes) == ["conflict", "ok"], outcomes
    from monark.automations.models import Automation

    automation = db.session.get(Automation, automation_id)
    assert automation.version == 2
    assert automation.name == ("By owner" if outcomes[0] == "ok" else "By admin")


def test_two_owners_removing_each_other_at_once_leave_one_owner(app, world, monkeypatch):
    from monark.core.models import Membership
    from monark.settings import members

    second = world.a.users["admin"]
    ms = db.session.scalar(
        select(Membership).where(
            Membership.user_id == second.id, Membership.org_id == world.a.org.id
        )
    )
    ms.role = "owner"
    db.session.commit()
    first_id, second_id = world.a.users["owner"].id, second.id
    memberships = dict(
        db.session.execute(
            select(Membership.user_id, Membership.id).where(Membership.org_id == world.a.org.id)
        ).all()
    )
    db.session.remove()
    _slow_first_call(monkeypatch, members, "get_membership")
    org_id = world.a.org.id

    def remove(actor_id, target_id):
        principal = Principal.for_user(actor_id, org_id, "owner")
        return lambda: members.remove_member(principal, memberships[target_id])

    outcomes = _in_threads(app, remove(first_id, second_id), remove(second_id, first_id))
    refused = "error:Forbidden:You are no longer an admin of this organization."
    assert sorted(outcomes) == [refused, "ok"], outcomes
    owners = db.session.scalar(
        select(func.count()).where(Membership.org_id == org_id, Membership.role == "owner")
    )
    assert owners == 1


class _HeldProvider:
    """Answers "ok", but only once ``release`` is set: a turn that is still running."""

    name = "held"

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def stream(self, request):
        from monark.chat.llm.types import StopReason, TextDelta, UsageReport

        self.calls += 1
        self.started.set()
        self.release.wait(10)
        yield TextDelta("ok")
        yield UsageReport(10, 1, 0, 0)
        yield StopReason("end_turn")


def test_one_turn_at_a_time_per_conversation(app, world):
    from monark.assistant.thread import thread_view
    from monark.chat import store
    from monark.chat.models import Conversation, Message
    from monark.chat.runtime import set_llm_provider

    member = world.a.principal("member")
    conversation_id = store.create_conversation(member, "Busy").id
    db.session.commit()
    db.session.remove()
    provider = _HeldProvider()
    set_llm_provider(provider)
    try:

        def first_tab() -> None:
            with app.app_context():
                send_message(member, SendInput(text="First", conversation_id=conversation_id))
                db.session.remove()

        first = threading.Thread(target=first_tab)
        first.start()
        assert provider.started.wait(10)
        with app.app_context():
            # Another tab: sending, retrying and the thread screen all see the running turn.
            try:
                send_message(member, SendInput(text="Second", conversation_id=conversation_id))
                raise AssertionError("a second turn started")
            except Conflict as err:
                assert "still being written" in err.message
            try:
                run_turn(begin_retry(member, conversation_id))
                raise AssertionError("a retry started")
            except Conflict:
                pass
            assert thread_view(member, conversation_id).running
            db.session.remove()
        provider.release.set()
        first.join(10)
    finally:
        set_llm_provider(None)
    texts = list(
        db.session.scalars(
            select(Message.text)
            .where(Message.conversation_id == conversation_id)
            .order_by(Message.seq)
        )
    )
    assert texts == ["First", "ok"] and provider.calls == 1  # "Second" was never stored
    assert db.session.get(Conversation, conversation_id).turn_id is None


def test_a_turn_claim_left_by_a_dead_process_expires(app, world, scripted):
    from datetime import timedelta

    from monark.chat import store
    from monark.chat.models import Conversation, Message
    from monark.chat.turn import lease
    from monark.chat.turn.start import send_message
    from monark.core.models import utcnow
    from tests.llm_script import Say

    member = world.a.principal("member")
    conversation = store.create_conversation(member, "Orphaned")
    conversation.turn_id = "f" * 32
    conversation.turn_started_at = utcnow() - timedelta(seconds=30)
    conversation.turn_lease_until = utcnow() - timedelta(seconds=1)
    db.session.flush()
    cut = store.add_message(
        conversation,
        member,
        author_kind="agent",
        role="assistant",
        text="Half a",
        status="streaming",
    )
    db.session.commit()
    scripted.script.add([Say("Back again.")])
    result = send_message(member, SendInput(text="Hello?", conversation_id=conversation.id))
    assert result.status == "done"
    db.session.rollback()
    assert db.session.get(Conversation, conversation.id).turn_id is None
    kept = db.session.get(Message, cut.id)
    assert (kept.status, kept.text, kept.error) == ("incomplete", "Half a", lease.INTERRUPTED_REPLY)


def test_simultaneous_prompt_saves_at_the_limit_keep_the_limit(app, world):
    from monark.core.errors import ValidationFailed
    from monark.settings.models import OrgPrompt
    from monark.settings.prompts import MAX_PROMPTS, add_prompt

    admin = world.a.principal("admin")
    for n in range(MAX_PROMPTS - 2):
        add_prompt(admin, f"Prompt {n}")
    db.session.remove()

    def save(n: int) -> Callable[[], str]:
        def act() -> str:
            add_prompt(admin, f"Raced {n}")
            return "saved"

        return act

    outcomes = _at_once(app, [save(n) for n in range(8)], {ValidationFailed: "refused"})
    assert sorted(outcomes) == ["refused"] * 6 + ["saved"] * 2
    count = select(func.count()).select_from(OrgPrompt).where(OrgPrompt.org_id == admin.org_id)
    assert db.session.scalar(count) == MAX_PROMPTS
