"""Branches: Regenerate and Edit make a new version, the old kept; the model reads only the
active path; a write done on a version set aside stays done and is never run again."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from monark.approvals import service as approval_service
from monark.chat import branches, store
from monark.chat.llm.types import TextBlock, ToolResultBlock
from monark.chat.models import Conversation, Message, MessageRole, ToolCall
from monark.chat.transcript import SET_ASIDE_OPENING
from monark.chat.turn import lease
from monark.chat.turn.branching import (
    EDIT_WAITS,
    NOT_LAST,
    NOTHING_TO_REGENERATE,
    REGENERATE_WAITS,
    SWITCH_WAITS,
    begin_edit,
    begin_regenerate,
    switch_branch,
)
from monark.chat.turn.run import run_turn
from monark.core.errors import Conflict, NotFound, ValidationFailed
from monark.core.models import Event
from monark.extensions import db
from monark.records.models import Record
from tests.llm_script import Call, Say
from tests.test_chat_loop import send


def texts(request) -> list[str]:
    """Every text block of a request's messages, in order."""
    return [b.text for m in request.messages for b in m.content if isinstance(b, TextBlock)]


def path_texts(conversation_id: int) -> list[str]:
    db.session.rollback()
    conversation = db.session.get(Conversation, conversation_id)
    return [r.text for r in store.load_transcript(conversation_id, conversation.head_id)]


def count(model, *where) -> int:
    db.session.rollback()
    return db.session.scalar(select(func.count()).select_from(model).where(*where))


def regenerate(principal, conversation_id):
    return run_turn(begin_regenerate(principal, conversation_id))


def edit(principal, message_id, text):
    return run_turn(begin_edit(principal, message_id, text))


def message_id(conversation_id: int, text: str) -> int:
    db.session.rollback()
    return db.session.scalar(
        select(Message.id)
        .where(Message.conversation_id == conversation_id, Message.text == text)
        .order_by(Message.seq)
    )


def test_regenerate_makes_a_second_reply_beside_the_first_which_is_kept(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("First answer.")], [Say("Second answer.")])
    first = send(member, "Tell me a joke")
    assert regenerate(member, first.conversation_id).status == "done"
    assert path_texts(first.conversation_id) == ["Tell me a joke", "Second answer."]
    # Both replies are stored, answering the same message.
    question = message_id(first.conversation_id, "Tell me a joke")
    replies = db.session.scalars(
        select(Message).where(Message.role == MessageRole.ASSISTANT).order_by(Message.seq)
    ).all()
    assert [r.text for r in replies] == ["First answer.", "Second answer."]
    assert [r.parent_id for r in replies] == [question, question]
    # The model was asked the question alone again: the first answer is not in its history.
    assert "First answer." not in texts(scripted.requests[1])
    assert texts(scripted.requests[1])[-1] == "Tell me a joke"


def test_the_next_turn_reads_only_the_active_path_and_switching_changes_it(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("Apples.")], [Say("Pears.")], [Say("Noted.")], [Say("Again.")])
    first = send(member, "Name a fruit")
    cid = first.conversation_id
    regenerate(member, cid)
    send(member, "Why that one?", conversation_id=cid)
    assert "Pears." in texts(scripted.requests[2]) and "Apples." not in texts(scripted.requests[2])
    # Back to the first version: the path ends at its reply, as that branch was left.
    assert switch_branch(member, cid, message_id(cid, "Apples.")) is True
    assert path_texts(cid) == ["Name a fruit", "Apples."]
    send(member, "And now?", conversation_id=cid)
    seen = texts(scripted.requests[3])
    assert "Apples." in seen and "Pears." not in seen and "Why that one?" not in seen
    assert path_texts(cid) == ["Name a fruit", "Apples.", "And now?", "Again."]
    # Every message stays stored.
    assert count(Message, Message.conversation_id == cid) == 7


def test_switching_to_a_version_goes_to_where_that_branch_was_left(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("A1.")], [Say("B1.")], [Say("B2.")])
    cid = send(member, "Start").conversation_id
    regenerate(member, cid)
    send(member, "More", conversation_id=cid)
    switch_branch(member, cid, message_id(cid, "A1."))
    assert path_texts(cid) == ["Start", "A1."]
    switch_branch(member, cid, message_id(cid, "B1."))
    assert path_texts(cid) == ["Start", "B1.", "More", "B2."]
    # A version already shown changes nothing (a second click, another tab).
    assert switch_branch(member, cid, message_id(cid, "B1.")) is False


