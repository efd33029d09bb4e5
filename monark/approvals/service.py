"""The panel's decisions on proposed writes, each under a new turn of its conversation:
Confirm, Reject, Allow, Confirm selected, and edits before the decision."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monark.approvals import edits, expiry, handover, own_calls
from monark.approvals.decision import Decision, Runner, awaiting_others, decide
from monark.approvals.edits import edit_schema
from monark.approvals.expiry import refuse_if_expired
from monark.chat.hooks import TurnHooks
from monark.chat.loop import TurnResult
from monark.chat.runtime import tool_executor
from monark.chat.turn.progress import CallChanged, Progress
from monark.chat.turn.run import Turn, run_turn
from monark.chat.turn.start import claimed, require_assistant
from monark.core.errors import ValidationFailed
from monark.core.rbac import Principal
from monark.extensions import db

NOTHING_SELECTED = "Choose at least one change to confirm, or Reject all."


def begin_decision(
    principal: Principal,
    tool_call_id: int,
    confirm: bool,
    reason: str | None = None,
    allow: bool = False,
    shown: str | None = None,
) -> Turn:
    """Confirm (run the write with the arguments stored at proposal) or reject a proposed
    write, exactly once, under a new turn that then advances the conversation.

    ``decide`` refuses a proposal past its time (``ProposalExpired``), one that is not the
    user's to confirm (``Forbidden``), and a confirm from a card drawn before an edit or a
    change of its target (``ProposalChanged``: the card is drawn again). ``allow``: the
    confirm also allows the tool for the conversation, in the same transaction. ``shown``:
    the token of the arguments the card showed (``edits.shown_token``)."""
    require_assistant(principal)
    call = own_calls.get_tool_call(principal, tool_call_id)
    conversation_id = call.conversation_id
    decision = Decision(confirm, reason, {tool_call_id: shown} if shown else {}, allow)
    runner = Runner.user(principal)

    def opening() -> list[Progress]:
        decide(runner, [own_calls.get_tool_call(principal, tool_call_id)], decision)
        return []

    def run(hooks: TurnHooks) -> None:
        decided = own_calls.get_tool_call(principal, tool_call_id)
        hooks.on_tool_call(decided)
        if confirm:
            runner.run(decided, hooks)

    return claimed(principal, conversation_id, opening, run)


def begin_group_decision(
    principal: Principal,
    message_id: int,
    selected: set[int],
    confirm: bool,
    reason: str | None = None,
    shown: Mapping[int, str] | None = None,
) -> Turn:
    """One decision on the writes a step proposed together: confirm the ``selected`` ones
    and reject the rest (``confirm`` False: reject them all), exactly once, under a new
    turn. Each confirmed write then runs on its own, with its own permission check, result
    and audit row; one that fails shows on its line and does not stop the others. A write
    that is not the user's to confirm (handed over, four eyes) keeps waiting on a confirm."""
    require_assistant(principal)
    message = own_calls.get_message(principal, message_id)
    conversation_id = message.conversation_id
    nothing = ValidationFailed(
        NOTHING_SELECTED, [{"field": "selected", "message": NOTHING_SELECTED}]
    )
    if confirm and not selected:
        raise nothing
    runner = Runner.user(principal)
    decision = Decision(confirm, reason, dict(shown or {}))
    confirmed_ids: list[int] = []

    def opening() -> list[Progress]:
        calls = own_calls.proposed_calls_of(message_id)
        if confirm:
            # Neither confirmed nor rejected by Confirm selected: it waits for its approver.
            others = awaiting_others(principal, calls)
            calls = [c for c in calls if c.id not in others]
        expired = any(expiry.is_expired(c) for c in calls)
        if confirm and calls and not expired and not any(c.id in selected for c in calls):
            raise nothing
        ids = [c.id for c in calls]
        decide(runner, calls, decision, selected=selected if confirm else set())
        confirmed_ids.extend(i for i in ids if confirm and i in selected)
        return [CallChanged(i) for i in ids]

    def run(hooks: TurnHooks) -> None:
        # The confirmed calls in one read, then held apart from the session: each is
        # attached only while it runs, so the commits of one write neither expire nor
        # flush the others (settled EXECUTING above, they change only by their own run).
        calls = own_calls.tool_calls_of(principal, confirmed_ids)
        db.session.expunge_all()
        for call in calls:
            db.session.add(call)
            hooks.on_tool_call(call)
            runner.run(call, hooks)
            db.session.expunge_all()

    return claimed(principal, conversation_id, opening, run)


def edit_tool_call(
    principal: Principal,
    tool_call_id: int,
    edited: Mapping[str, Any],
) -> list[str]:
    """Change the arguments of a proposed write before deciding on it (``edits``): the
    names of the arguments that changed."""
    require_assistant(principal)
    call = own_calls.get_tool_call(principal, tool_call_id)
    refuse_if_expired(principal, call)
    handover.check_may_edit(principal, call)  # handed over: the approver's to edit
    return edits.edit_call(tool_executor(), principal, call, edited)


def edit_schema_of(principal: Principal, tool_call_id: int) -> dict[str, Any] | None:
    """What a person may change in one of their proposed writes (None: nothing)."""
    call = own_calls.get_tool_call(principal, tool_call_id)
    if not call.mutates or call.status != "PROPOSED":
        return None
    actor = principal.via_assistant(call.conversation_id)
    return edit_schema(tool_executor(), actor, call.name, dict(call.input))


# ---- the same, run here and now (tests, scripts, the CLI) ---------------------------------


def confirm_tool_call(
    principal: Principal,
    tool_call_id: int,
    hooks: TurnHooks | None = None,
) -> TurnResult:
    """Run a proposed write, then advance the turn, in this thread."""
    return run_turn(begin_decision(principal, tool_call_id, True, None), hooks)


def reject_tool_call(
    principal: Principal,
    tool_call_id: int,
    reason: str | None = None,
    hooks: TurnHooks | None = None,
) -> TurnResult:
    """Refuse a proposed write (the refusal and reason go back to the model)."""
    return run_turn(begin_decision(principal, tool_call_id, False, reason), hooks)
