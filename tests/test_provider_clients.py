"""Provider clients are kept per key and endpoint, at most ``CHAT_LLM_CLIENT_CACHE`` of
them; each one dropped is closed, and never under a reply still streaming on it. The real
``openai`` SDK talks to the loopback fake of its API."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from monark.chat.models import Conversation
from monark.chat.runtime import provider_for, set_llm_provider
from monark.chat.turn.start import SendInput, send_message
from monark.extensions import db
from tests.fake_openai import FakeOpenAI
from tests.llm_script import Say
from tests.test_providers import _replies, use_provider
from tests.tuning import configure


@pytest.fixture
def fake(app, monkeypatch) -> Iterator[FakeOpenAI]:
    """Orgs' own OpenAI settings pointing at the fake (on loopback), two clients kept."""
    fake = FakeOpenAI().start()
    configure(monkeypatch, app, CHAT_LLM_ALLOW_PRIVATE=True)
    configure(monkeypatch, app, CHAT_LLM_MAX_RETRIES=0)
    configure(monkeypatch, app, CHAT_LLM_CLIENT_CACHE=2)
    set_llm_provider(None)
    yield fake
    set_llm_provider(None)
    fake.stop()


def _client_for(app, org_id: int, fake: FakeOpenAI, key: str):
    """The org's adapter once its key is ``key``, and the SDK client it streams with."""
    use_provider(app, org_id, "openai", fake.base_url, key=key)
    adapter = provider_for(org_id)[0]
    return adapter, adapter.client()


def test_a_changed_key_closes_the_client_of_the_oldest_beyond_the_bound(app, world, fake):
    org = world.a.org.id
    first, first_sdk = _client_for(app, org, fake, "sk-first-key-0001")
    _, second_sdk = _client_for(app, org, fake, "sk-second-key-0002")
    assert not first_sdk.is_closed()  # two fit
    _, third_sdk = _client_for(app, org, fake, "sk-third-key-0003")
    assert first_sdk.is_closed()
    assert not second_sdk.is_closed() and not third_sdk.is_closed()
    # The first key back: a new client, and the turn answers as before.
    again, _ = _client_for(app, org, fake, "sk-first-key-0001")
    assert again is not first and second_sdk.is_closed()
    fake.script.add([Say("Back again.")])
    result = send_message(world.a.principal("member"), SendInput(text="Hi"))
    assert result.status == "done"
    assert fake.headers[-1]["authorization"] == "Bearer sk-first-key-0001"


def test_a_client_dropped_while_a_reply_streams_on_it_closes_when_the_reply_ends(
    app, world, fake, monkeypatch
):
    configure(monkeypatch, app, CHAT_LLM_CLIENT_CACHE=1)
    _, streaming_sdk = _client_for(app, world.a.org.id, fake, "sk-acme-key-0001")
    use_provider(app, world.b.org.id, "openai", fake.base_url, key="sk-globex-key-0002")
    fake.gate = threading.Event()  # the reply waits, piece by piece, for this
    fake.script.add([Say("one two three four", chunks=4)])
    done: dict = {}

    def acme_turn() -> None:
        with app.app_context():
            done["result"] = send_message(world.a.principal("member"), SendInput(text="Hi"))

    turn = threading.Thread(target=acme_turn)
    turn.start()
    deadline = time.monotonic() + 10
    while not fake.requests:  # the reply has begun: Acme's request reached the fake
        assert time.monotonic() < deadline, "Acme's turn never reached the model"
        time.sleep(0.01)
    provider_for(world.b.org.id)  # Globex's client takes the only place: Acme's is dropped
    assert not streaming_sdk.is_closed()  # ...but not closed under the reply
    fake.gate.set()
    turn.join(20)
    result = done["result"]
    assert result.status == "done"
    assert [m.text for m in _replies(result.conversation_id)] == ["one two three four"]
    assert streaming_sdk.is_closed()  # closed once the reply ended


def test_a_turn_whose_client_was_dropped_keeps_it_for_its_later_steps(
    app, world, fake, monkeypatch
):
    """Dropped from the cache mid-turn, the adapter's client serves the turn's next steps
    (no new client per step) and is closed once the turn ends."""
    from monark.chat.llm.openai_chat import OpenAIProvider
    from tests.llm_script import Call

    built: list[object] = []
    make_client = OpenAIProvider.make_client

    def counted(self):
        client = make_client(self)
        built.append(client)
        return client

    monkeypatch.setattr(OpenAIProvider, "make_client", counted)
    configure(monkeypatch, app, CHAT_LLM_CLIENT_CACHE=1)
    use_provider(app, world.a.org.id, "openai", fake.base_url, key="sk-acme-key-0001")
    use_provider(app, world.b.org.id, "openai", fake.base_url, key="sk-globex-key-0002")
    fake.gate = threading.Event()
    fake.script.add([Call("records_list", {"model": "tasks"})], [Say("Two steps.")])
    done: dict = {}

    def acme_turn() -> None:
        with app.app_context():
            member = world.a.principal("member")
            done["first"] = send_message(member, SendInput(text="List"))

    turn = threading.Thread(target=acme_turn)
    turn.start()
    deadline = time.monotonic() + 10
    while not fake.requests:  # the first step has begun on Acme's client
        assert time.monotonic() < deadline, "Acme's turn never reached the model"
        time.sleep(0.01)
    provider_for(world.b.org.id)  # Globex's adapter takes the only place: Acme's is dropped
    fake.gate.set()
    turn.join(20)
    result = done["first"]
    assert result.status == "done" and len(fake.requests) == 2
    (client,) = built  # one client for the turn's two steps (Globex's is not made yet)
    assert client.is_closed()  # closed when the turn ended


def test_stop_ends_a_turn_whose_client_is_still_being_built(app, world, fake, monkeypatch):
    """Building a client can be slow (the SDK's first import takes seconds): the turn
    holding the adapter does not wait for it to end, so Stop stops it at once."""
    from monark.chat.llm.openai_chat import OpenAIProvider
    from monark.chat.turn import run
    from monark.chat.turn.start import send_message

    building, built = threading.Event(), threading.Event()
    make_client = OpenAIProvider.make_client

    def slow(self):
        building.set()
        built.wait(20)
        return make_client(self)

    monkeypatch.setattr(OpenAIProvider, "make_client", slow)
    use_provider(app, world.a.org.id, "openai", fake.base_url, key="sk-acme-key-0001")
    done: dict = {}

    def acme_turn() -> None:
        with app.app_context():
            member = world.a.principal("member")
            done["result"] = send_message(member, SendInput(text="Hi"))

    turn = threading.Thread(target=acme_turn)
    turn.start()
    try:
        assert building.wait(10), "the turn never asked for its client"
        conversation_id = db.session.scalar(select(Conversation.id))
        run.request_stop(conversation_id)
        turn.join(10)
        assert not turn.is_alive(), "the turn waited for its client to be built"
        assert done["result"].status == "stopped"
    finally:
        built.set()
        turn.join(20)