def test_a_switch_leaves_the_paths_own_results_whole_whatever_was_stubbed_on_the_other(
    world, scripted
):
    member = world.a.principal("member")
    scripted.script.add(
        [Call("records_list", {"model": "tasks"})], [Say("Found.")], [Say("Other.")]
    )
    cid = send(member, "List the tasks").conversation_id
    regenerate(member, cid)
    # The other version's turns grew long: results before its newest message became stubs.
    conversation = db.session.get(Conversation, cid)
    newest = db.session.scalar(select(func.max(Message.id)))
    conversation.context_stub_before = conversation.context_stub_moved_at = newest + 1
    db.session.commit()
    switch_branch(member, cid, message_id(cid, "Found."))
    scripted.script.add([Say("Noted.")])
    send(member, "And?", conversation_id=cid)
    request = scripted.requests[-1]
    results = [b for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert len(results) == 1 and "omitted to save space" not in results[0].content


def test_edit_sends_a_new_version_of_the_last_message_the_old_kept(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("Hi.")], [Say("Three tasks.")], [Say("Four tasks.")])
    cid = send(member, "Hello").conversation_id
    send(member, "How many taks?", conversation_id=cid)
    old = message_id(cid, "How many taks?")
    assert edit(member, old, "How many tasks are open?").status == "done"
    assert path_texts(cid) == ["Hello", "Hi.", "How many tasks are open?", "Four tasks."]
    new = db.session.get(Message, message_id(cid, "How many tasks are open?"))
    old_row = db.session.get(Message, old)
    assert new.parent_id == old_row.parent_id == message_id(cid, "Hi.")
    assert new.content == old_row.content  # the page context it was first sent with
    seen = texts(scripted.requests[2])
    assert "How many taks?" not in seen and "Three tasks." not in seen
    assert seen[-1] == "How many tasks are open?"
    # Back to the first wording.
    switch_branch(member, cid, old)
    assert path_texts(cid) == ["Hello", "Hi.", "How many taks?", "Three tasks."]


def test_the_first_message_can_be_edited_too(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("One.")], [Say("Two.")])
    cid = send(member, "Frist").conversation_id
    edit(member, message_id(cid, "Frist"), "First")
    assert path_texts(cid) == ["First", "Two."]
    switch_branch(member, cid, message_id(cid, "Frist"))
    assert path_texts(cid) == ["Frist", "One."]


def test_a_write_done_on_a_version_set_aside_is_never_run_again_and_the_model_is_told(
    world, scripted
):
    member = world.a.principal("member")
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Buy milk"}})],
        [Say("Added Buy milk.")],
        [Say("Here is another take.")],
    )
    first = send(member, "Add a task: buy milk")
    cid = first.conversation_id
    (call,) = db.session.scalars(select(ToolCall).where(ToolCall.conversation_id == cid)).all()
    run_turn(approval_service.begin_decision(member, call.id, True, ""))
    assert count(Record, Record.title == "Buy milk") == 1
    assert regenerate(member, cid).status == "done"
    # Nothing ran again: one record, one call, still the one that succeeded.
    assert count(Record, Record.title == "Buy milk") == 1
    assert count(ToolCall, ToolCall.conversation_id == cid) == 1
    assert db.session.get(ToolCall, call.id).status == "SUCCEEDED"
    # The new version's request tells the model, right after the question, what stays done.
    seen = texts(scripted.requests[2])
    note = next(t for t in seen if t.startswith(SET_ASIDE_OPENING))
    assert "records_create" in note and "Buy milk" in note
    assert seen.index(note) == len(seen) - 1 or seen[seen.index(note) - 1] == (
        "Add a task: buy milk"
    )
    # And it is not there for the version that did the write, when it is shown again.
    switch_branch(member, cid, message_id(cid, "Added Buy milk."))
    db.session.rollback()
    head = db.session.get(Conversation, cid).head_id
    rows = store.load_transcript(cid, head)
    assert all(not r.set_aside for r in rows)


def test_a_read_on_a_version_set_aside_is_not_told_as_a_change(world, scripted):
    member = world.a.principal("member")
    scripted.script.add(
        [Call("records_list", {"model": "tasks"})], [Say("One task.")], [Say("Again: one.")]
    )
    cid = send(member, "What tasks?").conversation_id
    regenerate(member, cid)
    assert not any(t.startswith(SET_ASIDE_OPENING) for t in texts(scripted.requests[2]))


