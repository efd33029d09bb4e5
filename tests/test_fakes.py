"""The loopback OpenAI and Gemini fakes, driven through the real SDKs.

These tests pin the wire formats (and how each SDK surfaces them) that the provider
adapters rely on; they talk to the fakes directly, not through Monark.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as gtypes

from tests.fake_gemini import FakeGemini
from tests.fake_openai import FakeOpenAI
from tests.llm_script import Call, Fail, HttpFail, Say, Script

LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "records_list",
        "description": "List records of a model.",
        "parameters": {
            "type": "object",
            "properties": {"model": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["model"],
        },
    },
}
BIG_INPUT = {"model": "tasks", "filter": {"title": "Quarterly report draft"}, "limit": 25}


# ---- fixtures and the way an adapter would consume each SDK -------------------------------


@pytest.fixture
def oai_fake() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    for event in (fake.hang, fake.gate):
        if event is not None:
            event.set()
    fake.stop()


@pytest.fixture
def oai(oai_fake: FakeOpenAI) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url=oai_fake.base_url, max_retries=0)


@pytest.fixture
def gem_fake() -> Iterator[FakeGemini]:
    fake = FakeGemini().start()
    yield fake
    for event in (fake.hang, fake.gate):
        if event is not None:
            event.set()
    fake.stop()


@pytest.fixture
def gem(gem_fake: FakeGemini) -> genai.Client:
    return genai.Client(api_key="gm-test", http_options={"base_url": gem_fake.url})


def oai_stream(client: openai.OpenAI, **extra: Any) -> openai.Stream:
    kwargs: dict[str, Any] = {
        "model": "gpt-5",
        "messages": [
            {"role": "system", "content": "You are Monark."},
            {"role": "user", "content": "Hi"},
        ],
        "tools": [LOOKUP_TOOL],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    kwargs.update(extra)
    return client.chat.completions.create(**kwargs)


def oai_collect(stream: Any, out: dict | None = None) -> dict:
    """Folds ChatCompletionChunks as an adapter would: text pieces, calls by index, usage."""
    out = out if out is not None else {}
    out.update(pieces=[], calls={}, finish=None, usage=None, role=None)
    for chunk in stream:  # openai.types.chat.ChatCompletionChunk
        if chunk.usage is not None:  # only on the last chunk, whose choices are []
            out["usage"] = chunk.usage
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        out["role"] = out["role"] or delta.role
        if delta.content:
            out["pieces"].append(delta.content)
        for tc in delta.tool_calls or []:  # ChoiceDeltaToolCall
            call = out["calls"].setdefault(tc.index, {"id": None, "name": None, "args": []})
            if tc.id:
                call["id"] = tc.id
            if tc.function and tc.function.name is not None:
                call["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                call["args"].append(tc.function.arguments)
        if choice.finish_reason:
            out["finish"] = choice.finish_reason
    out["text"] = "".join(out["pieces"])
    return out


def gem_config(**extra: Any) -> gtypes.GenerateContentConfig:
    declaration = gtypes.FunctionDeclaration(
        name="records_list",
        description="List records of a model.",
        parameters_json_schema=LOOKUP_TOOL["function"]["parameters"],
    )
    return gtypes.GenerateContentConfig(
        system_instruction="You are Monark.",
        tools=[gtypes.Tool(function_declarations=[declaration])],
        **extra,
    )


def gem_stream(client: genai.Client, **extra: Any) -> Iterator[gtypes.GenerateContentResponse]:
    return client.models.generate_content_stream(
        model="gemini-2.5-flash", contents="Hi", config=gem_config(**extra)
    )


def gem_collect(stream: Any, out: dict | None = None) -> dict:
    """Folds GenerateContentResponse chunks as an adapter would."""
    out = out if out is not None else {}
    out.update(pieces=[], calls=[], finish=None, usage=None, chunks=0)
    for response in stream:  # google.genai.types.GenerateContentResponse
        out["chunks"] += 1
        if response.usage_metadata is not None:  # running totals: keep the latest
            out["usage"] = response.usage_metadata
        if not response.candidates:
            continue
        candidate = response.candidates[0]
        for part in (candidate.content.parts or []) if candidate.content else []:
            if part.text:
                out["pieces"].append(part.text)
            if part.function_call is not None:  # whole calls: name + args dict
                out["calls"].append(part)
        if candidate.finish_reason is not None:
            out["finish"] = candidate.finish_reason
    out["text"] = "".join(out["pieces"])
    return out


# ---- OpenAI ---------------------------------------------------------------------------


def test_openai_text_streams_in_pieces(oai_fake, oai):
    oai_fake.script.add([Say("Hello there, friend.")])
    got = oai_collect(oai_stream(oai))
    assert got["role"] == "assistant"
    assert got["pieces"] == ["Hello ", "there, ", "friend."]
    assert got["finish"] == "stop"
    assert got["calls"] == {}


def test_openai_tool_call_arguments_arrive_split_and_assemble(oai_fake, oai):
    oai_fake.script.add([Call("records_list", BIG_INPUT, id="call_abc")])
    chunks = list(oai_stream(oai))
    deltas = [c.choices[0].delta for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    head = deltas[0].tool_calls[0]
    assert (head.index, head.id, head.type) == (0, "call_abc", "function")
    assert (head.function.name, head.function.arguments) == ("records_list", "")
    assert deltas[0].role == "assistant" and deltas[0].content is None  # role rides along
    rest = [d.tool_calls[0] for d in deltas[1:]]
    assert len(rest) > 5 and all(t.id is None and t.function.name is None for t in rest)
    assert json.loads("".join(t.function.arguments for t in rest)) == BIG_INPUT
    assert chunks[-2].choices[0].finish_reason == "tool_calls"

    # The SDK's own accumulator (client.chat.completions.stream) assembles the same call.
    oai_fake.script.add([Call("records_list", BIG_INPUT, id="call_def")])
    with oai.chat.completions.stream(
        model="gpt-5", messages=[{"role": "user", "content": "Hi"}], tools=[LOOKUP_TOOL]
    ) as stream:
        kinds = {event.type for event in stream}
        final = stream.get_final_completion()
    assert "tool_calls.function.arguments.delta" in kinds
    call = final.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name) == ("call_def", "records_list")
    assert json.loads(call.function.arguments) == BIG_INPUT


def test_openai_two_calls_in_one_step_are_parallel_tool_calls(oai_fake, oai):
    oai_fake.script.add(
        [
            Say("Looking."),
            Call("records_list", {"model": "tasks"}, id="call_1"),
            Call("records_get", {"model": "tasks", "id": 3}, id="call_2"),
        ]
    )
    got = oai_collect(oai_stream(oai))
    assert got["text"] == "Looking."
    assert sorted(got["calls"]) == [0, 1]
    assert [(c["id"], c["name"]) for c in got["calls"].values()] == [
        ("call_1", "records_list"),
        ("call_2", "records_get"),
    ]
    assert json.loads("".join(got["calls"][1]["args"])) == {"model": "tasks", "id": 3}
    assert got["finish"] == "tool_calls"


def test_openai_usage_comes_in_a_final_chunk_only_when_asked(oai_fake, oai):
    oai_fake.script.add([Say("One two three")], [Say("One two three")])
    chunks = list(oai_stream(oai))
    last = chunks[-1]
    assert last.choices == [] and isinstance(last.usage, openai.types.CompletionUsage)
    assert all(c.usage is None for c in chunks[:-1])
    usage = last.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (210, 3, 213)
    assert usage.prompt_tokens_details.cached_tokens == 90  # part of prompt_tokens
    assert oai_fake.requests[0]["stream_options"] == {"include_usage": True}

    chunks = list(oai_stream(oai, stream_options=openai.omit))
    assert all(c.usage is None and c.choices for c in chunks)


def test_openai_http_fail_raises_the_status_error_with_the_message(oai_fake, oai):
    oai_fake.script.add(
        [HttpFail(400, "Invalid 'messages[1]'", "invalid_request_error")],
        [HttpFail(429, "Rate limit reached for gpt-5", "requests")],
        [HttpFail(503, "The engine is currently overloaded", "server_error")],
    )
    with pytest.raises(openai.BadRequestError) as bad:
        oai_stream(oai)  # raised by create(), before any iteration
    assert bad.value.status_code == 400
    assert bad.value.message == "Error code: 400 - Invalid 'messages[1]'"
    assert bad.value.body == {
        "message": "Invalid 'messages[1]'",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    assert bad.value.type == "invalid_request_error"
    with pytest.raises(openai.RateLimitError) as limited:
        oai_stream(oai)
    assert limited.value.code == "rate_limit_exceeded"
    with pytest.raises(openai.InternalServerError) as overloaded:
        oai_stream(oai)
    assert overloaded.value.status_code == 503
    assert "currently overloaded" in str(overloaded.value)


def test_openai_fail_mid_stream_raises_api_error_after_the_text(oai_fake, oai):
    oai_fake.script.add([Say("Partial answer"), Fail("The server had an error", "server_error")])
    got: dict = {}
    with pytest.raises(openai.APIError) as failed:
        oai_collect(oai_stream(oai), got)
    assert "".join(got["pieces"]) == "Partial answer" and got["finish"] is None
    error = failed.value
    assert not isinstance(error, openai.APIStatusError)  # the HTTP status was 200
    assert error.message == "The server had an error"
    assert error.type == "server_error"
    assert error.body == {
        "message": "The server had an error",
        "type": "server_error",
        "param": None,
        "code": None,
    }


def test_openai_request_body_and_headers_are_recorded(oai_fake, oai):
    oai_fake.script.add([Say("Hi")])
    list(oai_stream(oai, temperature=0.2, max_completion_tokens=500))
    body = oai_fake.requests[0]
    assert body["messages"][0] == {"role": "system", "content": "You are Monark."}
    assert body["messages"][1] == {"role": "user", "content": "Hi"}
    assert body["tools"] == [LOOKUP_TOOL]
    assert body["model"] == "gpt-5" and body["stream"] is True
    assert body["max_completion_tokens"] == 500 and body["temperature"] == 0.2
    assert oai_fake.headers[0]["authorization"] == "Bearer sk-test"
    assert oai_fake.paths == ["POST /v1/chat/completions"]

    # A base_url without /v1 (some OpenAI-compatible servers) reaches the same route.
    bare = openai.OpenAI(api_key="sk-test", base_url=oai_fake.url, max_retries=0)
    assert oai_collect(oai_stream(bare))["text"] == "OK"  # an exhausted script says OK
    assert oai_fake.paths[-1] == "POST /chat/completions"


def test_openai_models_list(oai_fake, oai):
    ids = [model.id for model in oai.models.list()]  # openai.types.Model
    assert ids == ["gpt-5", "gpt-4.1-mini", "text-embedding-3-small", "whisper-1", "dall-e-3"]
    assert oai.models.retrieve("gpt-5").owned_by == "openai"
    assert oai_fake.paths == ["GET /v1/models", "GET /v1/models/gpt-5"]
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve("gpt-0")
    oai_fake.models_error = HttpFail(401, "Incorrect API key provided", "invalid_request_error")
    with pytest.raises(openai.AuthenticationError) as denied:
        oai.models.list()
    assert denied.value.code == "invalid_api_key"
    assert oai_fake.requests == []  # only completions are recorded in .requests


def test_openai_broken_calls_are_sent_exactly_as_scripted(oai_fake, oai):
    oai_fake.script.add(
        [
            Call("records_list", "{not json", id="call_bad"),
            Call("", {"model": "tasks"}, id="call_noname"),
            Call(None, '{"model": "ta', id=""),  # no name, no id, cut-off arguments
        ]
    )
    chunks = list(oai_stream(oai))
    heads = [
        c.choices[0].delta.tool_calls[0]
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls and c.choices[0].delta.tool_calls[0].type
    ]
    assert [(h.index, h.id, h.function.name) for h in heads] == [
        (0, "call_bad", "records_list"),
        (1, "call_noname", ""),
        (2, None, None),
    ]
    got = oai_collect(iter(chunks))
    assert "".join(got["calls"][0]["args"]) == "{not json"
    assert "".join(got["calls"][2]["args"]) == '{"model": "ta'
    with pytest.raises(json.JSONDecodeError):
        json.loads("".join(got["calls"][0]["args"]))
    assert got["finish"] == "tool_calls"

    oai_fake.finish_reason = "length"  # e.g. max_tokens reached mid-call
    oai_fake.script.add([Call("records_list", '{"model": ')])
    assert oai_collect(oai_stream(oai))["finish"] == "length"


def test_openai_non_streaming_completion_plays_the_same_step(oai_fake, oai):
    oai_fake.script.add([Say("Let me look."), Call("records_list", {"model": "tasks"}, id="c1")])
    completion = oai.chat.completions.create(
        model="gpt-5", messages=[{"role": "user", "content": "Hi"}], tools=[LOOKUP_TOOL]
    )
    choice = completion.choices[0]
    assert choice.message.content == "Let me look." and choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].function.arguments == '{"model":"tasks"}'
    assert completion.usage.prompt_tokens_details.cached_tokens == 90


@pytest.mark.realtime
def test_openai_hung_provider_times_out(oai_fake):
    oai_fake.hang = threading.Event()
    client = openai.OpenAI(
        api_key="sk-test", base_url=oai_fake.base_url, max_retries=0, timeout=0.3
    )
    with pytest.raises(openai.APITimeoutError):
        oai_stream(client)


# ---- Gemini ---------------------------------------------------------------------------


def test_gemini_text_streams_in_pieces(gem_fake, gem):
    gem_fake.script.add([Say("Hello there, friend.")])
    chunks = list(gem_stream(gem))
    assert [c.text for c in chunks] == ["Hello ", "there, ", "friend."]
    assert [c.candidates[0].finish_reason for c in chunks] == [None, None, gtypes.FinishReason.STOP]
    assert {c.candidates[0].content.role for c in chunks} == {"model"}
    assert chunks[0].model_version == "gemini-2.5-flash"


def test_gemini_function_call_arrives_whole(gem_fake, gem):
    gem_fake.script.add([Call("records_list", BIG_INPUT)])
    got = gem_collect(gem_stream(gem))
    assert got["chunks"] == 1 and got["text"] == ""
    part = got["calls"][0]
    assert part.function_call.name == "records_list"
    assert part.function_call.args == BIG_INPUT
    assert part.function_call.id is None  # Gemini sends no call ids: make your own
    assert isinstance(part.thought_signature, bytes)  # echo it back with the call
    assert got["finish"] == gtypes.FinishReason.STOP  # STOP, also after a call

    gem_fake.call_ids = True
    gem_fake.script.add([Call("records_list", {}, id="call_9")])
    assert gem_collect(gem_stream(gem))["calls"][0].function_call.id == "call_9"


def test_gemini_two_calls_in_one_step_share_a_chunk(gem_fake, gem):
    gem_fake.script.add(
        [
            Say("Looking."),
            Call("records_list", {"model": "tasks"}),
            Call("records_get", {"model": "tasks", "id": 3}),
        ]
    )
    chunks = list(gem_stream(gem))
    assert len(chunks) == 2 and chunks[0].text == "Looking."
    calls = chunks[1].function_calls  # convenience accessor: list[types.FunctionCall]
    assert [(c.name, c.args) for c in calls] == [
        ("records_list", {"model": "tasks"}),
        ("records_get", {"model": "tasks", "id": 3}),
    ]
    parts = chunks[1].candidates[0].content.parts
    assert parts[0].thought_signature is not None and parts[1].thought_signature is None
    assert chunks[1].candidates[0].finish_reason == gtypes.FinishReason.STOP


def test_gemini_usage_is_a_running_total_on_every_chunk(gem_fake, gem):
    gem_fake.script.add([Say("One two three"), Call("records_list", {"model": "tasks"})])
    chunks = list(gem_stream(gem))
    usage = [c.usage_metadata for c in chunks]
    assert [u.candidates_token_count for u in usage] == [1, 2, 3, 8]
    last = usage[-1]
    assert last.prompt_token_count == 210  # includes the cached part
    assert last.cached_content_token_count == 90
    assert last.total_token_count == 218

    gem_fake.usage = {"promptTokenCount": 50}  # no cache hit: the field is absent
    gem_fake.script.add([Say("Hi")])
    assert gem_collect(gem_stream(gem))["usage"].cached_content_token_count is None


def test_gemini_http_fail_raises_client_or_server_error(gem_fake, gem):
    gem_fake.script.add(
        [HttpFail(400, "Invalid JSON payload", "invalid_request_error")],
        [HttpFail(429, "Resource has been exhausted", "RESOURCE_EXHAUSTED")],
        [HttpFail(503, "The model is overloaded", "overloaded_error")],
    )
    with pytest.raises(genai_errors.ClientError) as bad:
        list(gem_stream(gem))
    error = bad.value
    assert (error.code, error.status, error.message) == (
        400,
        "INVALID_ARGUMENT",
        "Invalid JSON payload",
    )
    assert error.details == {
        "error": {"code": 400, "message": "Invalid JSON payload", "status": "INVALID_ARGUMENT"}
    }
    assert str(error).startswith("400 INVALID_ARGUMENT.")
    with pytest.raises(genai_errors.ClientError) as limited:
        list(gem_stream(gem))
    assert (limited.value.code, limited.value.status) == (429, "RESOURCE_EXHAUSTED")
    with pytest.raises(genai_errors.ServerError) as overloaded:
        list(gem_stream(gem))
    assert (overloaded.value.code, overloaded.value.status) == (503, "UNAVAILABLE")
    assert len(gem_fake.requests) == 3  # no retries unless retry_options are configured


def test_gemini_fail_mid_stream_raises_after_the_text(gem_fake, gem):
    gem_fake.script.add([Say("Partial answer"), Fail("The model is overloaded")])
    got: dict = {}
    with pytest.raises(genai_errors.ServerError) as failed:
        gem_collect(gem_stream(gem), got)
    assert "".join(got["pieces"]) == "Partial answer" and got["finish"] is None
    error = failed.value
    assert (error.code, error.status, error.message) == (
        503,
        "UNAVAILABLE",
        "The model is overloaded",
    )

    gem_fake.script.add([Say("Hm"), Fail("Bad", "INVALID_ARGUMENT")])
    with pytest.raises(genai_errors.ClientError) as client_side:
        list(gem_stream(gem))
    assert (client_side.value.code, client_side.value.status) == (400, "INVALID_ARGUMENT")


def test_gemini_request_body_and_headers_are_recorded(gem_fake, gem):
    gem_fake.script.add([Say("Hi")])
    list(gem_stream(gem, temperature=0.2, max_output_tokens=500))
    body = gem_fake.requests[0]
    assert body["systemInstruction"] == {"parts": [{"text": "You are Monark."}], "role": "user"}
    assert body["contents"] == [{"parts": [{"text": "Hi"}], "role": "user"}]
    declaration = body["tools"][0]["functionDeclarations"][0]
    assert declaration["name"] == "records_list"
    # The SDK passes FunctionDeclaration through in snake case (the API accepts both).
    assert declaration["parameters_json_schema"] == LOOKUP_TOOL["function"]["parameters"]
    assert body["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 500}
    assert gem_fake.headers[0]["x-goog-api-key"] == "gm-test"
    assert gem_fake.paths == ["POST /v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"]

    beta = genai.Client(
        api_key="gm-test", http_options={"base_url": gem_fake.url, "api_version": "v1beta"}
    )
    assert gem_collect(gem_stream(beta))["text"] == "OK"  # an exhausted script says OK
    assert (
        gem_fake.paths[-1] == "POST /v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )


def test_gemini_models_list(gem_fake, gem):
    models = list(gem.models.list(config={"page_size": 2}))  # types.Model, paged by the SDK
    assert [m.name for m in models] == [
        "models/gemini-2.5-pro",
        "models/gemini-2.5-flash",
        "models/gemini-2.0-flash-lite",
        "models/text-embedding-004",
        "models/imagen-4.0-generate-001",
    ]
    chat = [m.name for m in models if "generateContent" in (m.supported_actions or [])]
    assert chat == [m.name for m in models[:3]]  # supportedGenerationMethods -> supported_actions
    assert models[1].input_token_limit == 1048576 and models[1].display_name == "Gemini 2.5 Flash"
    assert gem_fake.paths[:2] == [
        "GET /v1/models?pageSize=2",
        "GET /v1/models?pageSize=2&pageToken=2",
    ]
    assert gem.models.get(model="gemini-2.5-pro").output_token_limit == 65536
    gem_fake.models_error = HttpFail(400, "API key not valid. Please pass a valid API key.")
    with pytest.raises(genai_errors.ClientError) as denied:
        list(gem.models.list())
    assert denied.value.message.startswith("API key not valid")


def test_gemini_broken_calls(gem_fake, gem):
    gem_fake.script.add([Say("Let me"), Call("records_list", "{not json")])
    chunks = list(gem_stream(gem))
    assert "".join(c.text or "" for c in chunks) == "Let me"
    last = chunks[-1].candidates[0]
    assert last.finish_reason == gtypes.FinishReason.MALFORMED_FUNCTION_CALL
    assert last.content is None  # nothing of the call reaches the client

    gem_fake.script.add([Call("", {"model": "tasks"}), Call(None, '{"model": "tasks"}')])
    calls = gem_collect(gem_stream(gem))["calls"]
    assert [(p.function_call.name, p.function_call.args) for p in calls] == [
        ("", {"model": "tasks"}),
        (None, {"model": "tasks"}),
    ]


def test_gemini_non_streaming_generate_content_plays_the_same_step(gem_fake, gem):
    gem_fake.script.add([Say("Let me look."), Call("records_list", {"model": "tasks"})])
    response = gem.models.generate_content(
        model="gemini-2.5-flash", contents="Hi", config=gem_config()
    )
    parts = response.candidates[0].content.parts
    assert parts[0].text == "Let me look."
    assert parts[1].function_call.args == {"model": "tasks"}
    assert response.usage_metadata.candidates_token_count == 8
    assert gem_fake.paths == ["POST /v1/models/gemini-2.5-flash:generateContent"]


@pytest.mark.realtime
def test_gemini_hung_provider_times_out(gem_fake):
    gem_fake.hang = threading.Event()
    client = genai.Client(
        api_key="gm-test",
        http_options={"base_url": gem_fake.url, "timeout": 300},  # ms
    )
    with pytest.raises(httpx2.TimeoutException):  # the SDK lets httpx2's error through
        list(gem_stream(client))


# ---- both -----------------------------------------------------------------------------


def test_one_script_means_the_same_to_both_fakes(oai_fake, oai, gem_fake, gem):
    steps = [
        [Say("Let me check."), Call("records_list", {"model": "tasks"}, id="call_1")],
        [Say("Done: 3 tasks.")],
        [Say("Sorry,"), Fail("Overloaded")],
    ]
    oai_fake.script = Script(*steps)
    gem_fake.script = Script(*steps)
    expected = [("Let me check.", [("records_list", {"model": "tasks"})]), ("Done: 3 tasks.", [])]
    for want_text, want_calls in expected:
        o = oai_collect(oai_stream(oai))
        g = gem_collect(gem_stream(gem))
        assert o["text"] == g["text"] == want_text
        o_calls = [(c["name"], json.loads("".join(c["args"]))) for c in o["calls"].values()]
        g_calls = [(p.function_call.name, p.function_call.args) for p in g["calls"]]
        assert o_calls == g_calls == want_calls
        assert (o["finish"], g["finish"]) == (
            ("tool_calls", gtypes.FinishReason.STOP) if want_calls else ("stop", "STOP")
        )
    o_got: dict = {}
    g_got: dict = {}
    with pytest.raises(openai.APIError):
        oai_collect(oai_stream(oai), o_got)
    with pytest.raises(genai_errors.APIError):
        gem_collect(gem_stream(gem), g_got)
    assert "".join(o_got["pieces"]) == "".join(g_got["pieces"]) == "Sorry,"


@pytest.mark.parametrize("kind", ["openai", "gemini"])
def test_gate_holds_each_chunk_so_tokens_can_be_watched_arriving(kind, oai_fake, gem_fake):
    fake: Any = oai_fake if kind == "openai" else gem_fake
    fake.gate = threading.Event()
    fake.script.add([Say("one two three")])
    seen: list[str] = []

    def consume() -> None:
        if kind == "openai":
            client = openai.OpenAI(api_key="k", base_url=oai_fake.base_url, max_retries=0)
            for chunk in oai_stream(client):
                if chunk.choices and chunk.choices[0].delta.content:
                    seen.append(chunk.choices[0].delta.content)
        else:
            client = genai.Client(api_key="k", http_options={"base_url": gem_fake.url})
            seen.extend(c.text for c in gem_stream(client) if c.text)

    reader = threading.Thread(target=consume)
    reader.start()
    time.sleep(0.2)
    assert seen == []  # the request was answered, but each piece waits for the gate
    fake.gate.set()
    reader.join(5)
    assert seen == ["one ", "two ", "three"]
