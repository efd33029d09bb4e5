"""Send a message, confirm or reject a proposed write: the entry points of a turn."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flask import current_app
from pydantic import BaseModel, Field, ValidationError

from monark.chat import allowances, decisions, edits, handover, store, turns
from monark.chat.calls import run_tool_call
from monark.chat.gates import check_gates
from monark.chat.hooks import TurnHooks
from monark.chat.loop import TurnResult, advance_conversation
from monark.chat.models import MessageRole, MessageStatus, ToolCall, ToolCallStatus
from monark.chat.prompt import PageContext, context_sentence
from monark.chat.runtime import tool_executor
from monark.chat.turns import Turn, run_turn
from monark.core.errors import Conflict, Forbidden, ValidationFailed
from monark.core.ids import Id
from monark.core.models import utcnow
from monark.core.rbac import Principal
from monark.extensions import db

MAX_TEXT = 16_000
AUTO_REJECT_REASON = "The user sent a new message instead of confirming."
NOTHING_TO_RETRY = "Nothing to retry: the last reply is complete. Send a message instead."


class SendInput(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    conversation_id: Id | None = None
    page_context: PageContext | None = None


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


def require_assistant(principal: Principal, config: Mapping[str, Any]) -> None:
    """Refuse clearly unless all three gates are open."""
    gate = check_gates(principal, config)
    if not gate.open:
        raise Forbidden(gate.reason)


def _checked(config: Mapping[str, Any] | None, principal: Principal) -> Mapping[str, Any]:
    """What every entry point does first: resolve the config, then check the gates."""
    config = config if config is not None else current_app.config
    require_assistant(principal, config)
    return config


def _claimed(
    principal: Principal,
    conversation_id: int,
    config: Mapping[str, Any],
    opening: Callable[[], list[dict[str, Any]]],
    work: Callable[[TurnHooks], TurnResult],
) -> Turn:
    """Claim the conversation's turn and run ``opening`` under the claim (the user's
    message, a decision); it returns the progress entries of what it stored. A failed
    opening gives the claim back."""
    turn_id = turns.claim(conversation_id, config)
    try:
        # Idle past CHAT_ALLOWANCE_IDLE: its allowances end before anything makes it active.
        allowances.lapse_idle(principal, conversation_id, config)
        opened = opening()
    except BaseException:
        turns.release(conversation_id, turn_id)
        raise
    return Turn(principal, conversation_id, turn_id, work, opening=opened)


def begin_send(
    principal: Principal, data: SendInput, config: Mapping[str, Any] | None = None
) -> Turn:
    """Store the user's message (creating the conversation if needed) under a new turn."""
    config = _checked(config, principal)
    if data.conversation_id is None:
        conversation = store.create_conversation(principal, store.default_title(data.text))
        db.session.commit()
    else:
        conversation = store.get_conversation(principal, data.conversation_id)
    conversation_id = conversation.id

    def opening() -> list[dict[str, Any]]:
        conversation = store.get_conversation(principal, conversation_id)
        entries: list[dict[str, Any]] = []
        decisions.expire_overdue(principal, conversation_id, config)
        # Under the claim, nothing else runs: what is pending waits for the user.
        for call in store.pending_calls(conversation_id):
            decisions.decide(
                principal, call, ToolCallStatus.REJECTED, AUTO_REJECT_REASON, skipped=True
            )
            entries.append({"k": "c", "id": call.id})
        sentence = context_sentence(data.page_context, utcnow().date())
        message = store.add_message(
            conversation,
            principal,
            author_kind="user",
            author_user_id=principal.user_id,
            role=MessageRole.USER,
            text=data.text,
            content=[{"type": "text", "text": sentence}],
        )
        db.session.commit()
        return [*entries, {"k": "m", "id": message.id}]

    return _claimed(
        principal,
        conversation_id,
        config,
        opening,
        lambda hooks: advance_conversation(principal, conversation_id, hooks, config),
    )


def begin_retry(
    principal: Principal, conversation_id: int, config: Mapping[str, Any] | None = None
) -> Turn:
    """A new turn that advances a conversation again (after an error, a stop, a limit)."""
    config = _checked(config, principal)
    store.get_conversation(principal, conversation_id)

    def opening() -> list[dict[str, Any]]:
        decisions.expire_overdue(principal, conversation_id, config)
        last, _ = store.tail_state(conversation_id)
        if last is None or last == (MessageRole.ASSISTANT, MessageStatus.COMPLETE):
            # Another tab's reply ended well meanwhile: a retry would answer twice.
            raise Conflict(NOTHING_TO_RETRY)
        return []

    return _claimed(
        principal,
        conversation_id,
        config,
        opening,
        lambda hooks: advance_conversation(principal, conversation_id, hooks, config),
    )


