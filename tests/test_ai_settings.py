"""An org's own AI settings: saved by admins, encrypted, never shown again, audited by field
name; Test connection and the model list; two orgs on one deployment, each with its own
provider; and a key that never shows up anywhere but the request to its provider."""

from __future__ import annotations

import json
import logging
import socket

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select, text

from monark.chat.llm.providers import get_provider
from monark.chat.models import Message
from monark.chat.runtime import set_llm_provider
from monark.chat.turn.start import SendInput, send_message
from monark.core.models import Event
from monark.extensions import db
from monark.settings import ai_provider
from monark.settings.models import OrgAiSettings
from tests import fake_anthropic, fake_gemini, fake_openai
from tests.fake_anthropic import FakeAnthropic
from tests.fake_openai import FakeOpenAI
from tests.llm_script import Call, HttpFail, Say
from tests.test_providers import FAKES, KEY, use_provider
from tests.tuning import reconfigure

PAGE = "/settings/ai"


@pytest.fixture
def loopback(app):
    """The fakes listen on loopback: let orgs point there, as a deployment may allow."""
    reconfigure(app, CHAT_LLM_ALLOW_PRIVATE=True)
    reconfigure(app, CHAT_LLM_MAX_RETRIES=0)
    set_llm_provider(None)
    yield
    set_llm_provider(None)
    reconfigure(app, CHAT_LLM_ALLOW_PRIVATE=False)
    reconfigure(app, CHAT_LLM_MAX_RETRIES=2)


def test_an_admin_saves_a_key_that_is_stored_encrypted_and_never_shown(world, login, app):
    admin = login("admin@acme.test")
    saved = admin.post(
        PAGE, {"provider": "openai", "model": "gpt-5", "api_key": KEY, "max_steps": "12"}
    )
    assert saved.status_code == 303
    page = admin.get(PAGE).get_data(as_text=True)
    assert KEY not in page and "A key is set" in page
    row = db.session.scalar(select(OrgAiSettings))
    assert (row.provider, row.model, row.max_steps) == ("openai", "gpt-5", 12)
    assert KEY not in (row.api_key_encrypted or "")
    stored = db.session.execute(text("SELECT * FROM org_ai_settings")).one()
    assert KEY not in json.dumps([str(v) for v in stored])
    event = db.session.scalar(select(Event).where(Event.type == "org.ai_settings.updated"))
    assert sorted(event.payload["fields"]) == ["api_key", "max_steps", "model", "provider"]
    assert KEY not in json.dumps(event.payload)
    # Saving again without a key keeps it; "remove" clears it.
    admin.post(PAGE, {"provider": "openai", "model": "gpt-5", "max_steps": "12"})
    db.session.rollback()
    assert ai_provider.resolve(world.a.org.id).config.api_key == KEY
    admin.post(PAGE, {"provider": "openai", "model": "gpt-5", "clear_key": "on"})
    db.session.rollback()
    assert db.session.scalar(select(OrgAiSettings)).api_key_encrypted is None


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"provider": "skynet"}, "provider"),
        ({"max_steps": "999"}, "max_steps"),
        ({"max_tokens": "0"}, "max_tokens"),
        ({"max_steps": "many"}, "max_steps"),
        ({"base_url": "ftp://example.com"}, "base_url"),
        ({"base_url": "https://user:pw@example.com/v1"}, "base_url"),
        ({"model": "m" * 500}, "model"),
        ({"model": "gpt-5\r\nX-Injected: 1"}, "model"),
        ({"model": "gpt\u202e5"}, "model"),
        ({"api_key": "sk-ключ-1234567"}, "api_key"),
        ({"api_key": "sk 12345678"}, "api_key"),
        ({"api_key": "abc"}, "api_key"),
        ({"base_url": "http://example.com:99999/"}, "base_url"),
        ({"base_url": "http://example.com:abc/"}, "base_url"),
        ({"base_url": "http://[::1"}, "base_url"),
        ({"base_url": "http://169.254.169.254/"}, "base_url"),
        ({"base_url": "http://[::1]:1/"}, "base_url"),
        ({"base_url": "http://2130706433/"}, "base_url"),
        ({"base_url": "http://0.0.0.0:5077/"}, "base_url"),
        ({"base_url": "http://[::127.0.0.1]:5097/v1"}, "base_url"),  # IPv4-compatible
        ({"base_url": "http://[64:ff9b::a9fe:a9fe]/"}, "base_url"),  # NAT64 of 169.254.169.254
        ({"base_url": "http://[2002:a9fe:a9fe::1]/"}, "base_url"),  # 6to4 of the same
        ({"base_url": "http://224.0.0.1:5077/v1"}, "base_url"),  # multicast
        ({"base_url": "http://[::ffff:224.0.0.1]/v1"}, "base_url"),  # mapped multicast
        ({"provider": "ollama"}, "base_url"),  # its default endpoint is this host
        ({"base_url": "http://example.com:0/"}, "base_url"),
        ({"base_url": "http://[::1%25lo]/"}, "base_url"),  # a zone id is never public
        ({"base_url": "http://[fe80::1%25eth0]/"}, "base_url"),
        ({"base_url": "http://[fe80::1%25eth0]:11434/v1"}, "base_url"),
        ({"base_url": "http://[3fff::1]/v1"}, "base_url"),  # documentation (RFC 9637)
        ({"base_url": "http://[5f00::1]/v1"}, "base_url"),  # SRv6 segment id (RFC 9602)
    ],
)
def test_bad_settings_name_the_field_and_change_nothing(world, login, form, field):
    admin = login("admin@acme.test")
    refused = admin.post(PAGE, form)
    assert refused.status_code == 422
    assert f'id="{field}-error"' in refused.get_data(as_text=True)
    assert db.session.scalar(select(OrgAiSettings)) is None


