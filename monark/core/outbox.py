"""The development outbox: the mail a deployment without ``MAIL_URL`` wrote, for admins.

Served only where ``monark.core.mail`` allows it (no ``MAIL_URL``, and ``flask run``, debug
or tests): it shows every org's mail, sign-in links included.
"""

from __future__ import annotations

import email
import re
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from email.policy import default as default_policy
from email.utils import parsedate_to_datetime

import nh3
from flask import Blueprint, abort, render_template
from markupsafe import Markup

from monark.core import mail
from monark.core.auth import guard

bp = Blueprint("outbox", __name__, url_prefix="/dev/outbox")

NAME = re.compile(r"^\d{8}T\d{6}\.\d{6}-[0-9a-f]{8}\.eml$")  # what ``OutboxBackend`` writes
SHOWN = 200  # the newest this many are listed


@dataclass(frozen=True)
class Sent:
    """One message of the outbox, as listed and read."""

    name: str
    subject: str
    to: str
    sender: str
    date: datetime | None
    text: str
    html: Markup


def _read(name: str) -> Sent:
    path = mail.state().outbox / name
    message = email.message_from_bytes(path.read_bytes(), policy=default_policy)
    assert isinstance(message, EmailMessage)
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    try:
        date = parsedate_to_datetime(str(message["Date"]))
    except (TypeError, ValueError):
        date = None
    return Sent(
        name=name,
        subject=str(message["Subject"] or ""),
        to=str(message["To"] or ""),
        sender=str(message["From"] or ""),
        date=date,
        text=text.get_content() if text is not None else "",
        # Drawn inside the page: cleaned like any HTML not written by the page itself.
        html=Markup(nh3.clean(html.get_content())) if html is not None else Markup(""),
    )


def _names() -> list[str]:
    folder = mail.state().outbox
    if not folder.is_dir():
        return []
    names = sorted((p.name for p in folder.iterdir() if NAME.match(p.name)), reverse=True)
    return names[:SHOWN]


def _served() -> None:
    if not mail.state().outbox_page:
        abort(404)


@bp.get("")
@guard("org.manage")
def index():
    """The outbox: the newest messages first, with subject, recipient and date."""
    _served()
    return render_template("dev/outbox.html", messages=[_read(n) for n in _names()])


@bp.get("/<name>")
@guard("org.manage")
def message(name: str):
    """One message of the outbox, its HTML part drawn and its text part beside it."""
    _served()
    if not NAME.match(name) or not (mail.state().outbox / name).is_file():
        abort(404)
    return render_template("dev/outbox_message.html", sent=_read(name))
