"""A write card's own endpoints: Edit (a form from the tool's schema), the card again
(Cancel), and one decision on a group of writes a step proposed together.

Views on the assistant's blueprint (``monark.assistant.views.bp``); the factory imports
this module so they are registered.
"""

from __future__ import annotations

from typing import Any

from flask import render_template, request

from monark.approvals import handover
from monark.approvals import service as approvals
from monark.approvals.decision import ProposalChanged
from monark.assistant.edit_form import build_fields, read_form
from monark.assistant.stream import partial, sse
from monark.assistant.thread import call_view, group_of, message_view
from monark.assistant.verdict import PanelDecision
from monark.assistant.views import _busy, _notice, _start, bp, turn_limited
from monark.chat import decisions, store
from monark.chat.models import ToolCall
from monark.core.auth import guard, require_principal
from monark.core.errors import AppError, Conflict, ValidationFailed
from monark.core.ids import parse_id
from monark.core.rbac import Principal
from monark.extensions import db

CANNOT_EDIT = "This action cannot be edited any more: it was decided, or it has nothing to edit."
STILL_EDITING = (
    "Save or cancel the change you are editing first: Confirm selected would otherwise "
    "reject it, as it has no tick while its form is open."
)


def card_html(call: ToolCall) -> str:
    """A card drawn alone, as it stands in its thread (in its group, when its step's
    writes wait together)."""
    return render_template("assistant/_call.html", c=call_view(call), group_id=group_of(call))


def _edit_form(
    principal: Principal,
    call: ToolCall,
    schema: dict[str, Any],
    errors: dict[str, str] | None = None,
    error: str | None = None,
    shown: Any = None,
    status: int = 200,
):
    fields = build_fields(schema, call.input, errors, shown, scope=str(call.id))
    html = render_template(
        "assistant/_edit.html",
        c=call_view(call),
        fields=fields,
        error=error,
        group_id=group_of(call),
    )
    return html, status


def _not_theirs_to_edit(principal, call: ToolCall):
    """The card with a notice when the call was handed to another member (theirs to edit)."""
    try:
        handover.check_may_edit(principal, call)
    except Conflict as err:
        notice, status = _notice(err.message, 409)
        return card_html(call) + notice, status
    return None


def _edit_target(principal: Principal, call_id: int):
    """The call to edit and its edit schema, or the answer that refuses it (another's
    handed-over card, a decided call, nothing to edit)."""
    call = store.get_tool_call(principal, call_id)
    refused = _not_theirs_to_edit(principal, call)
    if refused is not None:
        return call, None, refused
    schema = approvals.edit_schema_of(principal, call_id)
    if schema is None:
        notice, status = _notice(CANNOT_EDIT, 409)
        return call, None, (card_html(call) + notice, status)
    return call, schema, None


@bp.get("/calls/<int:call_id>/edit")
@guard("chat.use")
def edit_call(call_id: int):
    """The edit form of a proposed write, in place of its card."""
    principal = require_principal()
    call, schema, refused = _edit_target(principal, call_id)
    if refused is not None:
        return refused
    return _edit_form(principal, call, schema)


@bp.post("/calls/<int:call_id>/edit")
@guard("chat.use")
def save_edit(call_id: int):
    """Store the edited arguments (checked by the route's own models) and draw the card
    again from them; the call stays proposed."""
    principal = require_principal()
    call, schema, refused = _edit_target(principal, call_id)
    if refused is not None:
        return refused
    arguments, problems = read_form(schema, request.form, call.input)
    if problems:
        message = "Some values cannot be used; nothing was saved."
        return _edit_form(principal, call, schema, problems, message, request.form, 422)
    try:
        approvals.edit_tool_call(principal, call_id, arguments)
    except ValidationFailed as err:
        db.session.rollback()
        errors = {str(d.get("field")): str(d.get("message")) for d in err.details}
        shown_paths = _paths(build_fields(schema, call.input))
        stray = [f"{k}: {v}" for k, v in errors.items() if k not in shown_paths]
        message = " ".join([err.message, *stray])
        return _edit_form(principal, call, schema, errors, message, request.form, 422)
    except (decisions.ProposalExpired, Conflict) as err:
        db.session.rollback()
        notice, status = _notice(err.message, 409)
        return card_html(store.get_tool_call(principal, call_id)) + notice, status
    return card_html(store.get_tool_call(principal, call_id))


def _paths(fields) -> set[str]:
    out: set[str] = set()
    for f in fields:
        out.add(f.path)
        out |= _paths(f.children)
    return out


@bp.get("/calls/<int:call_id>")
@guard("chat.use")
def call_card(call_id: int):
    """One card as it is now (Cancel on the edit form)."""
    principal = require_principal()
    return card_html(store.get_tool_call(principal, call_id))


@bp.post("/decide-group")
@guard("chat.use")
@turn_limited
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
        message = store.get_message(principal, message_id)
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
    except (decisions.ProposalExpired, ProposalChanged) as err:
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
    return any(c.id in editing for c in store.proposed_calls_of(message_id))


def _message_frame(principal: Principal, message_id: int) -> str:
    """The group's message drawn as it is now (decided cards, or cards drawn again)."""
    message = store.get_message(principal, message_id)
    html = render_template("assistant/_message.html", m=message_view(message))
    return partial(f"#msg-{message_id}", "outerHTML", html)
