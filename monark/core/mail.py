"""Mail: composed from templates in the request, sent by the job queue, with retries.

``send("reset", to, **context)`` renders ``templates/mail/reset.txt`` (which sets
``subject``) and ``reset.html`` into a ``Letter`` and queues it; the ``mail.deliver`` job
hands it to Flask-Mailman's SMTP backend (``MAIL_URL``), or, with no ``MAIL_URL``, to
``OutboxBackend``, which writes one ``.eml`` file per message to the outbox folder
(``monark.core.outbox`` shows them to admins under ``flask run``). A server that is down or
answers "try later" (4xx) is tried again later; a refusal (5xx) is final. Nothing here ever
logs a message's body: it holds sign-in links.
"""

from __future__ import annotations

import logging
import os
import secrets
import smtplib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import Flask, current_app, request, url_for
from flask_mailman import EmailMultiAlternatives, Mail
from flask_mailman.backends.base import BaseEmailBackend

from monark.core import jobs
from monark.core.settings import MailSettings, settings

log = logging.getLogger(__name__)

EXTENSION = "monark.mail"
RETRY_FACTOR = 3.0  # each retry waits this much longer than the one before
_mail = Mail()


@dataclass(frozen=True)
class Letter:
    """One message, rendered: what the job sends (picklable, so it can wait in the queue)."""

    kind: str  # its template's name, for the log
    to: str
    subject: str
    text: str
    html: str
    # The user whose account a link in it acts on (a password reset, an email change): the
    # development outbox shows such mail to almost nobody but that user (``core/outbox``).
    account: int | None = None


KIND_HEADER = "X-Monark-Kind"  # on each message: its kind, and the account it acts on
ACCOUNT_HEADER = "X-Monark-Account"


@dataclass(frozen=True)
class MailState:
    """What ``init_app`` decided: the outbox folder, and whether admins may browse it."""

    outbox: Path
    outbox_page: bool  # no MAIL_URL, under ``flask run``, debug or tests


def init_app(app: Flask) -> MailState:
    """Configure mail for ``app`` and tell templates whether the outbox page is there."""
    made = configure(app)

    @app.context_processor
    def dev_outbox() -> dict[str, bool]:
        return {"dev_outbox": state(app).outbox_page}

    if not settings(app).mail.host and not app.testing:
        log.info("MAIL_URL is not set: mail is written to %s", made.outbox)
    return made


def configure(app: Flask) -> MailState:
    """Set Flask-Mailman up from the app's settings (``MAIL_URL``, or the outbox)."""
    mail = settings(app).mail
    outbox = Path(mail.outbox or os.path.join(app.instance_path, "outbox"))
    app.config.update(
        MAIL_BACKEND="smtp" if mail.host else OutboxBackend,
        MAIL_SERVER=mail.host,
        MAIL_PORT=mail.port,
        MAIL_USERNAME=mail.username or None,
        MAIL_PASSWORD=mail.password or None,
        MAIL_USE_SSL=mail.ssl,
        MAIL_USE_TLS=mail.starttls,
        MAIL_TIMEOUT=mail.timeout,
        MAIL_DEFAULT_SENDER=mail.sender,
    )
    _mail.init_app(app)
    # The page shows every org's mail (sign-in links included): a development aid only,
    # never served by gunicorn, where an org's admin must not read another org's mail.
    developing = app.debug or app.testing or os.environ.get("FLASK_RUN_FROM_CLI") == "true"
    made = MailState(outbox, outbox_page=not mail.host and developing)
    app.extensions[EXTENSION] = made
    return made


def state(app: Flask | None = None) -> MailState:
    """The app's mail state."""
    found = (app if app is not None else current_app).extensions[EXTENSION]
    return found  # type: ignore[no-any-return]


def link(endpoint: str, **values: Any) -> str:
    """An absolute link for a message: on ``PUBLIC_URL`` when set, else this request's host."""
    base = settings().mail.public_url
    if base:
        return base + url_for(endpoint, **values)
    return url_for(endpoint, _external=True, **values)


