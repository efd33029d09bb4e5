"""AnthropicProvider through the real SDK against a fake Messages API on loopback."""

from __future__ import annotations

import json

from sqlalchemy import select

from monark.approvals import service as approval_service
from monark.chat.llm.anthropic import AnthropicProvider
from monark.chat.llm.types import LlmMessage, LlmRequest, ProviderError, TextBlock
from monark.chat.models import Message, ToolCall
from monark.chat.runtime import llm_provider, set_llm_provider
from monark.chat.turn.start import SendInput, send_message
from monark.extensions import db
from tests.llm_script import Call, Fail, HttpFail, Say
from tests.tuning import configure


def breakpoints(body: dict) -> list[str]:
    """Where cache_control marks sit in a request body, as readable paths."""
    found = []
    for i, block in enumerate(body["system"]):
        if "cache_control" in block:
            found.append(f"system[{i}]")
    for i, tool in enumerate(body.get("tools", [])):
        if "cache_control" in tool:
            found.append(f"tools[{i}]")
    for m, message in enumerate(body["messages"]):
        for b, block in enumerate(message["content"]):
            if "cache_control" in block:
                found.append(f"messages[{m}].content[{b}]")
    return found


def assert_three_breakpoints(body: dict) -> None:
    """Exactly three cache breakpoints: the system prompt, the last tool, the last block."""
    last = len(body["messages"]) - 1
    end = len(body["messages"][last]["content"]) - 1
    assert breakpoints(body) == [
        "system[0]",
        f"tools[{len(body['tools']) - 1}]",
        f"messages[{last}].content[{end}]",
    ]
    assert json.dumps(body).count("cache_control") == 3


def run_read_then_write_turn(world, fake):
    member = world.a.principal("member")
    fake.script.add(
        [Say("Let me look."), Call("records_list", {"model": "tasks", "limit": 5})],
        [Call("records_create", {"model": "tasks", "values": {"title": "From the fake"}})],
        [Say("Created it.")],
    )
    data = SendInput(
        text="Add a task like the others",
        page_context={"route": "/models/tasks/records/3", "model": "tasks", "record_id": 3},
    )
    proposed = send_message(member, data)
    assert proposed.status == "awaiting_confirmation"
    call = db.session.scalars(
        select(ToolCall).where(
            ToolCall.conversation_id == proposed.conversation_id, ToolCall.mutates
        )
    ).one()
    done = approval_service.confirm_tool_call(member, call.id)
    assert done.status == "done"
    return proposed.conversation_id


def test_every_request_carries_exactly_three_breakpoints_in_place(world, fake_anthropic):
    run_read_then_write_turn(world, fake_anthropic)
    assert len(fake_anthropic.requests) == 3
    for body in fake_anthropic.requests:
        assert_three_breakpoints(body)


def test_system_prompt_and_tools_are_byte_identical_across_steps(world, fake_anthropic):
    run_read_then_write_turn(world, fake_anthropic)
    systems = {json.dumps(b["system"], sort_keys=False) for b in fake_anthropic.requests}
    tools = {json.dumps(b["tools"], sort_keys=False) for b in fake_anthropic.requests}
    assert len(systems) == 1 and len(tools) == 1
    names = [t["name"] for t in fake_anthropic.requests[0]["tools"]]
    assert names == sorted(names) and "records_create" in names


def test_page_context_appears_only_in_the_user_message(world, fake_anthropic):
    run_read_then_write_turn(world, fake_anthropic)
    for body in fake_anthropic.requests:
        assert "/models/tasks/records/3" not in json.dumps(body["system"])
        first = body["messages"][0]
        assert first["role"] == "user"
        assert "/models/tasks/records/3" in first["content"][0]["text"]
        assert first["content"][1]["text"] == "Add a task like the others"


def test_tool_use_and_tool_result_pair_exactly(world, fake_anthropic):
    run_read_then_write_turn(world, fake_anthropic)
    messages = fake_anthropic.requests[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    for i, message in enumerate(messages):
        uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        if not uses:
            continue
        following = messages[i + 1]["content"]
        results = [b["tool_use_id"] for b in following if b["type"] == "tool_result"]
        assert results == uses
        assert all(b["type"] == "tool_result" for b in following)
    create_result = messages[4]["content"][0]
    assert "From the fake" in create_result["content"] and not create_result.get("is_error")


def test_usage_with_cache_figures_is_stored(world, fake_anthropic):
    conversation_id = run_read_then_write_turn(world, fake_anthropic)
    # In the order they were written (PostgreSQL returns updated rows in any order).
    replies = db.session.scalars(
        select(Message)
        .where(Message.conversation_id == conversation_id, Message.role == "assistant")
        .order_by(Message.id)
    ).all()
    assert len(replies) == 3
    for reply in replies:
        assert reply.input_tokens == 120
        assert reply.cache_read_tokens == 90 and reply.cache_creation_tokens == 30
        assert reply.output_tokens > 0
        assert reply.status == "complete"
    assert replies[0].stop_reason == "tool_use" and replies[-1].stop_reason == "end_turn"


def test_the_api_key_is_sent(world, fake_anthropic):
    fake_anthropic.script.add([Say("Hi")])
    send_message(world.a.principal("member"), SendInput(text="Hello"))
    headers = fake_anthropic.headers[0]
    sent = headers.get("x-api-key", "") + headers.get("authorization", "")
    assert "sk-test-not-real" in sent


def test_a_mid_stream_error_keeps_the_partial_message(world, fake_anthropic):
    member = world.a.principal("member")
    fake_anthropic.script.add([Say("Half an answer"), Fail("Overloaded", "overloaded_error")])
    result = send_message(member, SendInput(text="Tell me"))
    assert result.status == "error" and "Overloaded" in result.error
    message = db.session.scalar(
        select(Message).where(
            Message.conversation_id == result.conversation_id, Message.role == "assistant"
        )
    )
    assert message.status == "incomplete" and message.text == "Half an answer"
    assert "Overloaded" in message.error
    fake_anthropic.script.add([Say("Now it works.")])
    again = send_message(member, SendInput(text="Again", conversation_id=result.conversation_id))
    assert again.status == "done"
    roles = [m["role"] for m in fake_anthropic.requests[-1]["messages"]]
    assert roles == ["user", "assistant", "user"]


def test_a_rejected_request_is_an_error_with_the_apis_message(world, fake_anthropic):
    fake_anthropic.script.add([HttpFail(400, "max_tokens is too large")])
    result = send_message(world.a.principal("member"), SendInput(text="Hi"))
    assert result.status == "error" and "max_tokens is too large" in result.error
    message = db.session.scalar(
        select(Message).where(
            Message.conversation_id == result.conversation_id, Message.role == "assistant"
        )
    )
    assert message.status == "error" and message.text == ""


def test_without_a_key_the_app_starts_and_the_assistant_explains(app, world, monkeypatch):
    set_llm_provider(None)
    try:
        configure(monkeypatch, app, ANTHROPIC_API_KEY="", CHAT_LLM_PROVIDER="anthropic")
        provider = llm_provider()
        request = LlmRequest(
            model="m",
            system="s",
            messages=[LlmMessage("user", (TextBlock("hi"),))],
            tools=[],
            max_tokens=10,
        )
        (event,) = list(provider.stream(request))
        assert isinstance(event, ProviderError) and "ANTHROPIC_API_KEY" in event.message
        assert isinstance(provider, AnthropicProvider) and provider._client is None
    finally:
        set_llm_provider(None)
