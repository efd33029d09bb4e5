"""The development outbox: the mail a deployment without ``MAIL_URL`` wrote, for admins.

Served only where ``monark.core.mail`` allows it (no ``MAIL_URL``, and ``flask run``, debug
or tests). Links in mail sign people in, so an admin sees, of their current org's people only:
- their own mail, all of it;
- the org's invitations (to whoever it invited);
- a member's notifications and digests;
- a member's password-reset or email-change mail only when that account belongs to this org
  alone and ranks no higher than the admin (its link would sign into every org of the account:
  an admin never reads an owner's, nor that of someone who also belongs to another org).
Mail written before messages carried their kind shows to its recipient only.
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
from monark.core.rbac import Principal, roles_up_to
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
    kind: str  # the mail's template, "" when the file does not say
    account: int | None  # the user whose account its link acts on


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
        kind=str(message[mail.KIND_HEADER] or ""),
        account=_account(message[mail.ACCOUNT_HEADER]),
    )


def _account(header: object) -> int | None:
    value = str(header or "")
    return int(value) if value.isdecimal() else None


@dataclass(frozen=True)
class Reader:
    """What the viewer may read of the outbox: computed once per page."""

    user_id: int
    me: str
    members: frozenset[str]
    invited: frozenset[str]
    # Accounts of this org alone, ranked no higher than the viewer: their account mail shows.
    accounts: frozenset[int]

    def may_read(self, sent: Sent) -> bool:
        """Whether the viewer may open ``sent``."""
        if not sent.recipients:
            return False
        if sent.account is not None:  # its link acts on that account
            if sent.account == self.user_id:
                return True
            return sent.account in self.accounts and sent.recipients <= self.members
        if sent.recipients == {self.me}:
            return True
        if sent.kind == "invite":
            return sent.recipients <= self.invited
        if sent.kind in ("notification", "digest"):
            return sent.recipients <= self.members
        return False


def _reader(principal: Principal) -> Reader:
    """The viewer's reach in the outbox (four queries)."""
    me = db.session.scalar(select(func.lower(User.email)).where(User.id == principal.user_id))
    members = select(func.lower(User.email)).join(Membership, Membership.user_id == User.id)
    members = members.where(Membership.org_id == principal.org_id)
    invited = select(func.lower(Invite.email)).where(Invite.org_id == principal.org_id)
    # Of this org alone: one membership in all. Ranked no higher: a role at or below the
    # viewer's (``roles_up_to``: an admin's reach stops at admins, an owner's takes all).
    alone = (
        select(Membership.user_id)
        .group_by(Membership.user_id)
        .having(func.count() == 1)
        .scalar_subquery()
    )
    accounts = select(Membership.user_id).where(
        Membership.org_id == principal.org_id,
        Membership.role.in_(roles_up_to(principal.role)),
        Membership.user_id.in_(alone),
    )
    return Reader(
        user_id=principal.user_id,
        me=me or "",
        members=frozenset(db.session.scalars(members)),
        invited=frozenset(db.session.scalars(invited)),
        accounts=frozenset(db.session.scalars(accounts)),
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
    reader = _reader(require_principal())
    shown = [sent for sent in map(_read, _names()) if reader.may_read(sent)]
    return render_template("dev/outbox.html", messages=shown)


@bp.get("/<name>")
@guard("org.manage")
def message(name: str):
    """One message of the outbox, its HTML part drawn and its text part beside it."""
    _served()
    if not NAME.match(name) or not (mail.state().outbox / name).is_file():
        abort(404)
    sent = _read(name)
    if not _reader(require_principal()).may_read(sent):
        abort(404)  # as if it were not there: another org's mail
    return render_template("dev/outbox_message.html", sent=sent)
