"""Every provider adapter through its real SDK against a loopback fake of its own wire
format, chosen per org in the org's AI settings: the same scripted conversations, the
same stored calls and statuses, whichever provider answers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from monark.approvals import service as approval_service
from monark.chat.llm.providers import get_provider
from monark.chat.models import Message, ToolCall
from monark.chat.runtime import set_llm_provider
from monark.chat.turn.start import SendInput, send_message
from monark.core.crypto import encrypt
from monark.core.models import Event
from monark.extensions import db
from monark.settings import ai_provider
from monark.settings.models import OrgAiSettings
from tests.fake_anthropic import FakeAnthropic
from tests.fake_gemini import FakeGemini
from tests.fake_openai import FakeOpenAI
from tests.llm_script import Call, Fail, Say
from tests.tuning import configure, reconfigure

KEY = "sk-recognizable-KEY-1234567890"
FAKES = {
    "anthropic": (FakeAnthropic, lambda fake: fake.url),
    "openai": (FakeOpenAI, lambda fake: fake.url + "/v1"),
    "gemini": (FakeGemini, lambda fake: fake.url),
}


def use_provider(app, org_id: int, provider: str, base_url: str, key: str = KEY) -> None:
    """Give an org its own provider settings (as an admin would on the settings page)."""
    row = ai_provider.org_settings(org_id) or OrgAiSettings(org_id=org_id)
    row.provider, row.model, row.base_url = provider, f"{provider}-test-model", base_url
    row.api_key_encrypted = encrypt(key)
    db.session.add(row)
    db.session.commit()


@pytest.fixture(params=list(FAKES))
def provider(request, app, world) -> Iterator[tuple[str, object]]:
    """Acme's assistant on one provider's fake (the org's settings, not the deployment's)."""
    name = request.param
    cls, base = FAKES[name]
    fake = cls().start()
    reconfigure(app, CHAT_LLM_ALLOW_PRIVATE=True)  # the fakes are on loopback
    reconfigure(app, CHAT_LLM_MAX_RETRIES=0)
    set_llm_provider(None)  # every org's own provider, as configured
    use_provider(app, world.a.org.id, name, base(fake))
    yield name, fake
    set_llm_provider(None)
    reconfigure(app, CHAT_LLM_ALLOW_PRIVATE=False)
    reconfigure(app, CHAT_LLM_MAX_RETRIES=2)
    fake.stop()


def _replies(conversation_id: int) -> list[Message]:
    db.session.rollback()
    return list(
        db.session.scalars(
            select(Message)
            .where(Message.conversation_id == conversation_id, Message.role == "assistant")
            .order_by(Message.seq)
        )
    )


def _calls(conversation_id: int) -> list[ToolCall]:
    db.session.rollback()
    stmt = select(ToolCall).where(ToolCall.conversation_id == conversation_id)
    return list(db.session.scalars(stmt.order_by(ToolCall.id)))


def test_a_text_reply_streams_and_is_stored_with_its_provider_and_usage(world, provider):
    name, fake = provider
    fake.script.add([Say("Hello from the other side", chunks=5)])
    result = send_message(world.a.principal("member"), SendInput(text="Hi"))
    assert result.status == "done"
    (reply,) = _replies(result.conversation_id)
    assert reply.text == "Hello from the other side"
    assert (reply.provider, reply.model) == (name, f"{name}-test-model")
    assert reply.input_tokens > 0 and reply.cache_read_tokens > 0  # the cached share, apart
    # The audit log says which provider and model wrote it.
    event = db.session.scalars(
        select(Event).where(Event.type == "chat.message.created", Event.subject_id == reply.id)
    ).one()
    assert (event.payload["provider"], event.payload["model"]) == (name, f"{name}-test-model")


def test_a_read_runs_then_the_model_answers_with_its_result(world, provider):
    _name, fake = provider
    fake.script.add([Call("me_get", {})], [Say("You are Acme Member.")])
    result = send_message(world.a.principal("member"), SendInput(text="Who am I?"))
    assert result.status == "done"
    (call,) = _calls(result.conversation_id)
    assert (call.name, call.status) == ("me_get", "SUCCEEDED")
    assert _replies(result.conversation_id)[-1].text == "You are Acme Member."
    # The model got the result back in its own format.
    assert "Acme Member" in str(fake.requests[-1])


def test_a_write_stops_at_a_card_and_parallel_calls_are_kept_in_order(world, provider):
    _name, fake = provider
    values = {"title": "Split " + "x" * 60, "status": "todo"}
    fake.script.add(
        [
            Call("models_list", {}),
            Call("records_create", {"model": "tasks", "values": values}),
        ]
    )
    result = send_message(world.a.principal("member"), SendInput(text="Add it"))
    assert result.status == "awaiting_confirmation"
    listed, create = _calls(result.conversation_id)
    assert (listed.name, listed.status) == ("models_list", "SUCCEEDED")
    assert (create.name, create.status) == ("records_create", "PROPOSED")
    assert create.input == {"model": "tasks", "values": values}  # assembled from its pieces


def test_an_error_mid_stream_keeps_the_text_and_names_the_error(world, provider):
    _name, fake = provider
    fake.script.add([Say("Half of"), Fail("Overloaded now", "overloaded_error")])
    result = send_message(world.a.principal("member"), SendInput(text="Go"))
    assert result.status == "error" and "Overloaded now" in result.error
    (reply,) = _replies(result.conversation_id)
    assert (reply.status, reply.text) == ("incomplete", "Half of")


# (Anthropic's stream cannot carry a call without a name: its fake cannot send one.)
@pytest.mark.parametrize("provider", ["openai", "gemini"], indirect=True)
def test_an_incomplete_tool_call_is_an_error_never_a_blank_dispatch(world, provider):
    _name, fake = provider
    fake.script.add([Call("", {"model": "tasks"})])
    result = send_message(world.a.principal("member"), SendInput(text="Go"))
    assert result.status == "error" and "incomplete tool call" in result.error
    assert _calls(result.conversation_id) == []


def _summary(conversation_id: int) -> list[tuple]:
    """What a conversation stored, without ids or anything a provider names its own way."""
    db.session.rollback()
    rows = db.session.scalars(
        select(Message).where(Message.conversation_id == conversation_id).order_by(Message.seq)
    )
    return [
        (m.role, m.status, m.text, [(c.name, c.status, c.input) for c in m.tool_calls])
        for m in rows
    ]


def _script(fake) -> None:
    fake.script.add(
        [Say("Let me look."), Call("models_list", {})],
        [Call("records_create", {"model": "tasks", "values": {"title": "Same", "status": "todo"}})],
        [Say("Created it.")],
    )


def test_one_scripted_conversation_stores_the_same_through_every_provider(app, world):
    summaries = {}
    for name, (cls, base) in FAKES.items():
        fake = cls().start()
        try:
            reconfigure(app, CHAT_LLM_ALLOW_PRIVATE=True)
            set_llm_provider(None)
            use_provider(app, world.a.org.id, name, base(fake))
            _script(fake)
            member = world.a.principal("member")
            proposed = send_message(member, SendInput(text=f"Add one via {name}"))
            call = next(c for c in _calls(proposed.conversation_id) if c.status == "PROPOSED")
            done = approval_service.confirm_tool_call(member, call.id)
            assert done.status == "done", (name, done.error)
            summaries[name] = _summary(proposed.conversation_id)[1:]  # after the user's text
        finally:
            reconfigure(app, CHAT_LLM_ALLOW_PRIVATE=False)
            set_llm_provider(None)
            fake.stop()
    assert summaries["anthropic"] == summaries["openai"] == summaries["gemini"]
    assert [s[:2] for s in summaries["openai"]] == [
        ("assistant", "complete"),
        ("assistant", "complete"),
        ("assistant", "complete"),
    ]


@pytest.mark.parametrize("provider", ["openai", "gemini"], indirect=True)
def test_the_request_prefix_stays_the_same_from_step_to_step(world, provider):
    name, fake = provider
    fake.script.add([Call("me_get", {})], [Call("models_list", {})], [Say("Done.")])
    send_message(world.a.principal("member"), SendInput(text="Look twice"))
    first, second, third = fake.requests[-3:]
    history = "messages" if name == "openai" else "contents"
    for earlier, later in ((first, second), (second, third)):
        # Same system text and tools, serialized alike; the history only grows at its end.
        assert {k: v for k, v in earlier.items() if k != history} == {
            k: v for k, v in later.items() if k != history
        }
        assert later[history][: len(earlier[history])] == earlier[history]


# Which parameter carries the reply's token limit: OpenAI's own API takes
# max_completion_tokens, the OpenAI-compatible vendors max_tokens, Anthropic max_tokens,
# Gemini maxOutputTokens (in generationConfig).
LIMITS = {"max_tokens", "max_completion_tokens", "maxOutputTokens", "max_output_tokens"}


@pytest.mark.parametrize(
    ("provider_id", "sent"),
    [
        ("anthropic", "max_tokens"),
        ("openai", "max_completion_tokens"),
        ("groq", "max_tokens"),
        ("ollama", "max_tokens"),
        ("gemini", "maxOutputTokens"),
    ],
)
def test_each_provider_is_sent_its_own_token_limit_parameter(
    app, world, monkeypatch, provider_id, sent
):
    adapter = get_provider(provider_id).adapter
    cls, base = FAKES[adapter]
    fake = cls().start()
    configure(monkeypatch, app, CHAT_LLM_ALLOW_PRIVATE=True)  # the fake is on loopback
    configure(monkeypatch, app, CHAT_LLM_MAX_TOKENS=1234)
    set_llm_provider(None)
    try:
        use_provider(app, world.a.org.id, provider_id, base(fake))
        fake.script.add([Say("Hi.")])
        send_message(world.a.principal("member"), SendInput(text="Hi"))
        body = fake.requests[-1]
        limits = body.get("generationConfig", {}) if adapter == "gemini" else body
        assert {k: limits[k] for k in LIMITS & set(limits)} == {sent: 1234}
    finally:
        set_llm_provider(None)
        fake.stop()
