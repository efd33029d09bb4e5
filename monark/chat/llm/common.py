"""What every provider adapter shares, and the provider that explains why none answers."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from contextvars import ContextVar
from typing import Any

from monark.chat.llm.descriptor import ProviderConfig, ProviderDescriptor
from monark.chat.llm.types import TOO_LONG, LlmEvent, LlmRequest, ProviderError, UsageReport
from monark.core.net import public_only_transport


def redact(text: str, secret: str) -> str:
    """``text`` without ``secret``: a provider's error may echo what it was sent (a key)."""
    if secret and secret in text:
        text = text.replace(secret, "[redacted]")
    return text


# How Anthropic, OpenAI (and its clones) and Gemini refuse a request past the model's window.
_TOO_LONG_WORDS = (
    "prompt is too long",
    "exceed context limit",
    "context_length_exceeded",
    "maximum context length",
    "exceeds the maximum number of tokens",
)


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """A tool call's streamed arguments as an object (blank: none), or None if they are not one."""
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except (json.JSONDecodeError, RecursionError):  # nested past what the decoder follows
        return None
    return arguments if isinstance(arguments, dict) else None


def refusal_kind(text: str) -> str:
    """``TOO_LONG`` when the vendor said the request does not fit the model's window."""
    lowered = text.lower()
    return TOO_LONG if any(w in lowered for w in _TOO_LONG_WORDS) else "provider_error"


class StepState:
    """What a stream told so far: its usage (reported even when the stream breaks off)."""

    def __init__(self) -> None:
        self.usage = UsageReport()


class Chunks:
    """A stream's chunks until the turn is stopped (``stopped``), keeping each usage report."""

    def __init__(
        self,
        stream: Any,
        request: LlmRequest,
        state: StepState,
        usage_of: Callable[[Any], UsageReport | None],
    ):
        self.stream, self.request, self.state, self.usage_of = stream, request, state, usage_of
        self.stopped = False

    def __iter__(self) -> Iterator[Any]:
        for chunk in self.stream:
            if self.request.stop.is_set():
                self.stopped = True
                return
            usage = self.usage_of(chunk)
            if usage is not None:
                self.state.usage = usage
            yield chunk


_TURN_STOP: ContextVar[threading.Event | None] = ContextVar("monark_turn_stop", default=None)


class TurnStopped(Exception):
    """Raised by an SDK's HTTP client, instead of sending, for a turn that was stopped."""


def refuse_when_stopped(request: Any) -> None:
    """An httpx request hook: a stopped turn sends nothing more (an SDK's retry of a request
    that timed out would be a call, and a cost, nobody waits for)."""
    stop = _TURN_STOP.get()
    if stop is not None and stop.is_set():
        raise TurnStopped("The turn was stopped; nothing more is sent to the provider.")


# What a request to an org's own endpoint may carry: anything else may be the deployment's,
# from the server's environment (ANTHROPIC_CUSTOM_HEADERS, OPENAI_ORG_ID, …).
ORG_ENDPOINT_HEADERS = frozenset(
    """host content-length content-type accept accept-encoding connection user-agent
    authorization x-api-key x-goog-api-key x-goog-api-client anthropic-version
    anthropic-beta""".split()  # noqa: SIM905
)


def strip_deployment_headers(request: Any) -> None:
    """An httpx request hook: only ``ORG_ENDPOINT_HEADERS`` and ``x-stainless-*`` go out."""
    for name in list(request.headers):
        lowered = name.lower()
        if lowered not in ORG_ENDPOINT_HEADERS and not lowered.startswith("x-stainless-"):
            del request.headers[name]


def http_client_options(public_only: bool, org_endpoint: bool = False) -> dict[str, Any]:
    """Options for an SDK's HTTP client: Stop honoured, no redirects (they would pass the
    address check), public addresses only if asked, nothing of ours to an org's endpoint."""
    hooks = [refuse_when_stopped, *([strip_deployment_headers] if org_endpoint else [])]
    options: dict[str, Any] = {"event_hooks": {"request": hooks}, "follow_redirects": False}
    if public_only:
        options["transport"] = public_only_transport("CHAT_LLM_ALLOW_PRIVATE")
    return options


@contextmanager
def held(provider: Any) -> Iterator[None]:
    """Keep ``provider``'s client open while the block (a turn) runs, even if dropped meanwhile."""
    in_use = getattr(provider, "in_use", None)
    with in_use() if in_use is not None else nullcontext():
        yield


def close_provider(provider: Any) -> None:
    """Close what ``provider`` holds open (an adapter's SDK client), if it holds anything."""
    close = getattr(provider, "close", None)
    if close is not None:
        close()


