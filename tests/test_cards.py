"""One card: its state and actions derived once in Python, a thread drawn in a constant
number of queries however many cards it has, one set of card endpoints for the panel and
the inbox, and a header badge counted in one query."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import event

from monark.approvals import service as approval_service
from monark.assistant.card_view import Action, CallView, CardState, Where, card_of
from monark.chat.models import ToolCallStatus
from monark.chat.turn.run import run_turn
from monark.core.models import utcnow
from monark.extensions import db
from monark.records import services as records
from tests.factories import make_record
from tests.llm_script import Call, Say
from tests.test_chat_loop import calls_of, send
from tests.test_handover import hand


@contextmanager
def statements() -> Iterator[list[str]]:
    """The SQL statements run on the app's engine inside the block."""
    seen: list[str] = []

    def listener(conn, cursor, statement, parameters, context, executemany) -> None:
        seen.append(statement)

    engine = db.engine
    event.listen(engine, "before_cursor_execute", listener)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", listener)


def facts(**values) -> CallView:
    """A write card's facts, waiting in the panel unless ``values`` say otherwise."""
    base = dict(
        id=7,
        name="records_update",
        status=ToolCallStatus.PROPOSED,
        mutates=True,
        headline="update “Task”",
        changes=[],
        input_json="{}",
        result_json=None,
        error=None,
        decided_by=None,
        decided_at=None,
        reject_reason=None,
    )
    return CallView(**(base | values))


# ---- each state, and what it offers ------------------------------------------------------------

A = Action
DONE_AT = utcnow()


@pytest.mark.parametrize(
    ("case", "view", "where", "group", "state", "actions"),
    [
        ("mine", facts(editable=True, allow_label="updates to Tasks records"), Where.PANEL, None,
         CardState.PROPOSED, {A.REJECT, A.EDIT, A.CONFIRM, A.ALLOW}),
        ("mine, nothing to edit", facts(), Where.PANEL, None,
         CardState.PROPOSED, {A.REJECT, A.CONFIRM}),
        ("mine, someone may approve", facts(approvers=[(2, "Olga")]), Where.PANEL, None,
         CardState.PROPOSED, {A.REJECT, A.CONFIRM, A.HAND_OVER}),
        ("handed over", facts(editable=True, approver="Olga", allow_label="x"), Where.PANEL, None,
         CardState.PROPOSED, {A.REJECT}),
        ("handed to someone gone", facts(approver="Olga", approver_gone=True,
                                          approvers=[(3, "Ada")]), Where.PANEL, None,
         CardState.PROPOSED, {A.REJECT, A.HAND_OVER}),
        ("four eyes", facts(editable=True, four_eyes=True, allow_label="x",
                            approvers=[(2, "Olga")]), Where.PANEL, None,
         CardState.PROPOSED, {A.REJECT, A.EDIT, A.HAND_OVER}),
        ("a line of a group", facts(editable=True), Where.PANEL, 3,
         CardState.GROUPED, {A.PICK, A.EDIT}),
        ("a four-eyes line of a group", facts(four_eyes=True, approvers=[(2, "Olga")]),
         Where.PANEL, 3, CardState.GROUPED, {A.HAND_OVER}),
        ("in the inbox", facts(editable=True, approvers=[(2, "Olga")]), Where.INBOX, None,
         CardState.INBOX, {A.REJECT, A.CONFIRM, A.EDIT}),
        ("expired", facts(expired=True, editable=True), Where.PANEL, None,
         CardState.EXPIRED, set()),
        ("expired in the inbox", facts(expired=True), Where.INBOX, None,
         CardState.EXPIRED, set()),
        ("refused before asking", facts(status=ToolCallStatus.FAILED, error="No."),
         Where.PANEL, None, CardState.REFUSED, set()),
        ("rejected", facts(status=ToolCallStatus.REJECTED, decided_at=DONE_AT), Where.PANEL,
         None, CardState.REJECTED, set()),
        ("skipped", facts(status=ToolCallStatus.REJECTED, skipped=True), Where.PANEL, None,
         CardState.SKIPPED, set()),
        ("done, undoable", facts(status=ToolCallStatus.SUCCEEDED, decided_at=DONE_AT,
                                 can_undo=True), Where.PANEL, None, CardState.DECIDED, {A.UNDO}),
        ("done, undone", facts(status=ToolCallStatus.SUCCEEDED, decided_at=DONE_AT,
                               undone=True), Where.PANEL, None, CardState.DECIDED, set()),
        ("failed when run", facts(status=ToolCallStatus.FAILED, decided_at=DONE_AT,
                                  error="No."), Where.PANEL, None, CardState.DECIDED, set()),
        ("ran under an allowance", facts(status=ToolCallStatus.SUCCEEDED, allowed=True,
                                         can_undo=True), Where.PANEL, None,
         CardState.RAN, {A.UNDO}),
        ("an undo", facts(status=ToolCallStatus.SUCCEEDED, undo_of=3), Where.PANEL, None,
         CardState.RAN, set()),
        ("a read", facts(mutates=False, status=ToolCallStatus.SUCCEEDED), Where.PANEL, None,
         CardState.READ, set()),
        ("navigate", facts(name="navigate", mutates=False, status=ToolCallStatus.SUCCEEDED,
                           nav_path="/models/tasks/records", nav_label="Tasks"),
         Where.PANEL, None, CardState.NAVIGATE, set()),
    ],
)  # fmt: skip
def test_each_state_offers_its_actions(case, view, where, group, state, actions):
    card = card_of(view, where, group)
    assert (card.state, set(card.actions)) == (state, actions), case