def _waiting_write(member, scripted) -> int:
    scripted.script.add(
        [Say("Shall I?"), Call("records_create", {"model": "tasks", "values": {"title": "X"}})]
    )
    return send(member, "Add X").conversation_id


@pytest.mark.parametrize("what", ["regenerate", "edit", "switch"])
def test_nothing_branches_while_a_card_waits_and_nothing_is_stored(world, scripted, what):
    member = world.a.principal("member")
    scripted.script.add([Say("Hi.")], [Say("Hello again.")])
    cid = send(member, "Hi").conversation_id
    regenerate(member, cid)
    scripted.script.add(
        [Say("Shall I?"), Call("records_create", {"model": "tasks", "values": {"title": "X"}})]
    )
    send(member, "Add X", conversation_id=cid)
    before = count(Message, Message.conversation_id == cid)
    head = db.session.get(Conversation, cid).head_id
    attempts = {
        "regenerate": (lambda: begin_regenerate(member, cid), REGENERATE_WAITS),
        "edit": (lambda: begin_edit(member, message_id(cid, "Add X"), "Add Y"), EDIT_WAITS),
        "switch": (lambda: switch_branch(member, cid, message_id(cid, "Hi.")), SWITCH_WAITS),
    }
    attempt, why = attempts[what]
    with pytest.raises(Conflict) as refused:
        attempt()
    assert refused.value.message == why and refused.value.status == 409
    assert count(Message, Message.conversation_id == cid) == before
    assert db.session.get(Conversation, cid).head_id == head
    assert lease.live_turn(cid) is None  # the claim was given back
    assert db.session.scalar(select(ToolCall.status).where(ToolCall.name == "records_create")) == (
        "PROPOSED"
    )


@pytest.mark.parametrize("what", ["regenerate", "edit", "switch"])
def test_nothing_branches_while_a_turn_runs(world, scripted, what):
    member = world.a.principal("member")
    scripted.script.add([Say("A.")], [Say("B.")])
    cid = send(member, "Q").conversation_id
    regenerate(member, cid)
    turn_id = lease.claim(cid)  # another tab's turn, running
    try:
        attempts = {
            "regenerate": lambda: begin_regenerate(member, cid),
            "edit": lambda: begin_edit(member, message_id(cid, "Q"), "Q2"),
            "switch": lambda: switch_branch(member, cid, message_id(cid, "A.")),
        }
        with pytest.raises(Conflict) as refused:
            attempts[what]()
        assert refused.value.message == lease.BUSY
        assert path_texts(cid) == ["Q", "B."]
    finally:
        lease.release(cid, turn_id)


def test_regenerate_needs_a_reply_to_regenerate(world, scripted):
    member = world.a.principal("member")
    conversation = store.create_conversation(member, "Empty")
    db.session.commit()
    with pytest.raises(Conflict) as refused:
        run_turn(begin_regenerate(member, conversation.id))
    assert refused.value.message == NOTHING_TO_REGENERATE


def test_only_the_last_message_can_be_edited(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("One.")], [Say("Two.")])
    cid = send(member, "First").conversation_id
    send(member, "Second", conversation_id=cid)
    with pytest.raises(Conflict) as refused:
        begin_edit(member, message_id(cid, "First"), "Changed")
    assert refused.value.message == NOT_LAST
    assert path_texts(cid) == ["First", "One.", "Second", "Two."]


@pytest.mark.parametrize("text", ["", "   ", "x" * 16_001])
def test_an_edit_is_checked_like_a_message(world, scripted, text):
    member = world.a.principal("member")
    scripted.script.add([Say("One.")])
    cid = send(member, "First").conversation_id
    with pytest.raises(ValidationFailed) as refused:
        begin_edit(member, message_id(cid, "First"), text)
    assert refused.value.field_errors().get("text")
    assert count(Message, Message.conversation_id == cid) == 2


def test_another_persons_conversation_and_messages_are_not_found(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("A.")], [Say("B.")])
    cid = send(member, "Mine").conversation_id
    regenerate(member, cid)
    first_reply = message_id(cid, "A.")
    for other in (world.a.principal("viewer"), world.b.principal("member")):
        with pytest.raises(NotFound):
            begin_regenerate(other, cid)
        with pytest.raises(NotFound):
            begin_edit(other, message_id(cid, "Mine"), "Theirs")
        with pytest.raises(NotFound):
            switch_branch(other, cid, first_reply)
    assert path_texts(cid) == ["Mine", "B."]


