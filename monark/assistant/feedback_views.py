"""Feedback on replies: the panel's thumbs (``POST /chat/messages/<id>/feedback``, on the
assistant's blueprint) and the moderators' pages (``/moderation/feedback``), which list the
org's feedback and open the conversation a piece of it points to, each opening audited."""

from __future__ import annotations

from flask import Blueprint, render_template, request

from monark.assistant import feedback
from monark.assistant.thread import load_messages, message_view
from monark.assistant.views import bp
from monark.chat.branches import path_to
from monark.core.auth import guard, require_principal
from monark.core.errors import ValidationFailed
from monark.core.models import User
from monark.extensions import db

moderation_bp = Blueprint("moderation", __name__, url_prefix="/moderation")


@bp.post("/messages/<int:message_id>/feedback")
@guard("chat.use")
def give_feedback(message_id: int):
    """Rate a reply up or down, with an optional reason; answers the reply's feedback bar."""
    principal = require_principal()
    form = request.form
    try:
        given = feedback.give(principal, message_id, form.get("rating", ""), form.get("reason"))
    except ValidationFailed as err:
        db.session.rollback()
        rating = feedback.ratings_of(principal, [message_id]).get(message_id)
        return render_template(
            "assistant/_feedback.html",
            message_id=message_id,
            rating=rating,
            errors=err.field_errors(),
            reason=form.get("reason", ""),
        ), 422
    return render_template(
        "assistant/_feedback.html",
        message_id=message_id,
        rating=given.rating,
        thanked=True,
        reason=given.reason or "",
    )


@moderation_bp.get("/feedback")
@guard("chat.moderate")
def feedback_list():
    """The org's feedback on replies, newest first (filter: up or down)."""
    principal = require_principal()
    rating = request.args.get("rating") or None
    page = request.args.get("page", "1")
    number = int(page) if page.isascii() and page.isdigit() and 0 < len(page) < 7 else 1
    rows = feedback.listed(principal, rating, number)
    return render_template(
        "moderation/feedback.html",
        rows=rows[: feedback.PAGE_SIZE],
        more=len(rows) > feedback.PAGE_SIZE,
        page=number,
        rating=rating,
        counts=feedback.counts(principal),
    )


@moderation_bp.get("/feedback/<int:feedback_id>")
@guard("chat.moderate")
def feedback_conversation(feedback_id: int):
    """The conversation a piece of feedback points to, read-only; the reading is audited."""
    principal = require_principal()
    found, conversation = feedback.shared_conversation(principal, feedback_id)
    # Up to the rated reply, along its own version: what the person shared, nothing after.
    branched = conversation.head_id is not None
    rows = path_to(load_messages(conversation.id), found.message_id, branched)
    messages = [message_view(m) for m in rows]
    owner = db.session.get(User, conversation.creator_id) if conversation.creator_id else None
    return render_template(
        "moderation/conversation.html",
        found=found,
        conversation=conversation,
        owner=owner,
        messages=messages,
    )
