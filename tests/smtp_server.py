"""A real SMTP server on loopback (aiosmtpd), keeping what it is sent, for mail tests."""

from __future__ import annotations

import email
import socket
import threading
from email.message import EmailMessage
from email.policy import default as default_policy
from typing import Any, Self

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

USER, PASSWORD = "monark", "s3cret pass"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class SmtpServer:
    """``start()`` on 127.0.0.1; ``messages`` holds each message accepted, parsed.

    ``answers`` are given to DATA one per message, in order (``"451 try later"``,
    ``"550 no such user"``); after them each message is accepted. AUTH takes ``USER`` and
    ``PASSWORD`` only, without TLS (loopback).
    """

    def __init__(self, answers: list[str] | None = None):
        self.answers = list(answers or [])
        self.messages: list[EmailMessage] = []
        self.envelopes: list[Any] = []
        self.logins: list[str] = []
        self.arrived = threading.Condition()
        self.port = _free_port()
        self._controller = Controller(
            self,
            hostname="127.0.0.1",
            port=self.port,
            authenticator=self._authenticate,
            auth_require_tls=False,
        )

    def url(self, scheme: str = "smtp") -> str:
        """The ``MAIL_URL`` of this server, with its credentials."""
        return f"{scheme}://{USER}:{PASSWORD.replace(' ', '%20')}@127.0.0.1:{self.port}"

    def _authenticate(self, server, session, envelope, mechanism, auth_data) -> AuthResult:
        ok = isinstance(auth_data, LoginPassword) and (
            auth_data.login.decode(),
            auth_data.password.decode(),
        ) == (USER, PASSWORD)
        if ok:
            self.logins.append(USER)
        return AuthResult(success=ok)

    async def handle_DATA(self, server, session, envelope) -> str:
        """aiosmtpd's hook: keep the message (or give the next scripted answer)."""
        with self.arrived:
            if self.answers:
                return self.answers.pop(0)
            parsed = email.message_from_bytes(envelope.content, policy=default_policy)
            self.messages.append(parsed)  # type: ignore[arg-type]
            self.envelopes.append(envelope)
            self.arrived.notify_all()
        return "250 OK"

    def start(self) -> Self:
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller.loop.is_running():
            self._controller.stop()
