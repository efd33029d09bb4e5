"""A fake Gemini API (generativelanguage) on loopback, speaking the real streaming wire format.

Point the real ``google-genai`` SDK at it with
``genai.Client(api_key=..., http_options={"base_url": fake.url})``. It plays a ``Script``
(see ``llm_script``), records every generation request body and header, and can pause
between chunks like FakeAnthropic. Any API version prefix works (the SDK sends ``/v1`` by
default, ``/v1beta`` with ``api_version="v1beta"``).

Routes:
  POST /{version}/models/{model}:streamGenerateContent?alt=sse
        -> SSE ``data: {GenerateContentResponse}`` events (CRLF separated); without
           ``alt=sse``, one JSON array of the same responses.
  POST /{version}/models/{model}:generateContent  -> the step as one response.
  GET  /{version}/models[?pageSize=&pageToken=]    -> ``{"models": [...], "nextPageToken"}``
  GET  /{version}/models/{model}                  -> one model, or 404.

How a step is played when streaming (each chunk is a whole GenerateContentResponse):
  * ``Say`` -> one chunk per piece: ``candidates[0].content.parts = [{"text": piece}]``;
  * ``Call``s -> one chunk holding every consecutive call as ``parts[i].functionCall =
    {"name", "args"}``, whole (Gemini never splits arguments). No ``id`` unless
    ``fake.call_ids`` is set; the first call part carries a ``thoughtSignature`` (base64)
    as thinking models send, which a client must echo back in the history;
  * the last content chunk carries ``finishReason: "STOP"`` (also after function calls) or
    ``fake.finish_reason`` when set (e.g. "MAX_TOKENS");
  * every chunk carries ``usageMetadata`` with running totals: ``promptTokenCount``
    (includes the cached part, as Gemini counts it), ``cachedContentTokenCount``,
    ``candidatesTokenCount`` (one per text piece, five per call), ``totalTokenCount``;
  * ``Fail`` -> ``data: {"error": {"code", "message", "status"}}`` and the stream ends; the
    SDK raises ``errors.ServerError`` (5xx codes) or ``errors.ClientError`` (4xx);
  * ``HttpFail(status, ...)`` -> that status with ``{"error": {"code", "message", "status"}}``.
  Error ``status`` is the script's ``type`` when it is already a Google status (upper case,
  e.g. "RESOURCE_EXHAUSTED"); otherwise it is derived (``overloaded_error`` -> 503
  UNAVAILABLE for a Fail; the HTTP status's canonical name for an HttpFail).

Broken calls:
  * ``Call("f", "{not json")`` - a ``str`` input that is not a JSON object cannot go on
    Gemini's wire, so the fake does what Gemini does with a call it could not form: that chunk
    has no content and ``finishReason: "MALFORMED_FUNCTION_CALL"`` with a ``finishMessage``,
    and the step ends there. A ``str`` input that is a JSON object is sent as ``args``;
  * ``Call("", {...})`` sends ``"name": ""``; ``Call(None, ...)`` sends no ``name`` key.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fake_server import LoopbackServer
from tests.llm_script import Call, Fail, HttpFail, Say, Script

DEFAULT_MODELS: list[dict[str, Any]] = [
    {
        "name": "models/gemini-2.5-pro",
        "displayName": "Gemini 2.5 Pro",
        "inputTokenLimit": 1048576,
        "outputTokenLimit": 65536,
        "supportedGenerationMethods": ["generateContent", "countTokens", "createCachedContent"],
        "thinking": True,
    },
    {
        "name": "models/gemini-2.5-flash",
        "displayName": "Gemini 2.5 Flash",
        "inputTokenLimit": 1048576,
        "outputTokenLimit": 65536,
        "supportedGenerationMethods": ["generateContent", "countTokens", "createCachedContent"],
        "thinking": True,
    },
    {
        "name": "models/gemini-2.0-flash-lite",
        "displayName": "Gemini 2.0 Flash-Lite",
        "inputTokenLimit": 1048576,
        "outputTokenLimit": 8192,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
    },
    {
        "name": "models/text-embedding-004",
        "displayName": "Text Embedding 004",
        "inputTokenLimit": 2048,
        "outputTokenLimit": 1,
        "supportedGenerationMethods": ["embedContent"],
    },
    {
        "name": "models/imagen-4.0-generate-001",
        "displayName": "Imagen 4",
        "inputTokenLimit": 480,
        "outputTokenLimit": 8192,
        "supportedGenerationMethods": ["predict"],
    },
]

# Canonical Google status names for HTTP statuses, and for the script's (Anthropic-style)
# mid-stream error types.
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_FAIL_CODES = {
    "overloaded_error": 503,
    "rate_limit_error": 429,
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "timeout_error": 504,
}
_CODES_BY_NAME = {name: code for code, name in _STATUS_NAMES.items()}

_GENERATE = re.compile(r"^/([^/]+)/models/([^/:]+):(streamGenerateContent|generateContent)$")
_MODELS = re.compile(r"^/([^/]+)/models(?:/([^/:]+))?$")


def _google_status(type_: str) -> str | None:
    return type_ if re.fullmatch(r"[A-Z_]+", type_ or "") else None


def _error_body(code: int, message: str, status: str) -> dict:
    return {"error": {"code": code, "message": message, "status": status}}


class FakeGemini(LoopbackServer):
    def __init__(self, script: Script | None = None, chunk_delay: float = 0.0):
        self.script = script or Script()
        self.chunk_delay = chunk_delay
        self.requests: list[dict[str, Any]] = []  # generate bodies, in order
        self.headers: list[dict[str, str]] = []  # their headers, lower-cased names
        self.paths: list[str] = []  # every request seen, as "METHOD /path?query"
        self.usage: dict[str, Any] = {"promptTokenCount": 210, "cachedContentTokenCount": 90}
        self.models: list[dict[str, Any]] = [dict(m) for m in DEFAULT_MODELS]
        self.models_error: HttpFail | None = None  # when set, GET /models fails with it
        self.finish_reason: str | None = None  # overrides "STOP" when set
        self.call_ids = False  # when True, functionCall parts carry the Call's id
        self.gate: threading.Event | None = None  # when set, each chunk waits for it
        # When set, a request is accepted and then answered only once this is set (a hung
        # provider): nothing at all is sent back until then.
        self.hang: threading.Event | None = None
        super().__init__(self._handler())

    # ---- the HTTP side ------------------------------------------------------------------

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _begin(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                fake.paths.append(f"{self.command} {self.path}")
                if fake.hang is not None:
                    fake.hang.wait(120)
                return raw

            def do_GET(self) -> None:
                self._begin()
                url = urlsplit(self.path)
                match = _MODELS.match(url.path.rstrip("/"))
                if match is None:
                    self._not_found()
                    return
                if fake.models_error is not None:
                    self._fail(fake.models_error)
                    return
                if match.group(2) is not None:
                    name = f"models/{match.group(2)}"
                    found = next((m for m in fake.models if m["name"] == name), None)
                    if found is None:
                        message = f"models/{match.group(2)} is not found for API version"
                        self._json(404, _error_body(404, message, "NOT_FOUND"))
                    else:
                        self._json(200, found)
                    return
                query = parse_qs(url.query)
                size = int(query.get("pageSize", ["50"])[0])
                start = int(query.get("pageToken", ["0"])[0] or 0)
                page: dict[str, Any] = {"models": fake.models[start : start + size]}
                if start + size < len(fake.models):
                    page["nextPageToken"] = str(start + size)
                self._json(200, page)

            def do_POST(self) -> None:
                raw = self._begin()
                url = urlsplit(self.path)
                match = _GENERATE.match(url.path)
                if match is None:
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
                model = match.group(2)
                if match.group(3) == "generateContent":
                    fake._complete(self, model, step)
                    return
                sse = parse_qs(url.query).get("alt") == ["sse"]
                self.send_response(200)
                ctype = "text/event-stream" if sse else "application/json"
                self.send_header("Content-Type", f"{ctype}; charset=UTF-8")
                self.send_header("Connection", "close")
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    fake._stream(self, model, step, sse)
                self.close_connection = True

            def _not_found(self) -> None:
                message = f"The requested URL {self.path} was not found on this server."
                self._json(404, _error_body(404, message, "NOT_FOUND"))

            def _fail(self, failure: HttpFail) -> None:
                status = _google_status(failure.type) or _STATUS_NAMES.get(
                    failure.status, "UNKNOWN"
                )
                message = failure.said(self.headers)
                self._json(failure.status, _error_body(failure.status, message, status))

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def _pause(self) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        if self.chunk_delay:
            time.sleep(self.chunk_delay)

    # ---- the step as Gemini responses -----------------------------------------------------

    def _function_call(self, call: Call) -> dict | None:
        """The wire form of a call, or None when its arguments are not a JSON object."""
        args: Any = call.input
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return None
        if not isinstance(args, dict):
            return None
        function: dict[str, Any] = {}
        if self.call_ids and call.id:
            function["id"] = call.id
        if call.name is not None:
            function["name"] = call.name
        function["args"] = args
        return function

    def _events(self, step: list) -> list[tuple[str, Any]]:
        """The step as ("parts", [part...]) / ("malformed", message) / ("fail", Fail)."""
        events: list[tuple[str, Any]] = []
        calls: list[dict] = []

        def flush_calls() -> None:
            if calls:
                events.append(("parts", list(calls)))
                calls.clear()

        for item in step:
            if isinstance(item, Call):
                function = self._function_call(item)
                if function is None:
                    flush_calls()
                    events.append(("malformed", f"Malformed function call: {item.name}"))
                    return events
                part: dict[str, Any] = {"functionCall": function}
                if not calls:
                    signature = f"fake-signature-{len(self.requests)}-{len(events)}"
                    part["thoughtSignature"] = base64.b64encode(signature.encode()).decode()
                calls.append(part)
                continue
            flush_calls()
            if isinstance(item, Say):
                events.extend(("parts", [{"text": piece}]) for piece in item.pieces())
            elif isinstance(item, Fail):
                events.append(("fail", item))
                return events
        flush_calls()
        return events

    def _usage(self, output: int) -> dict:
        prompt = self.usage.get("promptTokenCount", 0)
        usage = {k: v for k, v in self.usage.items() if v is not None}
        usage["promptTokenCount"] = prompt
        usage.setdefault("candidatesTokenCount", output)
        usage.setdefault(
            "totalTokenCount",
            prompt + usage["candidatesTokenCount"] + usage.get("thoughtsTokenCount", 0),
        )
        return usage

    def _envelope(self, model: str, candidate: dict, output: int) -> dict:
        return {
            "candidates": [candidate],
            "usageMetadata": self._usage(output),
            "modelVersion": model,
            "responseId": f"fake-response-{len(self.requests)}",
        }

    @staticmethod
    def _fail_error(fail: Fail) -> dict:
        status = _google_status(fail.type)
        if status is not None:
            code = _CODES_BY_NAME.get(status, 500)
        else:
            code = _FAIL_CODES.get(fail.type, 500)
            status = _STATUS_NAMES[code]
        return _error_body(code, fail.message, status)

    def _responses(self, model: str, step: list):
        """Yields each streamed response (a dict), pausing before each as configured."""
        events = self._events(step)
        last_parts = max((i for i, (kind, _) in enumerate(events) if kind == "parts"), default=-1)
        finished = not any(kind in ("fail", "malformed") for kind, _ in events)
        finish = self.finish_reason or "STOP"
        output = 0
        if not events:
            events = [("parts", [{"text": ""}])]
            last_parts = 0
        for i, (kind, payload) in enumerate(events):
            self._pause()
            if kind == "fail":
                yield self._fail_error(payload)
                return
            if kind == "malformed":
                candidate = {
                    "finishReason": "MALFORMED_FUNCTION_CALL",
                    "finishMessage": payload,
                    "index": 0,
                }
                yield self._envelope(model, candidate, output)
                return
            output += sum(5 if "functionCall" in p else 1 for p in payload)
            candidate = {"content": {"parts": payload, "role": "model"}, "index": 0}
            if finished and i == last_parts:
                candidate["finishReason"] = finish
            yield self._envelope(model, candidate, output)

    def _stream(self, handler: BaseHTTPRequestHandler, model: str, step: list, sse: bool) -> None:
        if not sse:  # the SDK always asks for SSE; without it Google sends one JSON array
            data = json.dumps(list(self._responses(model, step)))
            handler.wfile.write(data.encode())
            return
        for response in self._responses(model, step):
            handler.wfile.write(f"data: {json.dumps(response)}\r\n\r\n".encode())
            handler.wfile.flush()

    def _complete(self, handler: Any, model: str, step: list) -> None:
        """A non-streaming ``generateContent``: the responses merged into one."""
        parts: list[dict] = []
        last: dict | None = None
        for response in self._responses(model, step):
            if "error" in response:
                handler._json(response["error"]["code"], response)
                return
            last = response
            for part in response["candidates"][0].get("content", {}).get("parts", []):
                if parts and "text" in part and set(parts[-1]) == {"text"}:
                    parts[-1] = {"text": parts[-1]["text"] + part["text"]}
                else:
                    parts.append(dict(part))
        assert last is not None
        candidate = dict(last["candidates"][0])
        if parts:
            candidate["content"] = {"parts": parts, "role": "model"}
        handler._json(200, {**last, "candidates": [candidate]})
