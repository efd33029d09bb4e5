"""The development outbox: the mail a deployment without ``MAIL_URL`` wrote, for admins.

Served only where ``monark.core.mail`` allows it (no ``MAIL_URL``, and ``flask run``, debug
or tests). An admin sees the mail of their current org's people only: each recipient a member
of it, someone it invited, or the admin themself (links in mail sign people in: another org's
are not theirs to read).
"""

from __future__ import annotations

import email
import re
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from email.policy import default as default_policy
from email.utils import getaddresses, parsedate_to_datetime

import nh3
from flask import Blueprint, abort, render_template
from markupsafe import Markup
from sqlalchemy import func, select

from monark.core import mail
from monark.core.auth import guard, require_principal
from monark.core.models import Invite, Membership, User
from monark.core.rbac import Principal
from monark.extensions import db

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
    recipients: frozenset[str]


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
        recipients=frozenset(
            address.lower()
            for _, address in getaddresses(
                [str(message[h]) for h in ("To", "Cc", "Bcc") if message[h] is not None]
            )
            if address
        ),
    )


def _people(principal: Principal) -> set[str]:
    """Whose mail the viewer may read: their org's members and invitees, and themself."""
    members = select(func.lower(User.email)).join(Membership, Membership.user_id == User.id)
    members = members.where(Membership.org_id == principal.org_id)
    invited = select(func.lower(Invite.email)).where(Invite.org_id == principal.org_id)
    me = select(func.lower(User.email)).where(User.id == principal.user_id)
    return set(db.session.scalars(members.union(invited, me)))


def _shown(sent: Sent, people: set[str]) -> bool:
    return bool(sent.recipients) and sent.recipients <= people


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
    people = _people(require_principal())
    shown = [sent for sent in map(_read, _names()) if _shown(sent, people)]
    return render_template("dev/outbox.html", messages=shown)


@bp.get("/<name>")
@guard("org.manage")
def message(name: str):
    """One message of the outbox, its HTML part drawn and its text part beside it."""
    _served()
    if not NAME.match(name) or not (mail.state().outbox / name).is_file():
        abort(404)
    sent = _read(name)
    if not _shown(sent, _people(require_principal())):
        abort(404)  # as if it were not there: another org's mail
    return render_template("dev/outbox_message.html", sent=sent)
