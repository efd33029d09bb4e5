"""Send a message, confirm or reject a proposed write: the entry points of a turn."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import current_app
from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import update

from monark.chat import store
from monark.chat.hooks import TurnHooks
from monark.chat.loop import TurnResult, advance_conversation, run_tool_call
from monark.chat.models import Conversation, ToolCall
from monark.chat.prompt import PageContext, context_sentence
from monark.chat.tools import get_chat_tool_executor
from monark.core.errors import Conflict, Forbidden, ValidationFailed
from monark.core.gates import check_gates
from monark.core.models import utcnow
from monark.core.rbac import Principal
from monark.extensions import db

MAX_TEXT = 16_000
AUTO_REJECT_REASON = "The user sent a new message instead of confirming."


class SendInput(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    conversation_id: int | None = Field(None, ge=1)
    page_context: PageContext | None = None


def parse_send_input(data: Mapping[str, Any]) -> SendInput:
    """Validate what the composer sent; errors name the field."""
    try:
        parsed = SendInput.model_validate(data)
    except ValidationError as err:
        details = [
            {"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
            for e in err.errors(include_url=False)
        ]
        raise ValidationFailed("The message is invalid.", details) from None
    if not parsed.text.strip():
        raise ValidationFailed(
            "The message is empty.", [{"field": "text", "message": "Write a message first."}]
        )
    return parsed


def require_assistant(principal: Principal, config: Mapping[str, Any]) -> None:
    """Refuse clearly unless all three gates are open."""
    gate = check_gates(principal, config)
    if not gate.open:
        raise Forbidden(gate.reason)


def _open_turn(
    principal: Principal, hooks: TurnHooks | None, config: Mapping[str, Any] | None
) -> tuple[TurnHooks, Mapping[str, Any]]:
    """What every entry point does first: resolve hooks and config, then check the gates."""
    config = config if config is not None else current_app.config
    require_assistant(principal, config)
    return hooks or TurnHooks(), config


def send_message(
    principal: Principal,
    data: SendInput,
    hooks: TurnHooks | None = None,
    config: Mapping[str, Any] | None = None,
) -> TurnResult:
    """Store the user's message (creating the conversation if needed), then advance."""
    hooks, config = _open_turn(principal, hooks, config)
    if data.conversation_id is None:
        conversation = store.create_conversation(principal, store.default_title(data.text))
        db.session.commit()
    else:
        conversation = store.get_conversation(principal, data.conversation_id)
    with store.running_turn(conversation.id):
        return _send(principal, conversation, data, hooks, config)


def _send(
    principal: Principal,
    conversation: Conversation,
    data: SendInput,
    hooks: TurnHooks,
    config: Mapping[str, Any],
) -> TurnResult:
    if data.conversation_id is not None:
        for call in store.pending_calls(conversation.id):
            if call.status == "EXECUTING":
                raise Conflict("An action is still running. Wait for it to finish.")
            _decide(principal, call, "REJECTED", AUTO_REJECT_REASON)
    sentence = context_sentence(data.page_context, utcnow().date())
    message = store.add_message(
        conversation,
        principal,
        author_kind="user",
        author_user_id=principal.user_id,
        role="user",
        text=data.text,
        content=[{"type": "text", "text": sentence}],
    )
    db.session.commit()
    hooks.on_message_saved(message)
    return advance_conversation(principal, conversation.id, hooks, config)


def retry_turn(
    principal: Principal,
    conversation_id: int,
    hooks: TurnHooks | None = None,
    config: Mapping[str, Any] | None = None,
) -> TurnResult:
    """Advance a conversation again (after an error, a stop or the step limit)."""
    hooks, config = _open_turn(principal, hooks, config)
    store.get_conversation(principal, conversation_id)
    with store.running_turn(conversation_id):
        return advance_conversation(principal, conversation_id, hooks, config)


def _decide(principal: Principal, call: ToolCall, status: str, reason: str | None) -> None:
    """PROPOSED → ``status`` as one conditional update: exactly one decision wins."""
    changed = db.session.execute(
        update(ToolCall)
        .where(ToolCall.id == call.id, ToolCall.status == "PROPOSED")
        .values(
            status=status,
            decided_by_id=principal.user_id,
            decided_at=utcnow(),
            reject_reason=(reason or None) if status == "REJECTED" else None,
        )
        .execution_options(synchronize_session=False)
    )
    if changed.rowcount != 1:
        db.session.rollback()
        raise Conflict("This action was already confirmed or rejected.")
    db.session.refresh(call)
    store.tool_call_event(
        principal.via_assistant(call.conversation_id),
        call,
        "confirmed" if status == "EXECUTING" else "rejected",
    )
    db.session.commit()


def confirm_tool_call(
    principal: Principal,
    tool_call_id: int,
    hooks: TurnHooks | None = None,
    config: Mapping[str, Any] | None = None,
) -> TurnResult:
    """Run a proposed write with the arguments stored at proposal, then advance the turn."""
    hooks, config = _open_turn(principal, hooks, config)
    call = store.get_tool_call(principal, tool_call_id)
    with store.running_turn(call.conversation_id):
        _decide(principal, call, "EXECUTING", None)
        hooks.on_tool_call(call)
        run_tool_call(principal, call, get_chat_tool_executor(), hooks)
        return advance_conversation(principal, call.conversation_id, hooks, config)


def reject_tool_call(
    principal: Principal,
    tool_call_id: int,
    reason: str | None = None,
    hooks: TurnHooks | None = None,
    config: Mapping[str, Any] | None = None,
) -> TurnResult:
    """Refuse a proposed write; the refusal (and reason) goes back to the model."""
    hooks, config = _open_turn(principal, hooks, config)
    call = store.get_tool_call(principal, tool_call_id)
    reason = " ".join((reason or "").split())[:500] or None
    with store.running_turn(call.conversation_id):
        _decide(principal, call, "REJECTED", reason)
        hooks.on_tool_call(call)
        return advance_conversation(principal, call.conversation_id, hooks, config)
