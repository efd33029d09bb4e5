"""A fake OpenAI Chat Completions API on loopback, speaking the real streaming wire format.

Point the real ``openai`` SDK at it with ``base_url=fake.base_url`` (``<url>/v1``); routes
work with or without the ``/v1`` prefix. It plays a ``Script`` (see ``llm_script``), records
every generation request body and header, and can pause between chunks like FakeAnthropic.

Routes:
  POST [/v1]/chat/completions   ``stream: true`` -> SSE ``data: {chat.completion.chunk}``
                                lines ending with ``data: [DONE]``; otherwise one
                                ``chat.completion`` JSON object (the same step, aggregated).
  GET  [/v1]/models             ``{"object": "list", "data": [{id, object, created, owned_by}]}``
  GET  [/v1]/models/{id}        one model, or 404.

How a step is played when streaming:
  * a role chunk first (``delta: {"role": "assistant", "content": ""}``), or, when the step
    opens with a call, the role rides on the first tool-call chunk (``content: null``);
  * ``Say`` -> one ``delta.content`` chunk per piece;
  * ``Call`` -> ``delta.tool_calls[0] = {index, id, type: "function", function: {name,
    arguments: ""}}``, then the arguments (compact JSON) in ``arg_chunk``-sized pieces, each
    ``{index, function: {arguments}}``. Each call in a step gets the next ``index`` (parallel
    tool calls);
  * a closing chunk ``delta: {}`` with ``finish_reason`` "tool_calls" (the step has a call) or
    "stop" (or ``fake.finish_reason`` when set, e.g. "length");
  * with ``stream_options.include_usage``: every chunk carries ``"usage": null`` and one more
    chunk follows with ``choices: []`` and the usage;
  * ``Fail`` -> ``data: {"error": {"message", "type", "param": null, "code": null}}`` and the
    stream ends (no [DONE]); the SDK raises ``openai.APIError`` from the iterator;
  * ``HttpFail`` -> the request fails with that status and ``{"error": {"message", "type",
    "param", "code"}}`` (the SDK retries 408/409/429/5xx, each retry taking the next step).

Broken calls, sent exactly as given (OpenAI-compatible servers and cut-off streams do this):
  * ``Call("f", "{not json")`` - a ``str`` input is sent verbatim as ``function.arguments``
    (``Call.input`` is typed as a dict, but any str works: a cut-off ``'{"q": "ab'`` too);
  * ``Call("", {...})`` sends ``"name": ""``; ``Call(None, ...)`` sends no ``name`` key;
  * ``Call("f", {...}, id="")`` (or ``id=None``) sends no ``id`` key.

Usage: ``fake.usage`` holds ``prompt_tokens`` (includes the cached part, as OpenAI counts it)
and ``cached_tokens`` (sent as ``prompt_tokens_details.cached_tokens``);
``completion_tokens`` is counted (one per text piece, five per call) unless set there.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fake_server import LoopbackServer
from tests.llm_script import Call, Fail, HttpFail, Say, Script

DEFAULT_MODELS = ["gpt-5", "gpt-4.1-mini", "text-embedding-3-small", "whisper-1", "dall-e-3"]

# Machine-readable ``code`` values OpenAI sends with these statuses.
_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


def _arguments(call: Call) -> str:
    if isinstance(call.input, str):
        return call.input
    return json.dumps(call.input, separators=(",", ":"))


def _error_body(message: str, type_: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


class FakeOpenAI(LoopbackServer):
    def __init__(self, script: Script | None = None, chunk_delay: float = 0.0):
        self.script = script or Script()
        self.chunk_delay = chunk_delay
        self.requests: list[dict[str, Any]] = []  # chat completion bodies, in order
        self.headers: list[dict[str, str]] = []  # their headers, lower-cased names
        self.paths: list[str] = []  # every request seen, as "METHOD /path?query"
        self.usage: dict[str, Any] = {"prompt_tokens": 210, "cached_tokens": 90}
        self.models: list[str] = list(DEFAULT_MODELS)
        self.models_error: HttpFail | None = None  # when set, GET /models fails with it
        self.finish_reason: str | None = None  # overrides "stop"/"tool_calls" when set
        self.arg_chunk = 7  # tool-call arguments arrive in pieces of this many characters
        self.gate: threading.Event | None = None  # when set, each chunk waits for it
        # When set, a request is accepted and then answered only once this is set (a hung
        # provider): nothing at all is sent back until then.
        self.hang: threading.Event | None = None
        super().__init__(self._handler())

    @property
    def base_url(self) -> str:
        """What to give ``OpenAI(base_url=...)``: the URL with the ``/v1`` the SDK expects."""
        return f"{self.url}/v1"

    # ---- the HTTP side ------------------------------------------------------------------

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _route(self) -> str:
                path = self.path.split("?", 1)[0].rstrip("/")
                return path[3:] if path.startswith("/v1/") else path

            def _begin(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                fake.paths.append(f"{self.command} {self.path}")
                if fake.hang is not None:
                    fake.hang.wait(120)
                return raw

            def do_GET(self) -> None:
                self._begin()
                route = self._route()
                if route == "/models" or route.startswith("/models/"):
                    if fake.models_error is not None:
                        self._fail(fake.models_error)
                        return
                    if route == "/models":
                        data = [fake._model(m) for m in fake.models]
                        self._json(200, {"object": "list", "data": data})
                        return
                    model_id = route[len("/models/") :]
                    if model_id in fake.models:
                        self._json(200, fake._model(model_id))
                        return
                    message = f"The model '{model_id}' does not exist"
                    self._json(404, _error_body(message, "invalid_request_error", _CODES[404]))
                    return
                self._not_found()

            def do_POST(self) -> None:
                raw = self._begin()
                if self._route() != "/chat/completions":
                    self._not_found()
                    return
                body = json.loads(raw or b"{}")
                fake.requests.append(body)
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                step = fake.script.next()
                failure = next((i for i in step if isinstance(i, HttpFail)), None)
                if failure is not None:
                    self._fail(failure)
                    return
                if not body.get("stream"):
                    fake._complete(self, body, step)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    fake._stream(self, body, step)
                self.close_connection = True

            def _not_found(self) -> None:
                message = f"Invalid URL ({self.command} {self.path})"
                self._json(404, _error_body(message, "invalid_request_error"))

            def _fail(self, failure: HttpFail) -> None:
                code = _CODES.get(failure.status)
                message = failure.said(self.headers)
                self._json(failure.status, _error_body(message, failure.type, code))

            def _json(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-request-id", f"req_fake_{len(fake.paths)}")
                self.end_headers()
                self.wfile.write(data)

        return Handler

    @staticmethod
    def _model(model_id: str) -> dict:
        owner = "openai" if model_id.startswith(("gpt", "dall")) else "openai-internal"
        return {"id": model_id, "object": "model", "created": 1700000000, "owned_by": owner}

    def _pause(self) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        if self.chunk_delay:
            time.sleep(self.chunk_delay)

    def _usage(self, step: list) -> dict:
        output = self.usage.get("completion_tokens")
        if output is None:
            output = sum(len(i.pieces()) for i in step if isinstance(i, Say))
            output += 5 * sum(1 for i in step if isinstance(i, Call))
        prompt = self.usage.get("prompt_tokens", 0)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
            "prompt_tokens_details": {
                "cached_tokens": self.usage.get("cached_tokens", 0),
                "audio_tokens": 0,
            },
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def _finish(self, step: list) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if any(isinstance(i, Call) for i in step) else "stop"

    def _stream(self, handler: BaseHTTPRequestHandler, body: dict, step: list) -> None:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        envelope = {
            "id": f"chatcmpl-fake{len(self.requests)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }

        def send(payload: dict | str) -> None:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            handler.wfile.write(f"data: {data}\n\n".encode())
            handler.wfile.flush()

        def chunk(delta: dict, finish_reason: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            payload = {**envelope, "choices": [choice]}
            if include_usage:
                payload["usage"] = None
            send(payload)

        role_pending = True
        if not step or not isinstance(step[0], Call):
            chunk({"role": "assistant", "content": "", "refusal": None})
            role_pending = False
        index = 0
        for item in step:
            if isinstance(item, Say):
                for piece in item.pieces():
                    self._pause()
                    chunk({"content": piece})
            elif isinstance(item, Call):
                self._pause()
                function: dict[str, Any] = {"arguments": ""}
                if item.name is not None:
                    function = {"name": item.name, "arguments": ""}
                head: dict[str, Any] = {"index": index}
                if item.id:
                    head["id"] = item.id
                head.update({"type": "function", "function": function})
                delta: dict[str, Any] = {"tool_calls": [head]}
                if role_pending:
                    delta = {"role": "assistant", "content": None, **delta, "refusal": None}
                    role_pending = False
                chunk(delta)
                raw = _arguments(item)
                for start in range(0, len(raw), max(1, self.arg_chunk)):
                    piece = raw[start : start + self.arg_chunk]
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                index += 1
            elif isinstance(item, Fail):
                self._pause()
                send(
                    {
                        "error": {
                            "message": item.message,
                            "type": item.type,
                            "param": None,
                            "code": None,
                        }
                    }
                )
                return
        chunk({}, self._finish(step))
        if include_usage:
            send({**envelope, "choices": [], "usage": self._usage(step)})
        send("[DONE]")

    def _complete(self, handler: Any, body: dict, step: list) -> None:
        """A non-streaming answer: the whole step as one ``chat.completion``."""
        fail = next((i for i in step if isinstance(i, Fail)), None)
        if fail is not None:
            handler._json(500, _error_body(fail.message, fail.type))
            return
        text = "".join(i.text for i in step if isinstance(i, Say))
        calls = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments(c)},
            }
            for c in step
            if isinstance(c, Call)
        ]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text or None,
            "refusal": None,
            "annotations": [],
        }
        if calls:
            message["tool_calls"] = calls
        handler._json(
            200,
            {
                "id": f"chatcmpl-fake{len(self.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": self._finish(step),
                    }
                ],
                "usage": self._usage(step),
                "service_tier": "default",
                "system_fingerprint": "fp_fake",
            },
        )
