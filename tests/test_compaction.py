"""Conversations of any length: old tool results become stubs, old turns a
stored summary, and a request the provider refuses as too long is compacted once and sent
again; through the real SDK against the fake Messages API holding a small context window."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select

from monark import create_app
from monark.chat import store
from monark.chat.compaction import (
    SUMMARIZE,
    Context,
    ContextPolicy,
    compaction_point,
    stub_boundary,
    tokens_of,
)
from monark.chat.models import Message, MessageRole, MessageStatus, ToolCall, ToolCallStatus
from monark.chat.store import TranscriptCall, TranscriptMessage
from monark.chat.transcript import SUMMARY_OPENING, build_llm_messages
from monark.chat.turn.start import SendInput, send_message
from monark.core.settings import chat_settings
from monark.extensions import db
from tests.fake_anthropic import FakeAnthropic
from tests.llm_script import Call, HttpFail, Say
from tests.test_anthropic_provider import assert_three_breakpoints
from tests.tuning import reconfigure

LIMIT = 12_000  # tokens the fake's model holds (a quarter of a request's JSON)
SUMMARY = "The user went through their open tasks, turn by turn; **nothing is left open**."


def send(principal, text: str, conversation_id: int | None = None):
    return send_message(principal, SendInput(text=text, conversation_id=conversation_id))


def asks_for_summary(body: dict) -> bool:
    last = body["messages"][-1]["content"]
    return any(b.get("type") == "text" and b["text"] == SUMMARIZE for b in last)


def summarizing(body: dict) -> list | None:
    """The fake's answer to a summary request (other requests play the script)."""
    return [Say(SUMMARY)] if asks_for_summary(body) else None


@pytest.fixture
def small_model(app, fake_anthropic):
    """The fake's model holds ``LIMIT`` tokens and the deployment says so; it writes
    ``SUMMARY`` whenever asked for one."""
    fake_anthropic.context_limit = LIMIT
    fake_anthropic.answer = summarizing
    reconfigure(app, CHAT_CONTEXT_WINDOW=LIMIT)
    yield fake_anthropic
    reconfigure(app, CHAT_CONTEXT_WINDOW=0)


