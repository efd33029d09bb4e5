"""The Approvals inbox: writes handed to a member, and API keys' held writes, decided here.

Its cards' Edit, Save and Cancel are the panel's own endpoints (``monark.assistant.cards``),
which find a request of the member's inbox as well as a proposal of their own.

Views only (parse, check, call a service, render): the services are ``monark.approvals``
(hand-over, the inbox's queries, the decision) and ``monark.api.key_holds``. Every request
is checked in the service too: only members whose role holds the tool's permission see or
decide one, and a request handed to someone else is 404 to everyone else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Blueprint, flash, render_template, request

from monark.api import cut_off, key_holds
from monark.approvals import handover, own_calls
from monark.approvals import inbox as requests
from monark.approvals.decision import Decision
from monark.assistant.card_view import (
    Card,
    Where,
    call_view,
    call_views,
    card_of,
    panel_card,
    user_names,
)
from monark.assistant.stream import partial, render_fragment
from monark.assistant.thread import thread_view
from monark.assistant.verdict import Verdict
from monark.chat.calls import preview_of
from monark.chat.models import Conversation, ConversationKind, ToolCall
from monark.chat.runtime import tool_executor
from monark.core.auth import guard, require_principal
from monark.core.errors import AppError, Conflict, NotFound, ValidationFailed
from monark.core.htmx import is_htmx
from monark.core.ids import parse_id
from monark.core.rbac import Principal
from monark.core.web import page_principal, see_other
from monark.extensions import db

bp = Blueprint("approvals", __name__)


@bp.app_context_processor
def _approvals_badge() -> dict[str, Any]:
    """The header's Approvals link shows how many requests wait for the signed-in member
    (one query: the inbox itself is built only on its page)."""
    principal = page_principal()
    if principal is None or principal.user_id is None:
        return {}
    return {"approvals_count": requests.inbox_count(principal, tool_executor())}


@dataclass
class Request:
    """One inbox entry: the card, and who asks (a member via the assistant, or a key)."""

    card: Card
    asked_by: str
    via: str  # "assistant" | "api_key"
    asked_at: Any
    note: str | None = None  # why it is asked again, when it is


def _preview_as(principal: Principal, call: ToolCall, conversation: Conversation):
    """A key's held write was drawn as the key, whose role may see records the member may
    not (another member's private one, say): its card is drawn again as the member, so it
    shows only what they could read. None: the stored card (a member's hand-over)."""
    if conversation.kind != ConversationKind.API:
        return None
    return preview_of(tool_executor(), principal.via_assistant(conversation.id), call)


def inbox_card(principal: Principal, call: ToolCall, conversation: Conversation) -> Card:
    """A request's card as this member may read it."""
    view = call_view(call, preview=_preview_as(principal, call, conversation))
    return card_of(view, Where.INBOX, reader=principal.user_id)


def _entries(principal: Principal, rows: list[tuple[ToolCall, Conversation]]) -> list[Request]:
    """The inbox's entries, their cards' facts read for all of them at once."""
    calls = [c for c, _ in rows]
    previews = {c.id: p for c, conv in rows if (p := _preview_as(principal, c, conv))}
    views = call_views(calls, previews=previews)
    names = user_names({c.handed_by_id for c in calls if c.handed_by_id})
    entries = []
    for (call, conversation), view in zip(rows, views, strict=True):
        card = card_of(view, Where.INBOX, reader=principal.user_id)
        if conversation.kind == ConversationKind.API:
            note = cut_off.asked_again_note(call)
            entries.append(Request(card, conversation.title, "api_key", call.created_at, note))
        else:
            asker = names.get(call.handed_by_id or 0, "a member")
            entries.append(Request(card, asker, "assistant", call.handed_at))
    return entries


@bp.get("/approvals")
@guard()
def inbox():
    """The signed-in member's pending approval requests, each with its full card."""
    principal = require_principal()
    cut_off.settle(principal.org_id)  # a decision whose process died: asked again now
    rows = requests.inbox(principal, tool_executor())
    return render_template(
        "approvals/inbox.html",
        requests=_entries(principal, rows),
        partial_badge=is_htmx(),
    )


@bp.post("/approvals/<int:call_id>/decide")
@guard()
def decide(call_id: int):
    """Confirm (run the write as the approver, or as the key) or reject a request."""
    principal = require_principal()
    verdict = Verdict.of(request.form.get("decision"))
    if verdict is None:
        raise ValidationFailed(
            "Choose Confirm or Reject.", [{"field": "decision", "message": "confirm or reject"}]
        )
    executor = tool_executor()
    _, conversation = requests.get_request(principal, executor, call_id)
    confirm, reason = verdict == Verdict.CONFIRM, request.form.get("reason", "")
    shown = request.form.get("shown") or None
    try:
        if conversation.kind == ConversationKind.API:
            decided = key_holds.decide(principal, call_id, confirm, reason, shown=shown)
        else:
            decision = Decision(confirm, reason, {call_id: shown} if shown else {})
            decided = handover.approve(principal, call_id, decision, executor)
    except AppError as err:
        db.session.rollback()
        flash(err.message, "error")
        return see_other("approvals.inbox")
    card = inbox_card(principal, decided, conversation).call
    if decided.status == "REJECTED":
        flash(f"Rejected: {card.headline}.", "info")
    elif decided.status == "SUCCEEDED":
        flash(f"Confirmed and done: {card.headline}.", "info")
    else:
        why = (decided.error or card.status_text).rstrip(".")
        flash(f"Confirmed, but it failed: {why}.", "error")
    return see_other("approvals.inbox")


@bp.post("/chat/calls/<int:call_id>/hand-over")
@guard("chat.use")
def hand_over(call_id: int):
    """ "Ask someone to approve": hand the requester's proposed write to a member who holds
    its permission; answers the card, now waiting for them."""
    principal = require_principal()
    error, status = None, 200
    try:
        approver_id = parse_id(request.form.get("approver_id", ""), "approver_id")
        handover.hand_over(principal, call_id, approver_id, tool_executor())
    except ValidationFailed as err:
        error, status = err.detail_text(), 422
    except NotFound:
        raise
    except Conflict as err:  # handed already, decided, expired: the card says what it is
        error, status = err.message, 409
    except AppError as err:
        error, status = err.message, 422
    db.session.rollback()
    call = own_calls.get_tool_call(principal, call_id)
    card = render_template("assistant/_call.html", card=panel_card(call, handover_error=error))
    if error is not None:
        return card, status
    # Handed over: the foot says whom it waits for, and the panel waits for their decision.
    thread = thread_view(principal, call.conversation_id)
    foot = render_fragment(
        "assistant/_thread_foot.html", foot=thread.foot, following=False, notice=None
    )
    waits = render_fragment(
        "assistant/_await.html", foot=thread.foot, conversation_id=call.conversation_id
    )
    return (
        card
        + partial("#chat-thread-foot", "outerHTML", foot)
        + partial("#chat-await-slot", "innerHTML", waits)
    )
