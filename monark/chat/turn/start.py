"""How a turn starts: send a message or retry, each under a claim of its conversation."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from monark.chat import decisions, store
from monark.chat.hooks import TurnHooks
from monark.chat.loop import TurnResult, advance_conversation
from monark.chat.models import MessageRole, MessageStatus, ToolCallStatus
from monark.chat.runtime import runtime
from monark.chat.turn import lease
from monark.chat.turn.progress import CallChanged, MessageSaved, Progress
from monark.chat.turn.run import Turn, run_turn
from monark.core.errors import Conflict, Forbidden, ValidationFailed
from monark.core.ids import Id
from monark.core.rbac import Principal
from monark.core.zones import local_now
from monark.extensions import db

MAX_TEXT = 16_000
AUTO_REJECT_REASON = "The user sent a new message instead of confirming."
# A question (``ToolSpec.asks_user``, never a write) the user did not answer: they moved on.
MOVED_ON_REASON = "The user moved on: they sent a new message instead of answering."
NOTHING_TO_RETRY = "Nothing to retry: the last reply is complete. Send a message instead."


class SendInput(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    conversation_id: Id | None = None
    # Where the user is, as the host read it; its prompt builder words it (``page_note``).
    page_context: object | None = None


def parse_send_input(data: Mapping[str, Any]) -> SendInput:
    """Validate what the composer sent; errors name the field."""
    try:
        parsed = SendInput.model_validate(data)
    except ValidationError as err:
        raise ValidationFailed.from_pydantic(err, "The message is invalid.") from None
    if not parsed.text.strip():
        raise ValidationFailed(
            "The message is empty.", [{"field": "text", "message": "Write a message first."}]
        )
    return parsed


def require_assistant(principal: Principal) -> None:
    """Refuse clearly unless all three gates are open."""
    gate = runtime().access.check(principal)
    if not gate.open:
        raise Forbidden(gate.reason)


def claimed(
    principal: Principal,
    conversation_id: int,
    opening: Callable[[], list[Progress]],
    first: Callable[[TurnHooks], None] | None = None,
) -> Turn:
    """Claim the conversation and run ``opening`` under the claim (the progress events of
    what it stored; failing, it gives the claim back); the turn runs ``first``, then the loop."""
    turn_id = lease.claim(conversation_id)
    try:
        lease.check_org_room(principal.org_id)
        runtime().gate.on_claim(principal, conversation_id)
        opened = opening()
    except BaseException:
        lease.give_back(conversation_id, turn_id)
        raise

    def work(hooks: TurnHooks) -> TurnResult:
        if first is not None:
            first(hooks)
        return advance_conversation(principal, conversation_id, hooks)

    return Turn(principal, conversation_id, turn_id, work, opening=opened)


def begin_send(principal: Principal, data: SendInput) -> Turn:
    """Store the user's message (creating the conversation if needed) under a new turn."""
    require_assistant(principal)
    if data.conversation_id is None:
        conversation = store.create_conversation(principal, store.default_title(data.text))
        db.session.commit()
    else:
        conversation = store.get_conversation(principal, data.conversation_id)
    conversation_id = conversation.id

    def opening() -> list[Progress]:
        conversation = store.get_conversation(principal, conversation_id)
        events: list[Progress] = []
        runtime().gate.expire_overdue(principal, conversation_id)
        # Under the claim, nothing else runs: what is pending waits for the user.
        for call in store.pending_calls(conversation_id):
            reason = AUTO_REJECT_REASON if call.mutates else MOVED_ON_REASON
            settled = decisions.Settlement(call, ToolCallStatus.REJECTED, reason, skipped=True)
            decisions.settle(principal, [settled])
            events.append(CallChanged(call.id))
        sentence = runtime().prompt.page_note(data.page_context, local_now(principal))
        message = store.add_message(
            conversation,
            principal,
            author_kind="user",
            role=MessageRole.USER,
            text=data.text,
            content=[{"type": "text", "text": sentence}],
        )
        db.session.commit()
        return [*events, MessageSaved(message.id)]

    return claimed(principal, conversation_id, opening)


def begin_retry(principal: Principal, conversation_id: int) -> Turn:
    """A new turn that advances a conversation again (after an error, a stop, a limit)."""
    require_assistant(principal)
    store.get_conversation(principal, conversation_id)

    def opening() -> list[Progress]:
        head_id = store.get_conversation(principal, conversation_id).head_id
        runtime().gate.expire_overdue(principal, conversation_id)
        last, _ = store.tail_state(conversation_id, head_id=head_id)
        if last is None or last == (MessageRole.ASSISTANT, MessageStatus.COMPLETE):
            # Another tab's reply ended well meanwhile: a retry would answer twice.
            raise Conflict(NOTHING_TO_RETRY)
        return []

    return claimed(principal, conversation_id, opening)


def send_message(
    principal: Principal,
    data: SendInput,
    hooks: TurnHooks | None = None,
) -> TurnResult:
    """Store the user's message, then run the turn in this thread."""
    return run_turn(begin_send(principal, data), hooks)