def big_result(turn: int, chars: int) -> dict:
    """A records_list result the model reads as about ``chars`` characters."""
    items = [
        {
            "id": turn * 1000 + i,
            "title": f"Task {turn}-{i} " + "x" * 60,
            "values": {},
            "updated_at": "2026-01-01T00:00:00Z",
        }
        for i in range(max(1, chars // 100))
    ]
    return {"items": items, "next_cursor": None}


def make_history(principal, turns: int, result_chars: int = 3000, pad: int = 0):
    """A conversation of ``turns`` finished turns, stored directly: a question, a reply
    with a read and its result, an answer (three messages each)."""
    conversation = store.create_conversation(principal, "A long one")
    ids = {"org_id": principal.org_id, "conversation_id": conversation.id}
    seq = 0

    def message(role: MessageRole, text: str, **fields) -> Message:
        nonlocal seq
        seq += 1
        kind = "user" if role == MessageRole.USER else "agent"
        return Message(**ids, seq=seq, author_kind=kind, role=role, text=text, **fields)

    rows = []
    for turn in range(turns):
        rows.append(
            message(
                MessageRole.USER,
                f"Question {turn}: which tasks are open? " + "y" * pad,
                author_user_id=principal.user_id,
            )
        )
        call = ToolCall(
            **ids,
            position=0,
            provider_call_id=f"toolu_h{turn:04d}",
            name="records_list",
            input={"model": "tasks"},
            mutates=False,
            status=ToolCallStatus.SUCCEEDED,
            result=big_result(turn, result_chars),
        )
        rows.append(message(MessageRole.ASSISTANT, f"Looking ({turn}).", tool_calls=[call]))
        rows.append(message(MessageRole.ASSISTANT, f"Answer {turn}: {turn} open. " + "z" * pad))
    db.session.add_all(rows)
    db.session.commit()
    return conversation


def messages_of(conversation_id: int, role: MessageRole | None = None) -> list[Message]:
    db.session.rollback()
    stmt = select(Message).where(Message.conversation_id == conversation_id)
    if role is not None:
        stmt = stmt.where(Message.role == role)
    return list(db.session.scalars(stmt.order_by(Message.seq)))


def stored_results(conversation_id: int) -> dict[str, object]:
    db.session.rollback()
    calls = db.session.scalars(select(ToolCall).where(ToolCall.conversation_id == conversation_id))
    return {c.provider_call_id: c.result for c in calls}


def first_text(body: dict) -> str:
    return body["messages"][0]["content"][0]["text"]


# ---- against the fake's small window ---------------------------------------------------------


def test_a_300_message_conversation_keeps_answering_under_a_small_window(world, small_model):
    member = world.a.principal("member")
    conversation = make_history(member, turns=100)
    assert len(messages_of(conversation.id)) == 300
    before = stored_results(conversation.id)
    for n in range(3):
        small_model.script.add([Call("records_list", {"model": "tasks"})], [Say(f"Reply {n}")])
        result = send(member, f"New question {n}", conversation.id)
        assert result.status == "done", result.error
        assert messages_of(conversation.id)[-1].text == f"Reply {n}"
    assert small_model.refused == []  # every request fitted before it was sent
    assert max(FakeAnthropic.tokens_of(b) for b in small_model.requests) <= LIMIT
    answers = [b for b in small_model.requests if not asks_for_summary(b)]
    assert len(answers) == 6
    for body in answers:  # the summary first, instead of the turns it covers
        assert first_text(body) == SUMMARY_OPENING + SUMMARY
        assert "Question 0:" not in json.dumps(body["messages"])
    assert any("omitted to save space" in json.dumps(b["messages"]) for b in answers)
    # The stored rows keep everything: every message, every result whole.
    assert len(messages_of(conversation.id, MessageRole.SUMMARY)) >= 1
    assert {k: v for k, v in stored_results(conversation.id).items() if k in before} == before
    assert len(messages_of(conversation.id, MessageRole.USER)) == 103


def test_old_results_become_one_line_stubs_and_the_newest_stay_whole(world, small_model):
    member = world.a.principal("member")
    conversation = make_history(member, turns=6, result_chars=3000)
    small_model.script.add([Say("Fine.")])
    assert send(member, "Anything else?", conversation.id).status == "done"
    (body,) = small_model.requests
    results = [b for m in body["messages"] for b in m["content"] if b.get("type") == "tool_result"]
    assert [r["tool_use_id"] for r in results] == [f"toolu_h{t:04d}" for t in range(6)]
    stubbed = [r for r in results if "omitted to save space" in r["content"]]
    assert stubbed and results[-1] not in stubbed  # the oldest, never the newest
    assert stubbed[0]["content"] == (
        "[result of records_list #toolu_h0000 omitted to save space; "
        "call the tool again if you need it]"
    )
    assert messages_of(conversation.id, MessageRole.SUMMARY) == []  # stubs were enough
    db.session.rollback()
    assert store.get_conversation(member, conversation.id).context_stub_before is not None
    assert stored_results(conversation.id)["toolu_h0000"] == big_result(0, 3000)


def test_the_summary_is_stored_shown_and_used_after_a_restart(app, world, small_model):
    member = world.a.principal("member")
    conversation = make_history(member, turns=40)
    assert send(member, "Where were we?", conversation.id).status == "done"
    summary = messages_of(conversation.id, MessageRole.SUMMARY)[-1]
    covered = summary.content[0]["through"]
    assert summary.text == SUMMARY and summary.status == MessageStatus.COMPLETE
    assert summary.input_tokens > 0  # the summary request's own usage
    count = len(messages_of(conversation.id, MessageRole.SUMMARY))
    conversation_id = conversation.id
    db.session.remove()

    # A restart: a new app on the same database, its provider built anew from the config.
    restarted = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": "test",
            "ANTHROPIC_API_KEY": "sk-test-not-real",
            "CHAT_CONTEXT_WINDOW": LIMIT,
        }
    )
    with restarted.app_context():
        try:
            result = send(member, "And now?", conversation_id)
        finally:
            db.session.remove()
            db.engine.dispose()
    assert result.status == "done", result.error
    body = small_model.requests[-1]
    assert first_text(body) == SUMMARY_OPENING + SUMMARY
    assert len(messages_of(conversation_id, MessageRole.SUMMARY)) == count  # not written again
    shown = json.dumps(body["messages"])
    for row in messages_of(conversation_id, MessageRole.USER):
        assert (f"{row.text}" in shown) == (row.id > covered)