def body_error_text(err: Exception) -> str:
    """An SDK's HTTP error in plain words: its JSON body's ``error.message``, else its own."""
    body = getattr(err, "body", None)
    detail = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(detail, dict) and detail.get("message"):
        kind = detail.get("type") or detail.get("code")
        return str(detail["message"]) + (f" ({kind})" if kind else "")
    status = getattr(err, "status_code", None)
    text = getattr(err, "message", None) or str(err) or type(err).__name__
    return text + (f" (HTTP {status})" if status else "")


class SdkAdapter:
    """What every adapter shares: its SDK client built on first use, the configuration check,
    Stop, and failures turned into error events, never with the key in them."""

    def __init__(self, descriptor: ProviderDescriptor, config: ProviderConfig):
        self.descriptor = descriptor
        self.config = config
        self.name: str = descriptor.id
        self.api_key = config.api_key
        self._client: Any = None
        self._lock = threading.Lock()
        self._building = threading.Lock()
        self._users = 0  # turns, steps streaming and lists being read on the client now
        self._closing = False

    def make_client(self) -> Any:
        """The SDK client (import the SDK here)."""
        raise NotImplementedError

    def problem(self) -> str | None:
        """Why no reply can come (no key, no endpoint), before anyone sends a message."""
        if not self.descriptor.needs_key or self.api_key:
            return None
        label, env = self.descriptor.label, self.descriptor.key_env
        if self.config.org_endpoint:
            return (
                f"{label} needs an API key: a base URL of the org's own needs a key of its "
                "own, set in Settings."
            )
        on_server = f" (or {env} on the server)" if env else ""
        return f"{label} needs an API key: an admin sets it in Settings{on_server}."

    def http_options(self) -> dict[str, Any]:
        """Options for the SDK's HTTP client (``http_client_options``) of this endpoint."""
        return http_client_options(self.config.public_only, self.config.org_endpoint)

    def open_stream(self, request: LlmRequest) -> Any:
        """Send the request; the SDK's stream of events."""
        raise NotImplementedError

    def read(self, stream: Any, request: LlmRequest, state: StepState) -> Iterator[LlmEvent]:
        """The stream's events as neutral ones (it may raise: the error is reported)."""
        raise NotImplementedError

    def error_text(self, err: Exception) -> str:
        """The SDK's error in plain words."""
        return body_error_text(err)

    def models(self) -> list[str]:
        """The models this key may use, as the endpoint lists them."""
        with self.in_use():
            return sorted(m.id for m in self.client().models.list())

    def _said(self, err: Exception) -> str:
        """The error in plain words; for a failed connection, what failed underneath."""
        text = self.error_text(err)
        cause = err.__cause__
        if "Connection" in type(err).__name__ and cause is not None and str(cause):
            return f"Could not connect to the provider: {cause}"
        return text

    def client(self) -> Any:
        client = self._client
        if client is None:
            # Not ``_lock``, which a turn ending waits for: building can take seconds.
            with self._building:
                client = self._client
                if client is None:
                    client = self.make_client()
                    with self._lock:
                        self._client = client
        return client

    @contextmanager
    def in_use(self) -> Iterator[None]:
        """Keep the client open while the caller uses it (``close`` waits for the end)."""
        with self._lock:
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
            self._close_if_idle()

    def close(self) -> None:
        """Close the SDK client now, or once the turns using it end (a later use builds one)."""
        with self._lock:
            self._closing = True
        self._close_if_idle()

    def _close_if_idle(self) -> None:
        with self._lock:
            if not self._closing or self._users:
                return
            client, self._client = self._client, None
        close_provider(client)

    def unusable(self) -> str | None:
        """What stops a step before it is sent (``problem`` unless said otherwise)."""
        return self.problem()

    def stream(self, request: LlmRequest) -> Iterator[LlmEvent]:
        problem = self.unusable()
        if problem:
            yield ProviderError(problem, kind="configuration")
            return
        # This thread's requests see the turn's Stop (``refuse_when_stopped``).
        token = _TURN_STOP.set(request.stop)
        try:
            with self.in_use():
                yield from self._events(request)
        finally:
            with suppress(ValueError):  # closed from another context (garbage collection)
                _TURN_STOP.reset(token)

    def _events(self, request: LlmRequest) -> Iterator[LlmEvent]:
        try:
            stream = self.open_stream(request)
        except Exception as err:  # building the client, or the request (after retries)
            said = redact(self._said(err), self.api_key)
            yield ProviderError(said, kind=refusal_kind(said))
            return
        state = StepState()
        try:
            yield from self.read(stream, request, state)
        except Exception as err:  # mid-stream (or a refusal, from SDKs that send lazily)
            yield state.usage
            said = redact(self._said(err), self.api_key)
            yield ProviderError(said, kind=refusal_kind(said))
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()


class UnavailableProvider:
    """A provider that only explains why no model can be reached."""

    name = "unavailable"

    def __init__(self, reason: str):
        self.reason = reason

    def problem(self) -> str | None:
        return self.reason

    def stream(self, request: LlmRequest) -> Iterator[LlmEvent]:
        yield ProviderError(self.reason, kind="configuration")