def test_a_card_says_how_its_head_starts_and_why_it_waits():
    assert card_of(facts()).verb == "Wants to"
    assert card_of(facts(expired=True)).verb == "Did not"
    assert card_of(facts(status=ToolCallStatus.SUCCEEDED, decided_at=DONE_AT)).verb == "Asked to"
    assert card_of(facts(approver="Olga")).waiting_note == "handed"
    assert card_of(facts(approver="Olga", approver_gone=True)).waiting_note == "gone"
    assert card_of(facts(four_eyes=True)).waiting_note == "four_eyes"
    assert card_of(facts(approver="Olga", warning="lacks it")).warning is None
    assert card_of(facts(expired=True)).status == ToolCallStatus.EXPIRED


# ---- a thread, drawn in a constant number of queries -------------------------------------------


def _thread_of(member, scripted, n: int) -> int:
    """A member's conversation with ``n`` writes of one step, half confirmed (done, each
    undoable) and half rejected, then one more write waiting for them."""
    model = records.get_model(member, "tasks")
    targets = [make_record(member, model, f"Card {n}.{i}").id for i in range(n)]
    db.session.commit()
    scripted.script.add(
        [
            Call("records_update", {"model": "tasks", "record_id": r, "values": {"status": "done"}})
            for r in targets
        ],
        [Say("Half of them done.")],
        [Call("records_update", {"model": "tasks", "record_id": targets[0], "values": {}})],
    )
    conversation_id = send(member, "Mark them done").conversation_id
    stored = calls_of(conversation_id)
    chosen = {c.id for c in stored[: n // 2]}
    run_turn(approval_service.begin_group_decision(member, stored[0].message_id, chosen, True))
    send(member, "And the first again", conversation_id=conversation_id)
    db.session.commit()
    return conversation_id


def _queries_to_draw(browser, conversation_id: int) -> tuple[int, BeautifulSoup]:
    # The request shares the test's session: without this, what its identity map still
    # holds (weakly: it depends on when the garbage collector ran) would go uncounted.
    db.session.expunge_all()
    with statements() as seen:
        page = browser.get(f"/chat/conversations/{conversation_id}")
    assert page.status_code == 200
    return len(seen), BeautifulSoup(page.get_data(as_text=True), "html.parser")


def test_a_thread_of_many_cards_is_drawn_in_as_many_queries_as_one_of_few(world, scripted, login):
    member = world.a.principal("member")
    small = _thread_of(member, scripted, 2)
    large = _thread_of(member, scripted, 8)
    browser = login("member@acme.test")
    _queries_to_draw(browser, small)  # the first request warms what every request reads
    few, drawn_small = _queries_to_draw(browser, small)
    many, drawn_large = _queries_to_draw(browser, large)
    assert len(drawn_small.select(".call-write")) == 3
    assert len(drawn_large.select(".call-write")) == 9
    assert len(drawn_large.select('.call-write[data-status="SUCCEEDED"]')) == 4
    assert len(drawn_large.select('.call-write[data-status="REJECTED"]')) == 4
    assert len(drawn_large.select(".call-undo button")) == 4
    assert many == few


# ---- one set of card endpoints -----------------------------------------------------------------


def test_the_inbox_and_the_panel_edit_through_the_same_endpoints(world, scripted, login):
    record_id, owner_id = world.a.public.id, world.a.users["owner"].id
    update = {"model": "tasks", "record_id": record_id, "values": {"status": "done"}}
    scripted.script.add([Call("records_update", update)])
    conversation_id = send(world.a.principal("member"), "Finish it").conversation_id
    (call_id,) = (c.id for c in calls_of(conversation_id))
    member = login("member@acme.test")
    panel = BeautifulSoup(
        member.get(f"/chat/calls/{call_id}").get_data(as_text=True), "html.parser"
    )
    assert panel.select_one(f"#call-{call_id} button[hx-get]")["hx-get"] == (
        f"/chat/calls/{call_id}/edit"
    )
    hand(member, call_id, owner_id)
    owner = login("owner@acme.test")
    inbox = BeautifulSoup(owner.get("/approvals").get_data(as_text=True), "html.parser")
    edit = inbox.select_one(f"#call-{call_id} button[hx-get]")
    assert edit["hx-get"] == f"/chat/calls/{call_id}/edit"
    form = BeautifulSoup(owner.get(edit["hx-get"]).get_data(as_text=True), "html.parser")
    editing = form.select_one("form.call-editing")
    assert editing["hx-post"] == f"/chat/calls/{call_id}/edit"
    cancel = editing.select_one("button[hx-get]")["hx-get"]
    assert cancel == f"/chat/calls/{call_id}"
    card = BeautifulSoup(owner.get(cancel).get_data(as_text=True), "html.parser")
    # Drawn as the inbox draws it: the approver's own Confirm, as a plain form.
    assert card.select_one(f"form[action='/approvals/{call_id}/decide']") is not None


# ---- the header's badge ------------------------------------------------------------------------


def test_the_badge_counts_in_one_query_without_building_the_inbox(world, scripted, login):
    owner_id = world.a.users["owner"].id
    update = {"model": "tasks", "record_id": world.a.public.id, "values": {"status": "done"}}
    scripted.script.add([Call("records_update", update)])
    conversation_id = send(world.a.principal("member"), "Finish it").conversation_id
    (call_id,) = (c.id for c in calls_of(conversation_id))
    hand(login("member@acme.test"), call_id, owner_id)
    owner = login("owner@acme.test")
    with statements() as seen:
        page = owner.get("/models/tasks/records")
    badge = BeautifulSoup(page.get_data(as_text=True), "html.parser").select_one(
        "#approvals-link .approvals-badge"
    )
    assert badge is not None and badge.text.strip() == "1"
    on_calls = [s for s in seen if "chat_tool_calls" in s]
    assert len(on_calls) == 1 and "count(" in on_calls[0].lower()