def test_a_prompt_too_long_is_compacted_once_and_sent_again(world, fake_anthropic):
    # The deployment thinks the model holds 200k tokens; it holds LIMIT.
    fake_anthropic.context_limit = LIMIT
    fake_anthropic.answer = summarizing
    member = world.a.principal("member")
    conversation = make_history(member, turns=30, result_chars=1200)
    fake_anthropic.script.add([Say("Here is where we are.")])
    result = send(member, "Sum it up", conversation.id)
    assert result.status == "done", result.error
    assert len(fake_anthropic.refused) == 1
    summary_request, retried = fake_anthropic.requests
    assert asks_for_summary(summary_request) and not asks_for_summary(retried)
    assert first_text(retried) == SUMMARY_OPENING + SUMMARY
    assert retried["messages"][0]["content"][-1]["text"] == "Sum it up"
    assert len(messages_of(conversation.id, MessageRole.SUMMARY)) == 1
    # One reply, the one the refused request opened: it came on the second try.
    reply = messages_of(conversation.id)[-2]
    assert (reply.role, reply.status, reply.text) == (
        "assistant",
        "complete",
        "Here is where we are.",
    )
    assert messages_of(conversation.id)[-1].role == MessageRole.SUMMARY


def test_a_turn_still_too_long_after_compaction_fails_as_before(world, fake_anthropic):
    fake_anthropic.context_limit = 6_000
    fake_anthropic.answer = summarizing
    member = world.a.principal("member")
    conversation = make_history(member, turns=3, result_chars=500)
    result = send(member, "w" * 16_000, conversation.id)
    assert result.status == "error" and "prompt is too long" in result.error
    assert len(fake_anthropic.refused) == 2  # the request, and one retry after compaction
    assert len(messages_of(conversation.id, MessageRole.SUMMARY)) == 1
    reply = messages_of(conversation.id, MessageRole.ASSISTANT)[-1]
    assert reply.status == MessageStatus.ERROR and "prompt is too long" in reply.error


def test_three_breakpoints_and_an_identical_prefix_in_every_request(app, world, fake_anthropic):
    fake_anthropic.context_limit = LIMIT
    fake_anthropic.answer = summarizing
    member = world.a.principal("member")
    long = make_history(member, turns=30, result_chars=1200)  # refused, then compacted
    fake_anthropic.script.add([Say("Caught up.")])
    assert send(member, "Sum it up", long.id).status == "done"
    reconfigure(app, CHAT_CONTEXT_WINDOW=LIMIT)  # from here on, fitted in advance
    try:
        other = make_history(member, turns=60)
        for n in range(2):
            fake_anthropic.script.add([Call("records_list", {"model": "tasks"})], [Say("Ok")])
            assert send(member, f"Next {n}", other.id).status == "done"
    finally:
        reconfigure(app, CHAT_CONTEXT_WINDOW=0)
    bodies = fake_anthropic.refused + fake_anthropic.requests
    assert fake_anthropic.refused and any(asks_for_summary(b) for b in bodies)
    assert any("omitted to save space" in json.dumps(b["messages"]) for b in bodies)
    for body in bodies:
        assert_three_breakpoints(body)
    assert len({json.dumps(b["system"]) for b in bodies}) == 1
    assert len({json.dumps(b["tools"]) for b in bodies}) == 1