def begin_decision(
    principal: Principal,
    tool_call_id: int,
    confirm: bool,
    reason: str | None = None,
    config: Mapping[str, Any] | None = None,
    on_confirm: Callable[[ToolCall], None] | None = None,
    shown: str | None = None,
) -> Turn:
    """Confirm (run the write with the arguments stored at proposal) or reject a proposed
    write, exactly once, under a new turn that then advances the conversation.

    A proposal past its time is refused (``ProposalExpired``); a confirmed update or delete
    whose target changed since its card was drawn does not run (``ProposalChanged``): its
    card is drawn again, to be decided again. ``on_confirm`` adds to the confirm's own
    transaction (an allowance, say); what it raises refuses the confirm. ``shown``: the
    token of the arguments the card showed (``edits.shown_token``); a confirm from a card
    drawn before an edit elsewhere is refused the same way (``ProposalChanged``)."""
    config = _checked(config, principal)
    call = store.get_tool_call(principal, tool_call_id)
    conversation_id = call.conversation_id
    reason = " ".join((reason or "").split())[:500] or None

    def opening() -> list[dict[str, Any]]:
        decided = store.get_tool_call(principal, tool_call_id)
        if decided.status == ToolCallStatus.EXPIRED or decisions.is_expired(decided, config):
            decisions.expire_overdue(principal, conversation_id, config)
            raise decisions.ProposalExpired(decisions.expired_message(config))
        checked_edit = decided.edited_at  # the decision holds only if no edit lands after
        if confirm and decided.status == ToolCallStatus.PROPOSED:
            # Handed to someone else, or a four-eyes tool: not the requester's to confirm.
            handover.check_may_confirm(principal, decided)
            decisions.check_shown(decided, shown)
            decisions.check_fresh(tool_executor(), principal, decided)
        status = ToolCallStatus.EXECUTING if confirm else ToolCallStatus.REJECTED
        if confirm and on_confirm is not None and decided.status == ToolCallStatus.PROPOSED:
            on_confirm(decided)
        if confirm:
            decisions.decide(principal, decided, status, reason, edited_at=checked_edit)
        else:
            decisions.decide(principal, decided, status, reason)
        return []

    def work(hooks: TurnHooks) -> TurnResult:
        decided = store.get_tool_call(principal, tool_call_id)
        hooks.on_tool_call(decided)
        if confirm:
            run_tool_call(principal, decided, tool_executor(), hooks)
        return advance_conversation(principal, conversation_id, hooks, config)

    return _claimed(principal, conversation_id, config, opening, work)


def edit_tool_call(
    principal: Principal,
    tool_call_id: int,
    edited: Mapping[str, Any],
    config: Mapping[str, Any] | None = None,
) -> list[str]:
    """Change the arguments of a proposed write before deciding on it (``chat.edits``):
    the names of the arguments that changed."""
    config = _checked(config, principal)
    call = store.get_tool_call(principal, tool_call_id)
    if decisions.is_expired(call, config):
        decisions.expire_overdue(principal, call.conversation_id, config)
        raise decisions.ProposalExpired(decisions.expired_message(config))
    handover.check_may_edit(principal, call)  # handed over: the approver's to edit
    return edits.edit_call(tool_executor(), principal, call, edited)


def edit_schema_of(principal: Principal, tool_call_id: int) -> dict[str, Any] | None:
    """What a person may change in one of their proposed writes (None: nothing)."""
    call = store.get_tool_call(principal, tool_call_id)
    if not call.mutates or call.status != ToolCallStatus.PROPOSED:
        return None
    actor = principal.via_assistant(call.conversation_id)
    return tool_executor().edit_schema(actor, call.name, dict(call.input))


NOTHING_SELECTED = "Choose at least one change to confirm, or Reject all."


