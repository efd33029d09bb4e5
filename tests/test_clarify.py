"""Ask before guessing: the ``ask_user`` question card, through the panel's endpoints, with
the real Anthropic adapter talking to the fake server on loopback."""

from __future__ import annotations

import json

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select

from monark.chat.models import ToolCall, ToolCallStatus
from monark.chat.turn.start import MOVED_ON_REASON
from monark.core.models import Event, User
from monark.extensions import db
from tests.llm_script import Call, Say
from tests.test_chat_stream import frames, post_stream, read

QUESTION = {"question": "Which <b>Acme</b> do you mean?", "choices": ["Acme Ltd", "Acme Inc"]}


def ask(fake, then: str = "Thanks, on it.", question: dict | None = None) -> None:
    """Script a turn that asks ``question``, then (after the answer) says ``then``."""
    fake.script.add([Say("Let me check."), Call("ask_user", question or QUESTION)], [Say(then)])


def the_call() -> ToolCall:
    db.session.rollback()  # the test shares its session with the requests: drop stale rows
    return db.session.scalar(select(ToolCall).where(ToolCall.name == "ask_user"))


def answer(browser, call_id: int, choice: str | None = None, answer: str | None = None):
    """Post what the card's buttons send: a choice's number, or the text typed."""
    if choice is not None:
        fields = {"choice": f"{call_id}:{choice}"}
    else:
        fields = {"call_id": str(call_id), f"answer_{call_id}": answer or ""}
    return read(browser.post("/chat/answer", fields))


def tool_result(body: dict) -> dict:
    """The tool_result block the model got in its last request."""
    blocks = [b for m in body["messages"] for b in m["content"] if isinstance(m["content"], list)]
    return [b for b in blocks if b.get("type") == "tool_result"][-1]


def result_text(block: dict) -> str:
    content = block["content"]
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


def test_a_question_pauses_the_turn_on_its_card(world, login, fake_anthropic):
    ask(fake_anthropic)
    response = post_stream(login("member@acme.test"), "Update Acme")
    body = response.get_data(as_text=True)
    event, data = frames(response)[-1]
    assert event == "done" and json.loads(data)["status"] == "awaiting_confirmation"
    call = the_call()
    assert call.status == ToolCallStatus.PROPOSED and not call.mutates
    assert len(fake_anthropic.requests) == 1  # the turn waits: no second step
    # The model's text is escaped; one button per choice and "Something else…".
    assert "<b>Acme</b>" not in body and "&lt;b&gt;Acme&lt;/b&gt;" in body
    page = BeautifulSoup(
        login("member@acme.test").get(f"/chat/conversations/{call.conversation_id}").text,
        "html.parser",
    )
    card = page.select_one(f"#call-{call.id}")
    buttons = [b.get_text(strip=True) for b in card.select("button")]
    assert buttons == ["Acme Ltd", "Acme Inc", "Send answer"]
    assert "Something else…" in card.get_text()
    assert "A question above is waiting for your answer" in page.get_text()
    assert "A question above is waiting for your answer" in body  # the stream's foot too
    assert "waiting for your Confirm" not in page.get_text()
    # None of a write's approval actions.
    for word in ("Confirm", "Reject", "Allow", "Edit", "Ask someone"):
        assert word not in card.get_text()


def test_a_click_on_a_choice_answers_and_the_turn_goes_on(world, login, fake_anthropic):
    ask(fake_anthropic, "Acme Inc it is.")
    browser = login("member@acme.test")
    post_stream(browser, "Update Acme")
    call = the_call()
    response = answer(browser, call.id, choice="1")
    body = response.get_data(as_text=True)
    assert response.mimetype == "text/event-stream"
    assert "Acme Inc it is." in body and "Answered" in body
    call = the_call()
    assert call.status == ToolCallStatus.SUCCEEDED and call.result == {"answer": "Acme Inc"}
    member = db.session.scalar(select(User.id).where(User.email == "member@acme.test"))
    assert call.decided_by_id == member
    block = tool_result(fake_anthropic.requests[-1])
    assert json.loads(result_text(block)) == {"answer": "Acme Inc"} and not block.get("is_error")
    assert db.session.scalar(
        select(Event.id).where(Event.type == "chat.tool_call.answered", Event.subject_id == call.id)
    )