def test_the_thread_shows_the_summary_collapsed_below_the_messages(world, login, small_model):
    small_model.answer = lambda body: (
        [Say("Open: **3 tasks** <script>alert(1)</script>")] if asks_for_summary(body) else None
    )
    member = world.a.principal("member")
    conversation = make_history(member, turns=40)
    assert send(member, "Where were we?", conversation.id).status == "done"
    browser = login(world.a.users["member"].email)
    html = browser.get(f"/chat/conversations/{conversation.id}").get_data(as_text=True)
    soup = BeautifulSoup(html, "html.parser")
    (item,) = soup.select(".msg-summary details")
    assert item.summary.get_text(strip=True) == "Earlier conversation summarized"
    assert not item.has_attr("open")
    assert item.select_one(".md strong").get_text() == "3 tasks"
    assert item.find("script") is None
    thread = soup.select_one("#chat-thread").get_text()
    assert thread.index("Question 0:") < thread.index("Earlier conversation summarized")
    assert "Where were we?" in thread


def test_a_summary_written_during_a_streamed_turn_joins_the_thread_not_the_reply(
    world, login, small_model
):
    from tests.test_chat_stream import frames, post_stream

    member = world.a.principal("member")
    conversation = make_history(member, turns=40)
    small_model.script.add([Say("Caught up.")])
    browser = login(world.a.users["member"].email)
    got = frames(post_stream(browser, "Where were we?", conversation_id=str(conversation.id)))
    assert got[-1][0] == "done" and json.loads(got[-1][1])["status"] == "done"
    added = [d for e, d in got if e is None and 'hx-target="#chat-thread"' in d]
    assert any("Earlier conversation summarized" in d for d in added)
    streamed = "".join(
        BeautifulSoup(d, "html.parser").get_text()
        for e, d in got
        if e is None and '-text" hx-swap="beforeend"' in d
    )
    assert streamed == "Caught up."  # the summary never streams as a reply


@pytest.mark.parametrize(
    ("provider", "said"),
    [
        ("openai", "This model's maximum context length is 128000 tokens. However, you sent more."),
        ("gemini", "The input token count (1200000) exceeds the maximum number of tokens allowed."),
    ],
)
def test_other_providers_too_long_errors_compact_and_retry(app, world, provider, said):
    from monark.chat.runtime import set_llm_provider
    from tests.fake_gemini import FakeGemini
    from tests.fake_openai import FakeOpenAI
    from tests.test_providers import use_provider

    fake = {"openai": FakeOpenAI, "gemini": FakeGemini}[provider]().start()
    reconfigure(app, CHAT_LLM_ALLOW_PRIVATE=True)  # the fakes are on loopback
    set_llm_provider(None)
    try:
        use_provider(
            app, world.a.org.id, provider, fake.url + ("/v1" if provider == "openai" else "")
        )
        member = world.a.principal("member")
        conversation = make_history(member, turns=10, result_chars=200, pad=1500)
        fake.script.add([HttpFail(400, said, "invalid_request_error")], [Say(SUMMARY)], [Say("Ok")])
        result = send(member, "Go on", conversation.id)
    finally:
        set_llm_provider(None)
        reconfigure(app, CHAT_LLM_ALLOW_PRIVATE=False)
        fake.stop()
    assert result.status == "done", result.error
    assert len(fake.requests) == 3
    assert len(messages_of(conversation.id, MessageRole.SUMMARY)) == 1
    assert "Question 0:" not in json.dumps(fake.requests[-1])


# ---- the measures, on rows in memory -------------------------------------------------------


def row(id: int, role: str, text: str = "", calls=(), tokens: int = 0) -> TranscriptMessage:
    return TranscriptMessage(id, role, text, [], "complete", list(calls), tokens)


def read(call_id: str, chars: int) -> TranscriptCall:
    return TranscriptCall(call_id, "records_query", {}, "SUCCEEDED", "r" * chars, None, None)


def turns(count: int, result: int = 400, first_id: int = 1) -> list[TranscriptMessage]:
    """``count`` turns of three rows: a question, a read, an answer."""
    rows = []
    for n in range(count):
        base = first_id + 3 * n
        rows += [
            row(base, "user", f"question {n}"),
            row(base + 1, "assistant", "", [read(f"c{base}", result)]),
            row(base + 2, "assistant", f"answer {n}"),
        ]
    return rows