def begin_group_decision(
    principal: Principal,
    message_id: int,
    selected: set[int],
    confirm: bool,
    reason: str | None = None,
    config: Mapping[str, Any] | None = None,
    shown: Mapping[int, str] | None = None,
) -> Turn:
    """One decision on the writes a step proposed together: confirm the ``selected`` ones
    and reject the rest (``confirm`` False: reject them all), exactly once, under a new
    turn. Each confirmed write then runs on its own, with its own permission check, result
    and audit row; one that fails shows on its line and does not stop the others.

    As for one card: past its time the group is refused (``ProposalExpired``); when the
    target of a selected update or delete changed since its card was drawn, or a selected
    line was edited elsewhere since (``shown``: each line's token, by call id), nothing
    runs and the cards are drawn again (``ProposalChanged``)."""
    config = _checked(config, principal)
    message = store.get_message(principal, message_id)
    conversation_id = message.conversation_id
    reason = " ".join((reason or "").split())[:500] or None
    nothing = ValidationFailed(
        NOTHING_SELECTED, [{"field": "selected", "message": NOTHING_SELECTED}]
    )
    if confirm and not selected:
        raise nothing
    executor = tool_executor()
    confirmed_ids: list[int] = []

    def opening() -> list[dict[str, Any]]:
        calls = store.proposed_calls_of(message_id)
        if confirm:
            # Handed to someone else, or a four-eyes tool: neither confirmed nor rejected
            # by the requester's Confirm selected; it keeps waiting for its approver.
            calls = [c for c in calls if not handover.awaits_another(principal, c)]
        if any(decisions.is_expired(c, config) for c in calls):
            decisions.expire_overdue(principal, conversation_id, config)
            raise decisions.ProposalExpired(decisions.expired_message(config))
        if not calls:
            raise Conflict("These actions were already confirmed or rejected.")
        chosen = {c.id for c in calls if c.id in selected} if confirm else set()
        if confirm and not chosen:
            raise nothing
        fresh = [c for c in calls if c.id in chosen]
        checked_edits = {c.id: c.edited_at for c in fresh}  # as checked: no edit may land after
        edited = [c.id for c in fresh if not edits.shows_current(c, (shown or {}).get(c.id))]
        if edited:
            raise decisions.ProposalChanged(edits.EDITED_SINCE, call_ids=edited)
        changed = [c.id for c in fresh if decisions.redrawn(executor, principal, c)]
        if changed:
            raise decisions.ProposalChanged(decisions.CHANGED_MESSAGE, call_ids=changed)
        done = decisions.decide_group(principal, calls, chosen, reason, checked_edits)
        confirmed_ids.extend(c.id for c in done)
        return [{"k": "c", "id": c.id} for c in calls]

    def work(hooks: TurnHooks) -> TurnResult:
        for call_id in confirmed_ids:
            call = store.get_tool_call(principal, call_id)
            hooks.on_tool_call(call)
            run_tool_call(principal, call, executor, hooks)
            # Each write is done and committed: let its rows go, so every commit after it
            # does not expire and flush a session that grows with the group.
            db.session.expunge_all()
        return advance_conversation(principal, conversation_id, hooks, config)

    return _claimed(principal, conversation_id, config, opening, work)


# ---- the same, run here and now (tests, scripts, the CLI) ---------------------------------


def send_message(
    principal: Principal,
    data: SendInput,
    hooks: TurnHooks | None = None,
    config: Mapping[str, Any] | None = None,
) -> TurnResult:
    """Store the user's message, then run the turn in this thread."""
    return run_turn(begin_send(principal, data, config), hooks)


def retry_turn(
    principal: Principal,
    conversation_id: int,
    hooks: TurnHooks | None = None,
    config: Mapping[str, Any] | None = None,
) -> TurnResult:
    """Advance a conversation again, in this thread."""
    return run_turn(begin_retry(principal, conversation_id, config), hooks)


def confirm_tool_call(
    principal: Principal,
    tool_call_id: int,
    hooks: TurnHooks | None = None,
    config: Mapping[str, Any] | None = None,
) -> TurnResult:
    """Run a proposed write, then advance the turn, in this thread."""
    return run_turn(begin_decision(principal, tool_call_id, True, None, config), hooks)


def reject_tool_call(
    principal: Principal,
    tool_call_id: int,
    reason: str | None = None,
    hooks: TurnHooks | None = None,
    config: Mapping[str, Any] | None = None,
) -> TurnResult:
    """Refuse a proposed write (the refusal and reason go back to the model)."""
    return run_turn(begin_decision(principal, tool_call_id, False, reason, config), hooks)
