"""The panel's Regenerate, Edit and version switch, on the assistant's blueprint
(``views.bp``; the blueprint module imports this one so they register).

- ``POST /chat/regenerate``: a new reply to the last message, on a version of its own;
  streams the turn as ``/chat/stream`` does.
- ``POST /chat/edit``: a new version of the last message (``message_id``, its text in
  ``text_<id>``), sent; streams the turn.
- ``POST /chat/conversations/<id>/versions/<message_id>``: show the version holding that
  message (Previous version, Next version); answers the thread and its foot.

Each is a POST under the app's CSRF check and the assistant's gates, counted per minute
(messages for the first two, decisions for the switch); the services
(``chat.turn.branching``) check that the conversation and message are the user's own (404
otherwise) and refuse, saying why (409), while a turn runs or a card waits.
"""

from __future__ import annotations

from flask import request

from monark.assistant.stream import partial, render_fragment, thread_frame
from monark.assistant.thread import thread_view
from monark.assistant.views import (
    _notice,
    _refused,
    _start,
    _start_on_conversation,
    decision_post,
    turn_post,
)
from monark.chat.turn import run
from monark.chat.turn.branching import begin_edit, begin_regenerate, switch_branch
from monark.chat.turn.start import require_assistant
from monark.core.auth import require_principal
from monark.core.errors import AppError, Conflict, ValidationFailed
from monark.core.ids import form_id
from monark.core.rbac import Principal


def _start_version(principal: Principal, turn: run.Turn):
    """Stream a turn that made a new version: the thread drawn as its opening left it
    first, and drawn whole again at its end (the versions' "1/2" with it)."""
    redraw, drawn = thread_frame(principal, turn.conversation_id)
    return _start(principal, turn, redraw, drawn=drawn, whole_at_end=True)


@turn_post("/regenerate")
def regenerate():
    """Answer the last message again, keeping the reply there was as the other version."""
    return _start_on_conversation(
        require_principal(),
        begin_regenerate,
        nothing="Nothing to regenerate yet.",
        invalid=lambda err: err.message,  # its message names the field
        start=_start_version,
    )


@turn_post("/edit")
def edit_message():
    """Send a new version of the last message, keeping the one there was."""
    principal = require_principal()
    try:
        message_id = form_id("message_id")
    except ValidationFailed as err:  # its message names the field
        return _notice(err.message, 400)
    if message_id is None:
        return _notice("Choose Edit on your last message.", 400)
    try:
        turn = begin_edit(principal, message_id, request.form.get(f"text_{message_id}", ""))
    except ValidationFailed as err:  # named as the box is labelled
        return _notice(f"Edit message: {err.detail_text()}", 422)
    except Conflict as err:
        return _notice(err.message, 409)
    except AppError as err:
        return _refused(err)
    return _start_version(principal, turn)


# Counted with the decisions on cards: which version the model reads next is one.
@decision_post("/conversations/<int:conversation_id>/versions/<int:message_id>")
def show_version(conversation_id: int, message_id: int):
    """Make the version holding ``message_id`` the one the thread shows and the model reads
    next; answers the thread and its foot (a notice instead when refused: the assistant's
    gates closed, another's conversation, a turn running)."""
    principal = require_principal()
    try:
        require_assistant(principal)
        switch_branch(principal, conversation_id, message_id)
    except AppError as err:
        return _refused(err)
    thread = thread_view(principal, conversation_id)
    items = render_fragment("assistant/_thread_items.html", thread=thread)
    foot = render_fragment(
        "assistant/_thread_foot.html", foot=thread.foot, following=False, notice=None
    )
    return partial("#chat-thread", "outerHTML", items) + partial(
        "#chat-thread-foot", "outerHTML", foot
    )
