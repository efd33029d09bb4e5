"""The agent loop with a scripted provider: reads run, writes wait, decisions resume."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from monark.approvals import service as approval_service
from monark.assistant import conversation_list
from monark.chat import store
from monark.chat.llm.types import TextBlock, ToolResultBlock, ToolUseBlock
from monark.chat.loop import advance_conversation
from monark.chat.models import Message, ToolCall
from monark.chat.turn.start import SendInput, send_message
from monark.core.errors import Conflict, Forbidden, NotFound
from monark.core.models import Event
from monark.extensions import db
from monark.records.models import Record
from tests.llm_script import Call, Fail, Say
from tests.tuning import configure


def send(principal, text="Hello", conversation_id=None, **context):
    data = SendInput(text=text, conversation_id=conversation_id, page_context=context or None)
    return send_message(principal, data)


def records_titled(title: str) -> int:
    return db.session.scalar(select(func.count()).where(Record.title == title))


def calls_of(conversation_id: int) -> list[ToolCall]:
    return list(
        db.session.scalars(
            select(ToolCall)
            .where(ToolCall.conversation_id == conversation_id)
            .order_by(ToolCall.id)
        )
    )


def test_a_read_runs_at_once_and_the_model_answers_with_its_result(world, scripted):
    scripted.script.add([Call("records_list", {"model": "tasks"})], [Say("You have 1 task.")])
    result = send(world.a.principal("viewer"), "What are my tasks?")
    assert result.status == "done"
    (call,) = calls_of(result.conversation_id)
    assert call.status == "SUCCEEDED" and not call.mutates
    assert [r["title"] for r in call.result["items"]] == ["Acme public task"]
    second = scripted.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "user"]
    (use,) = second[1].content
    (res,) = second[2].content
    assert isinstance(use, ToolUseBlock) and isinstance(res, ToolResultBlock)
    assert res.tool_use_id == use.id == call.provider_call_id and not res.is_error
    assert "Acme public task" in res.content


def test_a_write_stops_at_proposed_with_no_side_effect(world, scripted):
    scripted.script.add(
        [
            Say("I'll add it."),
            Call("records_create", {"model": "tasks", "values": {"title": "Buy milk"}}),
        ]
    )
    result = send(world.a.principal("member"), "Add a task: buy milk")
    assert result.status == "awaiting_confirmation"
    (call,) = calls_of(result.conversation_id)
    assert call.status == "PROPOSED" and call.mutates
    assert records_titled("Buy milk") == 0
    assert len(scripted.requests) == 1
    # Advancing again does not call the model while the call is pending.
    again = advance_conversation(world.a.principal("member"), result.conversation_id)
    assert again.status == "awaiting_confirmation" and len(scripted.requests) == 1


def test_confirm_runs_the_stored_write_as_the_user_via_the_assistant(world, scripted):
    member = world.a.principal("member")
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Buy milk"}})],
        [Say("Done: Buy milk is on the list.")],
    )
    proposed = send(member, "Add a task: buy milk")
    (call,) = calls_of(proposed.conversation_id)
    result = approval_service.confirm_tool_call(member, call.id)
    assert result.status == "done"
    db.session.refresh(call)
    assert call.status == "SUCCEEDED" and call.decided_by_id == member.user_id
    assert call.decided_at is not None and call.duration_ms is not None
    assert records_titled("Buy milk") == 1
    event = db.session.scalar(
        select(Event).where(Event.type == "record.created").order_by(Event.id.desc())
    )
    assert event.actor_kind == "assistant"
    assert event.actor_id == member.user_id and event.on_behalf_of_id == member.user_id
    assert event.conversation_id == proposed.conversation_id
    results = [
        b for b in scripted.requests[1].messages[-1].content if isinstance(b, ToolResultBlock)
    ]
    assert len(results) == 1 and not results[0].is_error and "Buy milk" in results[0].content


def test_reject_continues_with_the_refusal_visible_to_the_model(world, scripted):
    member = world.a.principal("member")
    scripted.script.add(
        [Call("records_delete", {"model": "tasks", "record_id": world.a.public.id})],
        [Say("Understood, I left it alone.")],
    )
    proposed = send(member, "Delete the public task")
    (call,) = calls_of(proposed.conversation_id)
    result = approval_service.reject_tool_call(member, call.id, reason="I still need it")
    assert result.status == "done"
    db.session.refresh(call)
    assert call.status == "REJECTED" and call.reject_reason == "I still need it"
    assert db.session.get(Record, world.a.public.id) is not None
    (res,) = scripted.requests[1].messages[-1].content
    assert res.is_error and "rejected" in res.content and "I still need it" in res.content


def test_a_mixed_message_runs_the_read_and_holds_the_write(world, scripted):
    member = world.a.principal("member")
    scripted.script.add(
        [
            Call("models_get", {"model": "tasks"}),
            Call("records_create", {"model": "tasks", "values": {"title": "Mixed"}}),
        ],
        [Say("Created.")],
    )
    proposed = send(member, "Look at tasks and add one")
    read, write = calls_of(proposed.conversation_id)
    assert proposed.status == "awaiting_confirmation"
    assert read.status == "SUCCEEDED" and write.status == "PROPOSED"
    assert records_titled("Mixed") == 0
    approval_service.confirm_tool_call(member, write.id)
    last = scripted.requests[1].messages[-1].content
    assert [b.tool_use_id for b in last] == [read.provider_call_id, write.provider_call_id]
    assert records_titled("Mixed") == 1


def test_an_unknown_tool_fails_closed_before_any_card(world, scripted):
    owner = world.a.principal("owner")
    scripted.script.add(
        [Call("drop_everything", {"really": True})], [Say("That tool does not exist.")]
    )
    result = send(owner, "Wipe it all")
    (call,) = calls_of(result.conversation_id)
    # No card waits for a tool that can never run: the model reads the refusal at once.
    assert result.status == "done"
    assert call.status == "FAILED" and call.decided_at is None
    assert "There is no tool named 'drop_everything'" in call.error
    (res,) = scripted.requests[1].messages[-1].content
    assert res.is_error and "There is no tool named 'drop_everything'" in res.content
    with pytest.raises(Conflict):
        approval_service.confirm_tool_call(owner, call.id)


def test_the_turn_stops_after_eight_model_steps_with_a_visible_note(world, scripted):
    MAX_STEPS = 8
    scripted.script.add(*[[Call("me_get")] for _ in range(MAX_STEPS + 3)])
    result = send(world.a.principal("viewer"), "Loop forever")
    assert result.status == "step_limit"
    assert len(scripted.requests) == MAX_STEPS
    note = db.session.scalar(
        select(Message).where(
            Message.conversation_id == result.conversation_id, Message.role == "note"
        )
    )
    assert note is not None and "8 steps" in note.text
    # The next message starts a new turn with a fresh budget.
    scripted.script._steps.clear()
    scripted.script.add([Say("Back.")])
    again = send(world.a.principal("viewer"), "Go on", conversation_id=result.conversation_id)
    assert again.status == "done"


def test_a_viewers_confirmed_create_fails_on_permission_and_writes_nothing(world, scripted):
    viewer = world.a.principal("viewer")
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Sneaky"}})],
        [Say("You are not allowed to create records.")],
    )
    proposed = send(viewer, "Add a task")
    (call,) = calls_of(proposed.conversation_id)
    approval_service.confirm_tool_call(viewer, call.id)
    db.session.refresh(call)
    assert call.status == "FAILED" and "records.create" in call.error
    assert records_titled("Sneaky") == 0
    (res,) = scripted.requests[1].messages[-1].content
    assert res.is_error and "records.create" in res.content


def test_invalid_arguments_come_back_as_an_error_naming_the_fields(world, scripted):
    scripted.script.add(
        [Call("records_list", {"model": "tasks", "limit": 500, "colour": "red"})], [Say("Oops.")]
    )
    result = send(world.a.principal("member"), "List")
    (call,) = calls_of(result.conversation_id)
    assert call.status == "FAILED"
    assert "colour" in call.error
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": 5, "points": "x"}})],
        [Say("Fixing.")],
    )
    member = world.a.principal("member")
    # Values the model's fields can never take fail before any card asks the user.
    refused = send(member, "Add", conversation_id=result.conversation_id)
    write = calls_of(result.conversation_id)[-1]
    assert write.status == "FAILED" and write.decided_at is None
    assert "values.title" in write.error and "values.points" in write.error
    assert refused.status == "done"


def test_resume_after_the_app_is_rebuilt_between_proposal_and_confirmation(world, scripted):
    from monark import create_app
    from monark.chat.runtime import set_llm_provider

    member = world.a.principal("member")
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Survives restarts"}})],
        [Say("Created after the restart.")],
    )
    proposed = send(member, "Add it")
    call_id = calls_of(proposed.conversation_id)[0].id
    db.session.remove()
    fresh = create_app({"TESTING": True, "SECRET_KEY": "test"})
    with fresh.app_context():
        set_llm_provider(scripted)  # the provider lives on the app: give the new one the script
        result = approval_service.confirm_tool_call(member, call_id)
        assert result.status == "done"
        assert records_titled("Survives restarts") == 1
        text = db.session.scalars(
            select(Message.text).where(Message.conversation_id == proposed.conversation_id)
        ).all()
        assert text[-1] == "Created after the restart."


def test_a_decided_call_cannot_be_decided_again(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "Once"}})])
    proposed = send(member, "Add")
    (call,) = calls_of(proposed.conversation_id)
    approval_service.confirm_tool_call(member, call.id)
    with pytest.raises(Conflict):
        approval_service.confirm_tool_call(member, call.id)
    with pytest.raises(Conflict):
        approval_service.reject_tool_call(member, call.id)
    assert records_titled("Once") == 1


def test_only_the_conversations_owner_decides(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "Mine"}})])
    proposed = send(member, "Add")
    (call,) = calls_of(proposed.conversation_id)
    for other in (world.a.principal("owner"), world.b.principal("owner")):
        with pytest.raises(NotFound):
            approval_service.confirm_tool_call(other, call.id)
    assert records_titled("Mine") == 0


def test_a_new_message_rejects_the_pending_write(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "Skip"}})])
    proposed = send(member, "Add")
    scripted.script.add([Say("OK, not adding it.")])
    result = send(member, "Never mind", conversation_id=proposed.conversation_id)
    assert result.status == "done"
    (call,) = calls_of(proposed.conversation_id)
    assert call.status == "REJECTED" and call.decided_by_id == member.user_id
    last_user = scripted.requests[-1].messages[-1].content
    assert isinstance(last_user[0], ToolResultBlock) and last_user[0].is_error
    assert last_user[-1] == TextBlock("Never mind")
    assert records_titled("Skip") == 0


def test_a_provider_error_keeps_the_partial_reply_and_the_conversation_usable(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Say("Here is the first half"), Fail("Overloaded")])
    result = send(member, "Tell me")
    assert result.status == "error" and "Overloaded" in result.error
    message = db.session.scalar(
        select(Message).where(
            Message.conversation_id == result.conversation_id, Message.role == "assistant"
        )
    )
    assert message.status == "incomplete" and message.text == "Here is the first half"
    assert not store.pending_calls(result.conversation_id)
    scripted.script.add([Say("Second try works.")])
    again = send(member, "Retry", conversation_id=result.conversation_id)
    assert again.status == "done"
    roles = [m.role for m in scripted.requests[-1].messages]
    assert roles == ["user", "assistant", "user"]


def test_page_context_goes_into_the_user_message_and_the_system_prompt_stays_fixed(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Call("me_get")], [Say("Hi.")])
    first = send(member, "Where am I?", route="/models/tasks/records/7", model="tasks", record_id=7)
    scripted.script.add([Say("Still here.")])
    send(member, "And now?", conversation_id=first.conversation_id, route="/models")
    systems = {r.system for r in scripted.requests}
    assert len(systems) == 1
    assert "/models/tasks/records/7" not in scripted.requests[0].system
    user = scripted.requests[0].messages[0].content
    assert "record 7" in user[0].text and "tasks" in user[0].text and user[1].text == "Where am I?"
    tools = {tuple(t.name for t in r.tools) for r in scripted.requests}
    assert len(tools) == 1


@pytest.mark.parametrize(
    "gate",
    ["permission", "chat_off", "ai_off_deployment", "ai_off_org", "ai_off_user"],
)
def test_each_gate_refuses_with_a_clear_reason(world, scripted, app, gate, monkeypatch):
    principal = world.a.principal("member")
    if gate == "permission":
        from dataclasses import replace

        principal = replace(principal, permissions=principal.permissions - {"chat.use"})
    elif gate == "chat_off":
        world.a.org.chat_enabled = False
    elif gate == "ai_off_deployment":
        configure(monkeypatch, app, CHAT_AI_AGENT_ENABLED=False)
    elif gate == "ai_off_org":
        world.a.org.ai_agent_enabled = False
    elif gate == "ai_off_user":
        world.a.users["member"].ai_agent_enabled = False
    db.session.commit()
    with pytest.raises(Forbidden) as err:
        send_message(principal, SendInput(text="Hi"))
    assert err.value.message
    assert scripted.requests == []


def test_chat_events_carry_ids_never_content(world, scripted):
    member = world.a.principal("member")
    secret = "The launch code is 0000"
    scripted.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": secret}})], [Say(secret)]
    )
    proposed = send(member, secret)
    approval_service.confirm_tool_call(member, calls_of(proposed.conversation_id)[0].id)
    events = db.session.scalars(select(Event).where(Event.type.like("chat.%"))).all()
    kinds = {e.type for e in events}
    assert {
        "chat.conversation.created",
        "chat.message.created",
        "chat.tool_call.proposed",
        "chat.tool_call.confirmed",
        "chat.tool_call.succeeded",
    } <= kinds
    for event in events:
        assert secret not in str(event.payload)
        assert "Buy" not in str(event.payload)


class ExplodingTool:
    """An in-app tool that writes, then raises: its write must not survive."""

    from monark.chat.executor import ToolSpec

    spec = ToolSpec(
        name="explode",
        description="Writes a record, then fails.",
        input_schema={"type": "object", "properties": {}},
        mutates=True,
    )

    def __init__(self, model_id: int):
        self.model_id = model_id

    def preview(self, principal, arguments):
        return {"headline": "explode"}

    def precheck(self, principal, arguments):
        return None

    def run(self, principal, arguments):
        from monark.records.models import RecordModel
        from monark.records.services import create_record

        model = db.session.get(RecordModel, self.model_id)
        create_record(principal, model, {"title": "Half-done"})
        raise RuntimeError("the disk is on fire")


def test_a_tool_that_raises_fails_and_its_writes_are_rolled_back(world, scripted, caplog):
    from monark.api.routes import V1_ROUTES
    from monark.assistant.tools import build_chat_toolset
    from monark.chat.runtime import runtime

    state = runtime()
    original = state.executor
    state.executor = build_chat_toolset(V1_ROUTES, [ExplodingTool(world.a.model.id)])
    try:
        member = world.a.principal("member")
        scripted.script.add([Call("explode")], [Say("That failed.")])
        proposed = send(member, "Do the risky thing")
        (call,) = calls_of(proposed.conversation_id)
        result = approval_service.confirm_tool_call(member, call.id)
    finally:
        state.executor = original
    assert result.status == "done"
    db.session.refresh(call)
    # The model and the user learn that it failed; the exception's text stays in the log.
    assert call.status == "FAILED" and "RuntimeError" in call.error
    assert "the disk is on fire" not in call.error
    assert "the disk is on fire" in caplog.text
    assert records_titled("Half-done") == 0
    (res,) = scripted.requests[1].messages[-1].content
    assert res.is_error and "failed unexpectedly (RuntimeError)" in res.content


def test_a_read_left_executing_by_a_dead_worker_fails_and_frees_the_conversation(world, scripted):
    from datetime import timedelta

    from monark.core.models import utcnow

    viewer = world.a.principal("viewer")
    scripted.script.add([Call("records_list", {"model": "tasks"})], [Say("One task.")])
    first = send(viewer, "What are my tasks?")
    (call,) = calls_of(first.conversation_id)
    # As if the process died mid-read: EXECUTING, never decided, ten minutes ago.
    call.status, call.decided_at = "EXECUTING", None
    call.created_at = utcnow() - timedelta(minutes=10)
    db.session.commit()
    scripted.script.add([Say("Still here.")])
    again = send(viewer, "Hello?", conversation_id=first.conversation_id)
    assert again.status == "done"
    db.session.refresh(call)
    assert call.status == "FAILED" and "Interrupted" in call.error


def test_a_card_of_a_deleted_conversation_cannot_be_confirmed(world, scripted):
    member = world.a.principal("member")
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "Late"}})])
    proposed = send(member, "Add a task: late")
    (call,) = calls_of(proposed.conversation_id)
    conversation_list.archive_conversation(member, proposed.conversation_id)
    with pytest.raises(NotFound):
        approval_service.confirm_tool_call(member, call.id)
    assert records_titled("Late") == 0


def test_an_update_card_previews_each_field_before_and_after(world, scripted):
    member = world.a.principal("member")
    scripted.script.add(
        [
            Call(
                "records_update",
                {
                    "model": "tasks",
                    "record_id": world.a.public.id,
                    "values": {"status": "done", "title": "Acme public task"},
                },
            )
        ]
    )
    proposed = send(member, "Mark it done")
    (call,) = calls_of(proposed.conversation_id)
    assert call.preview["headline"] == "update “Acme public task” in Tasks"
    assert call.preview["changes"] == [
        {"field": "Status", "before": "todo", "after": "done"},
        {"field": "Title", "after": "Acme public task", "unchanged": True},
    ]
    # The preview is what was shown at proposal, even after the record changes.
    approval_service.confirm_tool_call(member, call.id)
    db.session.refresh(call)
    assert call.preview["changes"][0]["before"] == "todo"


def test_a_write_the_role_may_not_do_is_still_asked_but_the_card_warns(world, scripted):
    viewer = world.a.principal("viewer")
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "No"}})])
    proposed = send(viewer, "Add")
    (call,) = calls_of(proposed.conversation_id)
    assert call.status == "PROPOSED"
    assert "lacks records.create" in call.preview["warning"]
    member = world.a.principal("member")
    scripted.script.add([Call("records_create", {"model": "tasks", "values": {"title": "Yes"}})])
    allowed = send(member, "Add")
    assert "warning" not in calls_of(allowed.conversation_id)[0].preview