def context_of(rows, stub_before=None, moved_at=None, fixed=1000) -> Context:
    conversation = SimpleNamespace(context_stub_before=stub_before, context_stub_moved_at=moved_at)
    return Context.of(rows, conversation, {}, fixed)  # type: ignore[arg-type]


def test_the_estimate_is_the_last_measured_request_plus_what_came_after():
    rows = turns(3)
    rows[4] = row(5, "assistant", "", rows[4].tool_calls, tokens=900)  # measured at step 2
    context = context_of(rows)
    after = sum(context.size(i) for i in range(4, len(rows)))
    assert context.estimate() == 900 + tokens_of(after)


def test_without_a_measure_or_after_the_view_changed_everything_is_counted():
    rows = turns(3)
    everything = tokens_of(1000 + sum(context_of(rows).size(i) for i in range(len(rows))))
    assert context_of(rows).estimate() == everything
    rows[4] = row(5, "assistant", "", rows[4].tool_calls, tokens=900)
    stale = context_of(rows, stub_before=4, moved_at=8)
    assert stale.estimate() == tokens_of(1000 + stale.chars())
    summary = TranscriptMessage(20, "summary", "so far", [{"through": 3}], "complete")
    compacted = context_of([*rows, summary])
    assert [r.id for r in compacted.shown] == [4, 5, 6, 7, 8, 9]
    assert compacted.estimate() == tokens_of(1000 + len("so far") + compacted.chars())


def test_the_stub_boundary_keeps_the_newest_results_and_moves_only_in_large_jumps():
    policy = ContextPolicy(
        window=4000, stub_at=0.5, compact_at=0.75
    )  # keeps 1000 tokens (4000 characters) of results
    rows = turns(20, result=1000)  # results of 1000 characters, about 900 saved by a stub
    boundary = stub_boundary(context_of(rows), policy)
    assert boundary is not None
    results = [b for m in build_llm_messages(rows, None, boundary) for b in m.content]
    whole = [b.tool_use_id for b in results if b.type == "tool_result" and len(b.content) > 200]
    assert boundary == 48 and whole == ["c49", "c52", "c55", "c58"]  # the newest four stay
    # One more turn saves too little to move it again (less than a tenth of the window).
    more = [*rows, *turns(1, result=1000, first_id=61)]
    assert stub_boundary(context_of(more, stub_before=boundary), policy) is None
    # Forced, it stubs everything but the newest reply's results.
    forced = stub_boundary(context_of(more, stub_before=boundary), policy, force=True)
    assert forced == 62


def test_compaction_covers_whole_turns_never_the_current_one_or_a_waiting_call():
    policy = ContextPolicy(window=4000, stub_at=0.5, compact_at=0.75)
    rows = [*turns(10), row(31, "user", "the current question")]
    start = compaction_point(context_of(rows), policy)
    shown = context_of(rows).shown
    assert shown[start].role == "user" and 0 < start <= 30
    assert compaction_point(context_of(rows), policy, force=True) == 30  # all before the current
    assert compaction_point(context_of(rows[:3]), policy, force=True) is None  # one turn only
    waiting = TranscriptCall("w", "records_update", {}, "PROPOSED", None, None, None)
    rows[10] = row(11, "assistant", "", [waiting])  # a card still waits in turn 4
    assert compaction_point(context_of(rows), policy, force=True) == 9


def test_the_window_setting_is_the_deployments_and_an_orgs_own_provider_keeps_its_own(app):
    defaults = chat_settings(app)  # the deployment's provider is anthropic, no window set
    config = replace(defaults, llm_provider="ollama", context_window=8192)
    assert ContextPolicy.of("ollama", 128_000, config).window == 8192
    assert ContextPolicy.of("anthropic", 200_000, config).window == 200_000
    assert ContextPolicy.of("anthropic", 200_000, defaults).window == 200_000
    assert ContextPolicy.of("vllm", None, replace(defaults, llm_provider="x")).window == 128_000
    policy = ContextPolicy.of("anthropic", 200_000, replace(defaults, context_stub_at=0.4))
    assert (policy.stub_at, policy.compact_at, policy.keep) == (0.4, 0.75, 40_000)
