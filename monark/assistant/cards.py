"""A write card's own endpoints, one set for the panel and the Approvals inbox: Edit (a
form from the tool's schema), saving it, the card again (Cancel), and one decision on a
group of writes a step proposed together.

A card's endpoints find the call as the signed-in member may reach it: a proposal of their
own conversation (drawn as the panel draws it), or else a request of their inbox (handed to
them, or an API key's held write; drawn as the inbox draws it). Views on the assistant's
blueprint (``monark.assistant.views.bp``); the factory imports this module so they are
registered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import flash, render_template, request

from monark.api import key_holds
from monark.approvals import expiry, handover, own_calls
from monark.approvals import inbox as requests
from monark.approvals import service as approvals
from monark.approvals.decision import ProposalChanged
from monark.approvals.edits import edit_schema
from monark.approvals.expiry import expired_message
from monark.assistant.card_view import Card, Where, panel_card
from monark.assistant.edit_form import build_fields, read_form
from monark.assistant.inbox import inbox_card
from monark.assistant.stream import partial, sse
from monark.assistant.thread import branch_spot, message_view
from monark.assistant.verdict import PanelDecision
from monark.assistant.views import _busy, _notice, _start, bp, decision_post
from monark.chat.models import Conversation, ToolCall
from monark.chat.runtime import tool_executor
from monark.core.auth import guard, require_principal
from monark.core.errors import AppError, Conflict, NotFound, ValidationFailed
from monark.core.ids import parse_id
from monark.core.rbac import Principal
from monark.core.web import see_other
from monark.extensions import db

CANNOT_EDIT = "This action cannot be edited any more: it was decided, or it has nothing to edit."
STILL_EDITING = (
    "Save or cancel the change you are editing first: Confirm selected would otherwise "
    "reject it, as it has no tick while its form is open."
)
HANDED_BACK = "Edited and handed back: the member who asked confirms it now."


def card_html(call: ToolCall) -> str:
    """A card drawn alone in the panel, as it stands in its thread (in its group, when its
    step's writes wait together)."""
    return render_template("assistant/_call.html", card=panel_card(call))


@dataclass(frozen=True)
class Target:
    """A card's call as the member reaches it: their own (the panel), or a request of
    their inbox (with its conversation)."""

    call: ToolCall
    where: Where
    conversation: Conversation | None = None

    def card(self, principal: Principal) -> Card:
        if self.where == Where.INBOX:
            return inbox_card(principal, self.call, self.conversation)
        return panel_card(self.call)

    def html(self, principal: Principal) -> str:
        return render_template("assistant/_call.html", card=self.card(principal))


def _target(principal: Principal, call_id: int) -> Target:
    """The call of a card's endpoint: one of the member's own proposals, or else one of
    their inbox's requests (``NotFound``; ``Forbidden`` when their role may not decide it)."""
    try:
        call = own_calls.get_tool_call(principal, call_id)
    except NotFound:
        call, conversation = requests.get_request(principal, tool_executor(), call_id)
        return Target(call, Where.INBOX, conversation)
    principal.require("chat.use")
    return Target(call, Where.PANEL)


def _edit_form(
    principal: Principal,
    target: Target,
    schema: dict[str, Any],
    errors: dict[str, str] | None = None,
    error: str | None = None,
    shown: Any = None,
    status: int = 200,
):
    call = target.call
    card = target.card(principal)
    fields = build_fields(schema, call.input, errors, shown, scope=str(call.id))
    html = render_template(
        "assistant/_edit.html", c=card.call, fields=fields, error=error, group_id=card.group_id
    )
    return html, status


def _refused(principal: Principal, target: Target, message: str):
    notice, status = _notice(message, 409)
    return target.html(principal) + notice, status


def _edit_target(principal: Principal, call_id: int):
    """The call to edit and its edit schema, or the answer that refuses it (another's
    handed-over card, a decided call, nothing to edit)."""
    target = _target(principal, call_id)
    call = target.call
    if target.where == Where.PANEL:
        try:
            handover.check_may_edit(principal, call)  # handed over: the approver's to edit
        except Conflict as err:
            return target, None, _refused(principal, target, err.message)
        schema = approvals.edit_schema_of(principal, call_id)
    else:
        schema = None
        if call.status == "PROPOSED":
            key_holds.check_editor_could_make_it(principal, call, target.conversation)
            actor = principal.via_assistant(call.conversation_id)
            schema = edit_schema(tool_executor(), actor, call.name, dict(call.input))
    if schema is None:
        return target, None, _refused(principal, target, CANNOT_EDIT)
    return target, schema, None


@bp.get("/calls/<int:call_id>/edit")
@guard()
def edit_call(call_id: int):
    """The edit form of a proposed write, in place of its card."""
    principal = require_principal()
    target, schema, refused = _edit_target(principal, call_id)
    if refused is not None:
        return refused
    return _edit_form(principal, target, schema)


def _save(principal: Principal, target: Target, arguments: dict[str, Any]) -> None:
    """Store the edit: the requester's under their turn, or the approver's."""
    call = target.call
    if target.where == Where.PANEL:
        approvals.edit_tool_call(principal, call.id, arguments)
        return
    if expiry.is_expired(call):
        raise expiry.ProposalExpired(expired_message())
    key_holds.edit_request(principal, call, target.conversation, arguments)


@bp.post("/calls/<int:call_id>/edit")
@guard()
def save_edit(call_id: int):
    """Store the edited arguments (checked by the route's own models) and draw the card
    again from them; the call stays proposed, and Confirm runs what the card shows."""
    principal = require_principal()
    target, schema, refused = _edit_target(principal, call_id)
    if refused is not None:
        return refused
    call = target.call
    arguments, problems = read_form(schema, request.form, call.input)
    if problems:
        message = "Some values cannot be used; nothing was saved."
        return _edit_form(principal, target, schema, problems, message, request.form, 422)
    try:
        _save(principal, target, arguments)
    except ValidationFailed as err:
        db.session.rollback()
        errors = {str(d.get("field")): str(d.get("message")) for d in err.details}
        shown_paths = _paths(build_fields(schema, call.input))
        stray = [f"{k}: {v}" for k, v in errors.items() if k not in shown_paths]
        message = " ".join([err.message, *stray])
        return _edit_form(principal, target, schema, errors, message, request.form, 422)
    except (expiry.ProposalExpired, Conflict) as err:
        db.session.rollback()
        return _refused(principal, _target(principal, call_id), err.message)
    db.session.rollback()
    try:
        return _target(principal, call_id).html(principal)
    except NotFound:  # four eyes: edited by its approver, it went back to the one who asked
        flash(HANDED_BACK, "info")
        return see_other("approvals.inbox")


def _paths(fields) -> set[str]:
    out: set[str] = set()
    for f in fields:
        out.add(f.path)
        out |= _paths(f.children)
    return out


@bp.get("/calls/<int:call_id>")
@guard()
def call_card(call_id: int):
    """One card as it is now (Cancel on the edit form)."""
    principal = require_principal()
    return _target(principal, call_id).html(principal)


@decision_post("/decide-group")
def decide_group():
    """Confirm the selected writes of a step and reject the rest, or reject them all, then
    stream the continuation."""
    principal = require_principal()
    try:
        chosen = PanelDecision.parse(request.form.get("decision"))
        selected = {parse_id(raw, "selected") for raw in request.form.getlist("selected")}
    except ValidationFailed as err:
        return _notice(err.detail_text(), 400)
    if chosen is None:
        return _notice("Choose Confirm selected or Reject all.", 400)
    message_id, confirm = chosen.target_id, chosen.confirm
    # Every group of the thread shares the form: only this message's calls are decided.
    reason = request.form.get(f"reason_{message_id}", "")
    try:
        message = own_calls.get_message(principal, message_id)
        if confirm and _editing(message_id):
            # A line with its Edit form open has no checkbox: it is neither chosen nor
            # unticked, so nothing is decided until its edit is saved or cancelled.
            return _notice(STILL_EDITING, 409)
        shown = {i: request.form[f"shown_{i}"] for i in selected if f"shown_{i}" in request.form}
        turn = approvals.begin_group_decision(
            principal, message_id, selected, confirm, reason, shown=shown
        )
    except ValidationFailed as err:
        return _notice(err.message, 422)
    except (expiry.ProposalExpired, ProposalChanged) as err:
        db.session.rollback()
        notice, status = _notice(err.message, 409)
        return notice + partial("#chat-follow-slot", "innerHTML", "") + _message_frame(
            principal, message_id
        ), status
    except Conflict as err:
        db.session.rollback()
        return _busy(message.conversation_id, err.message)[0] + _message_frame(
            principal, message_id
        ), 409
    except AppError as err:
        return _notice(err.message, err.status)
    # The group's buttons go with the decision: its message is drawn as it is now.
    return _start(principal, turn, sse(_message_frame(principal, message_id)))


def _editing(message_id: int) -> bool:
    """Whether the form says a waiting call of this message has its Edit form open."""
    try:
        editing = {parse_id(raw, "editing") for raw in request.form.getlist("editing")}
    except ValidationFailed:
        return False  # a bad marker is no open form
    return any(c.id in editing for c in own_calls.proposed_calls_of(message_id))


def _message_frame(principal: Principal, message_id: int) -> str:
    """The group's message drawn as it is now (decided cards, or cards drawn again)."""
    message = own_calls.get_message(principal, message_id)
    view = message_view(message)
    view.branch = branch_spot(principal, message)  # its "1/2", if it has versions
    html = render_template("assistant/_message.html", m=view)
    return partial(f"#msg-{message_id}", "outerHTML", html)