def test_something_else_answers_with_free_text(world, login, fake_anthropic):
    ask(fake_anthropic, "Noted.")
    browser = login("member@acme.test")
    post_stream(browser, "Update Acme")
    call = the_call()
    conversation_id = call.conversation_id
    response = answer(browser, call.id, answer="  Acme GmbH, the <German> one  ")
    assert "Noted." in response.get_data(as_text=True)
    assert the_call().result == {"answer": "Acme GmbH, the <German> one"}
    assert "Acme GmbH" in result_text(tool_result(fake_anthropic.requests[-1]))
    page = browser.get(f"/chat/conversations/{conversation_id}").text
    assert "&lt;German&gt;" in page and "<German>" not in page
    assert "Send answer" not in page  # answered: the card shows the answer, nothing to click


def test_a_question_resumes_from_the_database_in_another_session(world, login, fake_anthropic):
    ask(fake_anthropic, "Resumed.")
    post_stream(login("member@acme.test"), "Update Acme")
    call = the_call()
    db.session.expunge_all()  # nothing kept: the question is the stored call
    other_tab = login("member@acme.test")  # a new session, as another instance would serve
    assert "Resumed." in answer(other_tab, call.id, choice="0").get_data(as_text=True)
    # The model saw the whole conversation again, read back from the database.
    last = fake_anthropic.requests[-1]["messages"]
    uses = [
        b for m in last for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    assert uses and uses[-1]["name"] == "ask_user" and uses[-1]["input"] == QUESTION


def test_answering_twice_counts_once(world, login, fake_anthropic):
    ask(fake_anthropic)
    browser = login("member@acme.test")
    post_stream(browser, "Update Acme")
    call_id = the_call().id
    answer(browser, call_id, choice="0")
    again = answer(login("member@acme.test"), call_id, choice="1")
    text = again.get_data(as_text=True)
    assert again.status_code == 409 and "already answered" in text and "Acme Ltd" in text
    assert the_call().result == {"answer": "Acme Ltd"}
    assert len(fake_anthropic.requests) == 2  # one continuation, not two


def test_someone_elses_question_is_not_found(world, login, fake_anthropic):
    ask(fake_anthropic)
    post_stream(login("member@acme.test"), "Update Acme")
    call = the_call()
    for email in ("admin@acme.test", "owner@globex.test"):
        assert answer(login(email), call.id, choice="0").status_code == 404
    assert the_call().status == ToolCallStatus.PROPOSED


def test_a_new_message_instead_moves_on(world, login, fake_anthropic):
    ask(fake_anthropic, "Fine, something else then.")
    browser = login("member@acme.test")
    post_stream(browser, "Update Acme")
    conversation_id = the_call().conversation_id
    post_stream(browser, "Never mind, list my tasks", conversation_id=str(conversation_id))
    call = the_call()
    assert call.status == ToolCallStatus.REJECTED and call.skipped
    assert call.reject_reason == MOVED_ON_REASON
    block = tool_result(fake_anthropic.requests[-1])
    assert MOVED_ON_REASON in result_text(block) and block.get("is_error")
    page = browser.get(f"/chat/conversations/{conversation_id}").text
    assert "Not answered: a new message was sent instead." in page
    late = answer(browser, the_call().id, choice="0")
    assert late.status_code == 409 and "passed over" in late.get_data(as_text=True)


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"question": "Which?"}, "choices"),
        ({"question": "Which?", "choices": ["only one"]}, "choices"),
        ({"question": "Which?", "choices": [str(i) for i in range(7)]}, "choices"),
        ({"question": "Which?", "choices": ["a", "x" * 101]}, "100 characters"),
        ({"question": "Which?", "choices": ["Same", "same "]}, "same"),
        ({"question": "x" * 301, "choices": ["a", "b"]}, "question"),
    ],
)
def test_bad_questions_are_tool_errors_the_model_sees(
    world, login, fake_anthropic, arguments, said
):
    fake_anthropic.script.add([Call("ask_user", arguments)], [Say("I will ask properly.")])
    response = post_stream(login("member@acme.test"), "Update Acme")
    assert json.loads(frames(response)[-1][1])["status"] == "done"
    call = the_call()
    assert call.status == ToolCallStatus.FAILED
    block = tool_result(fake_anthropic.requests[-1])
    assert block.get("is_error") and said in result_text(block)