def test_a_message_of_another_conversation_is_not_found_when_switching(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("A.")], [Say("B.")], [Say("C.")])
    one = send(member, "One").conversation_id
    regenerate(member, one)
    two = send(member, "Two").conversation_id
    with pytest.raises(NotFound):
        switch_branch(member, one, message_id(two, "C."))
    with pytest.raises(NotFound):
        switch_branch(member, one, 10**9)


def test_branching_is_audited_with_ids_only(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("A.")], [Say("B.")])
    cid = send(member, "Secret question").conversation_id
    regenerate(member, cid)
    switch_branch(member, cid, message_id(cid, "A."))
    events = db.session.scalars(
        select(Event)
        .where(Event.type.in_(["chat.conversation.branched", "chat.conversation.branch_switched"]))
        .order_by(Event.id)
    ).all()
    assert [e.type for e in events] == [
        "chat.conversation.branched",
        "chat.conversation.branch_switched",
    ]
    assert events[0].payload["how"] == "regenerate"
    assert all("Secret" not in str(e.payload) for e in events)


def test_a_flat_conversation_is_read_in_order_and_stores_no_parents(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("A.")], [Say("B.")])
    cid = send(member, "One").conversation_id
    send(member, "Two", conversation_id=cid)
    db.session.rollback()
    assert db.session.get(Conversation, cid).head_id is None
    parents = db.session.scalars(select(Message.parent_id).where(Message.conversation_id == cid))
    assert set(parents) == {None}
    assert path_texts(cid) == ["One", "A.", "Two", "B."]


def test_the_path_and_versions_of_rows(world):
    class R:
        def __init__(self, id, parent_id):
            self.id, self.parent_id = id, parent_id

    rows = [R(1, None), R(2, 1), R(3, 1), R(4, 3), R(5, None)]
    assert [r.id for r in branches.active_path(rows, 4)] == [1, 3, 4]
    assert [r.id for r in branches.active_path(rows, None)] == [1, 2, 3, 4, 5]
    # A head that is gone: the newest message's branch, never both versions at once.
    assert [r.id for r in branches.active_path([*rows[:4], R(6, 2)], 99)] == [1, 2, 6]
    assert branches.newest_leaf(rows, 1) == 4 and branches.newest_leaf(rows, 2) == 2
    aside = branches.set_aside(rows, branches.active_path(rows, 4))
    assert [r.id for r in aside[3]] == [2] and [r.id for r in aside[1]] == [5]


def _statements(run) -> int:
    """The SQL statements ``run()`` makes on this thread (the lease keeper's are its own)."""
    import threading

    from sqlalchemy import event

    me, seen = threading.get_ident(), []

    def count(*_args) -> None:
        if threading.get_ident() == me:
            seen.append(1)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        run()
    finally:
        event.remove(db.engine, "before_cursor_execute", count)
    return len(seen)


def test_a_turn_on_a_branch_costs_the_statements_of_a_turn_on_a_flat_conversation(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("A.")], [Say("B.")], [Say("C.")], [Say("D.")], [Say("E.")])
    flat = send(member, "One").conversation_id
    send(member, "Two", conversation_id=flat)
    branched = send(member, "One").conversation_id
    regenerate(member, branched)
    db.session.rollback()
    flat_cost = _statements(lambda: send(member, "Three", conversation_id=flat))
    branched_cost = _statements(lambda: send(member, "Three", conversation_id=branched))
    assert flat_cost > 10 and branched_cost == flat_cost


def test_the_path_to_a_message_is_its_own_branch_up_to_it():
    from dataclasses import dataclass as _dataclass

    from monark.chat.branches import path_to

    @_dataclass
    class Row:
        id: int
        parent_id: int | None

    flat = [Row(1, None), Row(2, None), Row(3, None), Row(4, None)]
    assert [r.id for r in path_to(flat, 2, branched=False)] == [1, 2]
    # 1 → 2 → 3, and 2 → 4 (a regenerated reply): 4's path skips 3, 3's stops at it.
    tree = [Row(1, None), Row(2, 1), Row(3, 2), Row(4, 2), Row(5, 4)]
    assert [r.id for r in path_to(tree, 4, branched=True)] == [1, 2, 4]
    assert [r.id for r in path_to(tree, 3, branched=True)] == [1, 2, 3]
    assert path_to(tree, 99, branched=True) == [] and path_to(flat, 99, branched=False) == []
