"""The panel's endpoints for allowances and undo, on the
assistant's blueprint (``views.bp``; the factory imports this module so they register).

- ``POST /chat/allow``: "Allow <tool> for this conversation" on a card: confirms the card
  and stores the allowance in one decision, then streams the turn as ``/chat/decide`` does.
- ``POST /chat/undo``: undo a done write; answers its card, the undo's own small card and
  a notice (the page behind refreshes, as after a confirm: ``assistant.js``).
- ``POST /chat/allowances/<id>/revoke``: revoke an allowance; answers the list.

All are POSTs under the app's CSRF check (the panel sends its token with every htmx
request); each checks the gates, and the services check that the call, the conversation
and the allowance are the user's own.
"""

from __future__ import annotations

from flask import render_template, request

from monark.approvals import allowances, own_calls, undo
from monark.approvals import service as approvals
from monark.assistant.card_view import panel_card
from monark.assistant.stream import partial, sse
from monark.assistant.thread import allowance_views, message_view
from monark.assistant.views import _notice, _with_card, bp, decide_call, decision_post
from monark.chat import store
from monark.chat.models import ToolCallStatus
from monark.chat.turn.start import require_assistant
from monark.core.auth import guard, require_principal
from monark.core.errors import AppError, ValidationFailed
from monark.core.ids import parse_id
from monark.core.rbac import Principal
from monark.extensions import db


def _call_id() -> int | None:
    try:
        return parse_id(request.form.get("tool_call_id", ""), "tool_call_id")
    except ValidationFailed:
        return None


def allowances_html(principal: Principal, conversation_id: int) -> str:
    """The list of the conversation's allowances, as the thread screen shows it."""
    conversation = store.get_conversation(principal, conversation_id)
    held = allowance_views(principal, conversation)
    return render_template("assistant/_allowances.html", thread={"allowances": held})


@decision_post("/allow")
def allow():
    """Confirm a card and allow its tool for the rest of the conversation, then stream the
    continuation; refused (nothing decided) for a tool that may not be allowed."""
    principal = require_principal()
    call_id = _call_id()
    if call_id is None:
        return _notice("Choose Allow on a card.", 400)
    shown = request.form.get(f"shown_{call_id}")
    return decide_call(
        principal,
        call_id,
        lambda: approvals.begin_decision(principal, call_id, True, allow=True, shown=shown),
        lambda turn: sse(
            partial(
                "#chat-allowances", "outerHTML", allowances_html(principal, turn.conversation_id)
            )
        ),
    )


@bp.post("/undo")
@guard("chat.use")
def undo_call():
    """Undo a done write as the user; answers its card redrawn, the undo's small card and
    a notice. 409 when it was undone already or its target changed since, 403 when the
    user may no longer make the change."""
    principal = require_principal()
    call_id = _call_id()
    if call_id is None:
        return _notice("Choose Undo on a card.", 400)
    try:
        require_assistant(principal)
        done = undo.undo_tool_call(principal, call_id)
    except (undo.AlreadyUndone, undo.TargetChanged, undo.NothingToUndo) as err:
        db.session.rollback()
        return _with_card(_notice(err.message, 409), own_calls.get_tool_call(principal, call_id))
    except AppError as err:  # busy, forbidden, not found
        db.session.rollback()
        return _notice(err.message, err.status)
    original = own_calls.get_tool_call(principal, call_id)
    note = message_view(done.message)
    note_html = render_template("assistant/_message.html", m=note)
    card_html = render_template("assistant/_call.html", card=panel_card(original))
    if done.status == ToolCallStatus.SUCCEEDED:
        body, status = _notice("Undone.", 200, "info")
    else:
        body, status = _notice(f"The undo failed: {done.error}", 422)
    body += partial(f"#call-{original.id}", "outerHTML", card_html)
    body += partial("#chat-thread", "beforeend", note_html)
    return body, status


@bp.post("/allowances/<int:allowance_id>/revoke")
@guard("chat.use")
def revoke_allowance(allowance_id: int):
    """Revoke one of the user's allowances; answers the conversation's list."""
    principal = require_principal()
    allowance = allowances.revoke(principal, allowance_id)
    return allowances_html(principal, allowance.conversation_id)