def sending_base() -> str:
    """The address links are made under, read in the request, for a job that makes links."""
    return settings().mail.public_url or request.host_url.rstrip("/")


@contextmanager
def links_under(base: str) -> Iterator[None]:
    """Make ``link`` work outside a request (in a job), under the address ``base``."""
    with current_app.test_request_context("/", base_url=base):
        yield


def compose(kind: str, to: str, account: int | None = None, **context: Any) -> Letter:
    """Render ``templates/mail/<kind>.txt`` (its ``subject`` set inside) and ``<kind>.html``."""
    env = current_app.jinja_env
    text = env.get_template(f"mail/{kind}.txt").make_module(context)
    html = env.get_template(f"mail/{kind}.html").render(context)
    subject = " ".join(str(getattr(text, "subject", "")).split())  # one line, always
    if not subject:
        raise RuntimeError(f"templates/mail/{kind}.txt sets no subject.")
    body = str(text).strip() + "\n"
    return Letter(kind=kind, to=to, subject=subject, text=body, html=html, account=account)


def send(kind: str, to: str, account: int | None = None, **context: Any) -> Letter:
    """Compose a message and queue it; the job sends it (never this request). ``account``:
    the user whose account its link acts on, if it is such a mail."""
    letter = compose(kind, to, account, **context)
    deliver.enqueue(letter, 1)
    return letter


def _permanent(err: Exception) -> bool:
    """A refusal the server will repeat (5xx), as opposed to "down" or "try later"."""
    if isinstance(err, smtplib.SMTPRecipientsRefused):
        return all(code >= 500 for code, _ in err.recipients.values())
    if isinstance(err, smtplib.SMTPResponseException):
        return err.smtp_code >= 500
    return False


def retry_delay(mail: MailSettings, failed_attempts: int) -> float:
    """Seconds before the next try after ``failed_attempts`` failed ones."""
    return mail.retry_seconds * RETRY_FACTOR ** (failed_attempts - 1)


@jobs.job("mail.deliver")
def deliver(letter: Letter, attempt: int) -> None:
    """Send one message; a failure that may pass is queued again with a growing delay."""
    mail = settings().mail
    try:
        send_now(letter)
    except (OSError, smtplib.SMTPException) as err:  # SMTPException is an OSError too
        if _permanent(err) or attempt >= mail.max_attempts:
            log.error("mail %s not sent after %d tries: %s", letter.kind, attempt, err)
            return
        delay = retry_delay(mail, attempt)
        log.warning("mail %s: try %d failed (%s); next in %.0f s", letter.kind, attempt, err, delay)
        deliver.enqueue(letter, attempt + 1, delay=delay)


def send_now(letter: Letter) -> None:
    """Hand ``letter`` to the configured backend (SMTP or the outbox) at once."""
    message = EmailMultiAlternatives(
        subject=letter.subject,
        body=letter.text,
        from_email=settings().mail.sender,
        to=[letter.to],
        headers={KIND_HEADER: letter.kind}
        | ({ACCOUNT_HEADER: str(letter.account)} if letter.account is not None else {}),
    )
    message.attach_alternative(letter.html, "text/html")
    message.send()


class OutboxBackend(BaseEmailBackend):
    """Flask-Mailman's backend for a deployment without ``MAIL_URL``: each message becomes
    one ``.eml`` file in the outbox folder, written aside and moved into place."""

    def send_messages(self, email_messages: list[Any]) -> int:
        """Write each message to its own file; how many were written."""
        folder = state().outbox
        folder.mkdir(parents=True, exist_ok=True)
        for message in email_messages:
            name = f"{datetime.now(UTC):%Y%m%dT%H%M%S.%f}-{secrets.token_hex(4)}.eml"
            aside = folder / f".{name}.tmp"
            aside.write_bytes(message.message().as_bytes())
            aside.replace(folder / name)
        return len(email_messages)