def test_an_org_base_url_on_a_private_address_is_refused_unless_the_deployment_allows(world, app):
    row = OrgAiSettings(org_id=world.a.org.id, provider="ollama", model="llama3")
    db.session.add(row)
    db.session.commit()
    resolved = ai_provider.resolve(world.a.org.id)
    # Members read that an admin must look; admins read why.
    assert resolved.problem and "127.0.0.1" not in resolved.problem
    assert "non-public address (127.0.0.1)" in resolved.admin_problem
    reconfigure(app, CHAT_LLM_ALLOW_PRIVATE=True)
    try:
        assert ai_provider.resolve(world.a.org.id).problem is None
    finally:
        reconfigure(app, CHAT_LLM_ALLOW_PRIVATE=False)


def test_test_connection_answers_from_the_fake_and_says_why_a_dead_port_fails(
    world, login, loopback
):
    fake = FakeOpenAI().start()
    try:
        fake.script.add([Say("OK")])
        admin = login("admin@acme.test")
        form = {"provider": "openai", "model": "gpt-5", "api_key": KEY}
        good = admin.post(f"{PAGE}/test", {**form, "base_url": fake.url + "/v1"})
        assert good.status_code == 200 and "Connected" in good.get_data(as_text=True)
        assert "“OK”" in good.get_data(as_text=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        bad = admin.post(f"{PAGE}/test", {**form, "base_url": dead})
        body = bad.get_data(as_text=True)
        assert "Could not connect to the provider" in body and "Connection refused" in body
        assert KEY not in body
        # Nothing was saved by testing.
        assert db.session.scalar(select(OrgAiSettings)) is None
    finally:
        fake.stop()


def test_the_model_list_offers_openais_chat_models(world, login, loopback):
    fake = FakeOpenAI().start()
    try:
        admin = login("admin@acme.test")
        listed = admin.post(
            f"{PAGE}/models",
            {"provider": "openai", "api_key": KEY, "base_url": fake.url + "/v1"},
        ).get_data(as_text=True)
        assert 'value="gpt-5"' in listed and "whisper" not in listed and "embedding" not in listed
    finally:
        fake.stop()


@pytest.mark.parametrize(
    ("provider", "listed"),
    [
        # OpenAI's own catalogue holds embeddings, speech and images: only chat models.
        ("openai", ["gpt-4.1-mini", "gpt-5"]),
        # Every other catalogue is the endpoint's own, whole (a vendor's or a local
        # server's ids follow no OpenAI naming).
        ("openai_compatible", sorted(fake_openai.DEFAULT_MODELS)),
        ("gemini", sorted(m["name"].removeprefix("models/") for m in fake_gemini.DEFAULT_MODELS)),
        ("anthropic", sorted(fake_anthropic.DEFAULT_MODELS)),
    ],
)
def test_only_openais_model_catalogue_is_filtered(world, login, loopback, provider, listed):
    adapter = get_provider(provider).adapter
    cls, base = FAKES[adapter]
    fake = cls().start()
    try:
        answer = login("admin@acme.test").post(
            f"{PAGE}/models", {"provider": provider, "api_key": KEY, "base_url": base(fake)}
        )
        options = BeautifulSoup(answer.get_data(as_text=True), "html.parser").select("option")
        assert [o["value"] for o in options] == listed
    finally:
        fake.stop()


def test_the_providers_json_has_no_code_and_no_secrets(world, login, app):
    reconfigure(app, OPENAI_API_KEY=KEY)
    try:
        body = login("admin@acme.test").get(f"{PAGE}/providers").get_json()
    finally:
        reconfigure(app, OPENAI_API_KEY=None)
    ids = [p["id"] for p in body["providers"]]
    assert ids[:3] == ["anthropic", "openai", "gemini"] and "ollama" in ids
    assert KEY not in json.dumps(body)
    groq = next(p for p in body["providers"] if p["id"] == "groq")
    assert groq["default_base_url"] == "https://api.groq.com/openai/v1"


def test_two_orgs_on_one_deployment_each_talk_to_their_own_provider(
    app, world, monkeypatch, loopback
):
    deployment = FakeAnthropic().start()
    own = FakeOpenAI().start()
    try:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", deployment.url)
        reconfigure(app, ANTHROPIC_API_KEY="sk-deployment-key")
        use_provider(app, world.a.org.id, "openai", own.url + "/v1")  # Acme: its own
        deployment.script.add([Say("From the deployment.")])
        own.script.add([Say("From Acme's own.")])
        acme = send_message(world.a.principal("member"), SendInput(text="Hi"))
        globex = send_message(world.b.principal("member"), SendInput(text="Hi"))
        replies = {
            m.conversation_id: (m.provider, m.text)
            for m in db.session.scalars(select(Message).where(Message.role == "assistant"))
        }
        assert replies[acme.conversation_id] == ("openai", "From Acme's own.")
        assert replies[globex.conversation_id] == ("anthropic", "From the deployment.")
        assert own.headers[-1]["authorization"] == f"Bearer {KEY}"
        assert deployment.headers[-1].get("x-api-key") == "sk-deployment-key" or (
            deployment.headers[-1].get("authorization") == "Bearer sk-deployment-key"
        )
    finally:
        reconfigure(app, ANTHROPIC_API_KEY="")
        deployment.stop()
        own.stop()


@pytest.mark.parametrize("name", list(FAKES))
def test_a_key_never_reaches_pages_streams_logs_audit_errors_or_tool_results(
    app, world, login, caplog, loopback, name
):
    cls, base = FAKES[name]
    fake = cls().start()
    caplog.set_level(logging.DEBUG)
    try:
        use_provider(app, world.a.org.id, name, base(fake))
        fake.script.add(
            [Call("me_get", {})],
            [Say("Fine.")],
            [HttpFail(400, "Your key {auth} is not allowed", "invalid_request_error")],
        )
        browser = login("member@acme.test")
        first = browser.post("/chat/stream", {"text": "Who am I?"}, headers={"HX-Request": "true"})
        streamed = first.get_data(as_text=True)
        first.close()
        conversation_id = db.session.scalar(select(Message.conversation_id))
        second = browser.post(
            "/chat/stream",
            {"text": "Again", "conversation_id": str(conversation_id)},
            headers={"HX-Request": "true"},
        )
        streamed += second.get_data(as_text=True)
        second.close()
        assert "is not allowed" in streamed  # the provider's error, shown...
        assert KEY[-10:] in fake.requests.__repr__() or fake.headers  # (sent to the fake)
        surfaces = {
            "stream": streamed,
            "thread": browser.get(f"/chat/conversations/{conversation_id}").get_data(as_text=True),
            "settings": login("admin@acme.test").get(PAGE).get_data(as_text=True),
            "audit": login("admin@acme.test").get("/audit").get_data(as_text=True),
            "logs": caplog.text,
            "rows": json.dumps(
                [
                    [str(v) for v in row]
                    for table in ("chat_messages", "chat_tool_calls", "events")
                    for row in db.session.execute(text(f"SELECT * FROM {table}"))
                ]
            ),
        }
        for surface, content in surfaces.items():
            assert KEY not in content, f"the key shows in the {surface}"
        assert "[redacted]" in surfaces["stream"]  # ...without the key it echoed
    finally:
        fake.stop()


def test_keys_are_rotated_to_a_new_secret_and_an_unreadable_one_says_so(app, world):
    use_provider(app, world.a.org.id, "openai", "https://api.openai.com/v1")
    old_secret = app.config["SECRET_KEY"]
    runner = app.test_cli_runner()
    try:
        reconfigure(app, ENCRYPTION_KEYS=f"a-new-secret-of-enough-length,{old_secret}")
        result = runner.invoke(args=["rotate-secrets"])
        assert "1 stored key(s)" in result.output
        reconfigure(app, ENCRYPTION_KEYS="a-new-secret-of-enough-length")  # the old one dropped
        db.session.rollback()
        assert ai_provider.resolve(world.a.org.id).config.api_key == KEY
        reconfigure(app, ENCRYPTION_KEYS="yet-another-secret")
        resolved = ai_provider.resolve(world.a.org.id)
        assert resolved.problem and "cannot be read" in resolved.problem
        assert KEY not in resolved.problem
    finally:
        reconfigure(app, ENCRYPTION_KEYS="")


def test_the_deployments_key_never_goes_to_an_endpoint_an_org_chose(app, world, login, loopback):
    """An org that names its own endpoint brings its own key: the deployment's key goes
    only to the vendor's endpoint (or the deployment's own)."""
    fake = FakeOpenAI().start()
    reconfigure(app, OPENAI_API_KEY="sk-DEPLOYMENT-SECRET-2222")
    try:
        fake.script.add(*[[Say("OK")]] * 3)
        admin = login("admin@acme.test")
        form = {"provider": "openai", "model": "gpt-5", "base_url": fake.url + "/v1"}
        tested = admin.post(f"{PAGE}/test", form)
        admin.post(f"{PAGE}/models", form)
        admin.post(PAGE, form)
        db.session.rollback()
        resolved = ai_provider.resolve(world.a.org.id)
        assert resolved.config.api_key == ""
        send_message(world.a.principal("member"), SendInput(text="Hi"))
        sent = json.dumps(fake.headers)
        assert "DEPLOYMENT-SECRET" not in sent
        assert tested.status_code == 200
        # Without an endpoint of its own, the org uses the vendor's, and the deployment's key.
        admin.post(PAGE, {"provider": "openai", "base_url": "https://api.openai.com/v1"})
        db.session.rollback()
        vendor = ai_provider.resolve(world.a.org.id)
        assert vendor.config.base_url is None
        assert vendor.config.api_key == "sk-DEPLOYMENT-SECRET-2222"
    finally:
        reconfigure(app, OPENAI_API_KEY=None)
        fake.stop()


def test_a_redirect_is_never_followed_past_the_address_check(app, world, login, loopback):
    """A public endpoint that answers 307 to an internal address must not take the
    request there: the SDKs' clients follow no redirect."""
    from http.server import BaseHTTPRequestHandler

    from tests.fake_server import LoopbackServer

    fake = FakeOpenAI().start()
    fake.script.add([Say("inside")])

    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(307)
            self.send_header("Location", fake.url + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *args) -> None:
            pass

    server = LoopbackServer(Redirect).start()
    try:
        admin = login("admin@acme.test")
        form = {
            "provider": "openai_compatible",
            "model": "m",
            "api_key": KEY,
            "base_url": f"{server.url}/v1",
        }
        answer = admin.post(f"{PAGE}/test", form).get_data(as_text=True)
        assert "inside" not in answer and "Connected" not in answer
        assert fake.requests == []
    finally:
        server.stop()
        fake.stop()


def test_requests_to_an_org_endpoint_connect_only_to_public_addresses(app):
    """Checked again at each request, against the addresses it then connects to, so a
    host that resolved to a public address at save time and to a private one now (DNS
    rebinding) is refused."""
    import httpx2

    from monark.chat.llm.common import http_client_options

    with (
        httpx2.Client(**http_client_options(public_only=True)) as client,
        pytest.raises(httpx2.ConnectError, match="non-public address"),
    ):
        client.get("http://127.0.0.1:9/v1/models")
    assert http_client_options(public_only=False).get("transport") is None


def test_the_deployments_own_local_model_can_be_tested(app, world, login):
    """The deployment's endpoint is the deployment's choice: no address check for it, even
    on a loopback address (only endpoints an org names are kept to public hosts)."""
    fake = FakeOpenAI().start()
    saved = {k: app.config.get(k) for k in ("CHAT_LLM_PROVIDER", "CHAT_LLM_BASE_URL")}
    reconfigure(app, CHAT_LLM_PROVIDER="ollama", CHAT_LLM_BASE_URL=fake.url + "/v1")
    set_llm_provider(None)
    try:
        fake.script.add([Say("OK")])
        admin = login("admin@acme.test")
        answer = admin.post(f"{PAGE}/test", {}).get_data(as_text=True)
        assert "Connected" in answer
        # The org naming that same loopback endpoint is refused: it is not the deployment's.
        refused = admin.post(PAGE, {"provider": "ollama", "base_url": fake.url + "/v2"})
        assert refused.status_code == 422 and 'id="base_url-error"' in refused.get_data(
            as_text=True
        )
    finally:
        reconfigure(app, **saved)
        set_llm_provider(None)
        fake.stop()


def test_the_model_list_says_why_it_is_empty(world, login, loopback):
    admin = login("admin@acme.test")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    form = {"provider": "openai_compatible", "base_url": f"http://127.0.0.1:{dead}/v1"}
    answer = admin.post(f"{PAGE}/models", form).get_data(as_text=True)
    assert "did not list its models: Could not connect to the provider" in answer
    named = admin.post(f"{PAGE}/test", {"model": "m" * 500}).get_data(as_text=True)
    assert "Model: " in named


def test_a_saved_key_goes_nowhere_but_where_it_was_saved_for(app, world, login, loopback):
    """Another admin cannot read the saved key by pointing Test, the model list or the
    saved settings at a server of theirs: a new endpoint needs the key typed again."""
    vendor, sink = FakeOpenAI().start(), FakeOpenAI().start()
    try:
        vendor.script.add([Say("OK")])
        sink.script.add(*[[Say("OK")]] * 3)
        admin = login("admin@acme.test")
        saved = {"provider": "groq", "base_url": vendor.url + "/v1", "api_key": KEY}
        assert admin.post(PAGE, saved).status_code == 303
        moved = {"provider": "groq", "base_url": sink.url + "/v1"}
        admin.post(f"{PAGE}/test", moved)
        admin.post(f"{PAGE}/models", moved)
        admin.post(f"{PAGE}/test", {**moved, "provider": "openai_compatible"})
        assert KEY not in json.dumps(sink.headers)
        refused = admin.post(PAGE, moved)
        assert refused.status_code == 422 and 'id="api_key-error"' in refused.get_data(as_text=True)
        # Where it was saved for, it is still used.
        same = admin.post(f"{PAGE}/test", {"provider": "groq", "base_url": vendor.url + "/v1"})
        assert "Connected" in same.get_data(as_text=True)
        assert KEY in json.dumps(vendor.headers)
    finally:
        vendor.stop()
        sink.stop()


def test_headers_from_the_servers_environment_stay_off_an_orgs_endpoint(
    app, world, login, loopback, monkeypatch
):
    monkeypatch.setenv("OPENAI_ORG_ID", "org-DEPLOYMENT")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-DEPLOYMENT")
    monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Gateway-Auth: gateway-SECRET")
    fakes = {"openai_compatible": FakeOpenAI().start(), "anthropic": FakeAnthropic().start()}
    try:
        admin = login("admin@acme.test")
        for provider, fake in fakes.items():
            fake.script.add([Say("OK")])
            base = fake.url + ("/v1" if provider != "anthropic" else "")
            form = {"provider": provider, "model": "m", "api_key": KEY, "base_url": base}
            assert "Connected" in admin.post(f"{PAGE}/test", form).get_data(as_text=True)
            sent = json.dumps(fake.headers).lower()
            assert "deployment" not in sent and "gateway" not in sent, provider
            assert KEY.lower() in sent  # the org's own key does go
    finally:
        for fake in fakes.values():
            fake.stop()