def test_an_answer_too_long_or_with_nul_is_refused(world, login, fake_anthropic):
    ask(fake_anthropic)
    browser = login("member@acme.test")
    post_stream(browser, "Update Acme")
    call = the_call()
    long = answer(browser, call.id, answer="x" * 10_000)
    assert long.status_code == 422 and "at most 2,000 characters" in long.get_data(as_text=True)
    nul = answer(browser, call.id, answer="Acme\x00Ltd")
    assert nul.status_code == 422 and "NUL" in nul.get_data(as_text=True)
    empty = answer(browser, call.id, answer="   ")
    assert empty.status_code == 422
    for wrong in ("9", "-1", "x", "01", "+1", " 1"):
        refused = answer(browser, call.id, choice=wrong)
        assert refused.status_code == 422
        assert "not one of the choices" in refused.get_data(as_text=True)
    assert the_call().status == ToolCallStatus.PROPOSED
    assert len(fake_anthropic.requests) == 1


def test_a_question_is_never_confirmed_as_a_write(world, login, fake_anthropic):
    ask(fake_anthropic)
    browser = login("member@acme.test")
    post_stream(browser, "Update Acme")
    call = the_call()
    refused = read(browser.post("/chat/decide", {"decision": f"confirm:{call.id}"}))
    assert refused.status_code == 409 and "question" in refused.get_data(as_text=True)
    assert the_call().status == ToolCallStatus.PROPOSED
    assert len(fake_anthropic.requests) == 1


def test_no_write_action_reaches_a_question(world, login, fake_anthropic):
    ask(fake_anthropic)
    browser = login("member@acme.test")
    post_stream(browser, "Update Acme")
    call_id = the_call().id
    admin = db.session.scalar(select(User.id).where(User.email == "admin@acme.test"))
    allow = read(browser.post("/chat/allow", {"tool_call_id": str(call_id)}))
    assert allow.status_code >= 400
    hand = read(browser.post(f"/chat/calls/{call_id}/hand-over", {"approver_id": str(admin)}))
    assert the_call().approver_id is None and hand.status_code != 500
    edit = read(browser.post(f"/chat/calls/{call_id}/edit", {"question": "Changed?"}))
    assert edit.status_code >= 400
    call = the_call()
    assert call.status == ToolCallStatus.PROPOSED and call.input == QUESTION
    assert not call.allowed and len(fake_anthropic.requests) == 1


def test_answering_a_settled_write_card_says_it_is_no_question(world, login, fake_anthropic):
    fake_anthropic.script.add(
        [Call("records_create", {"model": "tasks", "values": {"title": "Not a question"}})],
        [Say("Done.")],
    )
    browser = login("member@acme.test")
    post_stream(browser, "Add a task")
    db.session.rollback()
    write_id = db.session.scalar(select(ToolCall.id).where(ToolCall.name == "records_create"))
    assert read(browser.post("/chat/decide", {"decision": f"reject:{write_id}"})).status_code == 200
    refused = answer(browser, write_id, choice="0")
    assert refused.status_code == 404
    assert "not a question" in refused.get_data(as_text=True)
