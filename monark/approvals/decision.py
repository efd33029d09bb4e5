"""One decision path for every way a proposed write is decided.

The panel's Confirm and Reject, Allow, Confirm selected, the Approvals inbox, a hand-over and
an API key's held write all call ``decide``: a typed ``Decision`` and a ``Runner`` that says
as whom the write runs (the user, the approver on the requester's request, the key). Its
checks run once, in one order: expired → policy → what the card showed → target unchanged →
the conditional update (``chat.decisions.settle``, with the edit as checked as its
precondition, so an edit landing after the checks makes it lose).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, update

from monark.approvals import allowances, notices
from monark.approvals.expiry import ProposalExpired, expire_overdue, expired_message, is_expired
from monark.approvals.policy import ApprovalPolicy
from monark.approvals.shown import before_digest
from monark.chat import store
from monark.chat.calls import preview_of, run_tool_call
from monark.chat.decisions import (
    ALREADY_DECIDED,
    Settlement,
    settle,
)
from monark.chat.executor import ChatToolExecutor
from monark.chat.hooks import TurnHooks
from monark.chat.models import CallEvent, Conversation, ToolCall, ToolCallStatus
from monark.chat.runtime import tool_executor
from monark.core.errors import Conflict, Forbidden
from monark.core.models import User
from monark.core.rbac import Principal
from monark.extensions import db

CHANGED_MESSAGE = (
    "This changed since the card was drawn, so nothing ran: check the before → after "
    "as it is now, and confirm again."
)
GROUP_DECIDED = "These actions were already confirmed or rejected."
NOT_A_WRITE = "This is a question, not a write: answer it on its card."
REASON_MAX = 500
EDITED_SINCE = (
    "This card was edited since it was drawn here (in another tab or window), so nothing "
    "ran: check it as it is now, and confirm again."
)


def shown_token(arguments: Mapping[str, Any]) -> str:
    """A short token of a call's arguments: a card sends the one it was drawn with, so a
    decision on a card drawn before an edit elsewhere never runs what it did not show."""
    text = json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def shows_current(call: ToolCall, shown: str | None) -> bool:
    """Whether a card's token (None: the request sent none) names the call's arguments."""
    return shown is None or shown == shown_token(call.input)


__all__ = ["ProposalChanged", "ProposalExpired", "decide"]


class ProposalChanged(Conflict):
    """The target changed since the card was drawn: the card is drawn again, to ask again
    (``call_ids``: the cards drawn again)."""

    def __init__(self, message: str = CHANGED_MESSAGE, call_ids: list[int] | None = None):
        super().__init__(message)
        self.call_ids = call_ids or []


@dataclass(frozen=True)
class Decision:
    """A decision on one card or a step's cards: confirm or reject, why (a rejection's
    reason, cleaned), the token of the arguments each card showed (by call id; a card that
    sent none is not checked), and whether a confirm allows the tool for the conversation."""

    confirm: bool
    reason: str | None = None
    shown: Mapping[int, str] = field(default_factory=dict)
    allow: bool = False

    def __post_init__(self) -> None:
        cleaned = " ".join((self.reason or "").split())[:REASON_MAX] or None
        object.__setattr__(self, "reason", cleaned)


@dataclass(frozen=True)
class Runner:
    """As whom a decided write runs: ``actor`` decides it (recorded and audited) and reads
    its target again; ``executor`` runs it (a key's, for its held write); ``check`` is a
    precondition of the runner's own, part of the policy step."""

    actor: Principal
    executor: ChatToolExecutor
    check: Callable[[ToolCall], None] | None = None

    @classmethod
    def user(cls, principal: Principal) -> Runner:
        """The write runs as the member who decides it, via the assistant."""
        return cls(principal, tool_executor())

    def run(self, call: ToolCall, hooks: TurnHooks) -> None:
        """Run a confirmed write (its result stored with it)."""
        run_tool_call(self.actor, call, self.executor, hooks)


def user_name(user_id: int | None) -> str | None:
    """A member's name, for "Waiting for <name>"."""
    return db.session.scalar(select(User.name).where(User.id == user_id)) if user_id else None


def confirm_refusal(
    policy: ApprovalPolicy, user_id: int | None, call: ToolCall, conversation: Conversation | None
) -> str | None:
    """Why ``user_id`` may not confirm ``call`` (None: they may): it waits for another
    member it was handed to, or, under four eyes, they last set its arguments."""
    if call.approver_id is not None and call.approver_id != user_id:
        return (
            f"Waiting for {user_name(call.approver_id) or 'another member'} to approve this: "
            "you can still reject it."
        )
    if user_id in policy.makers(call, conversation):
        if call.edited_by_id == user_id and call.handed_by_id not in (None, user_id):
            return (
                f"{call.name} needs another member's approval here (four eyes), and you set "
                "these arguments: the one who asked, or another member, confirms them."
            )
        return (
            f"{call.name} needs another member's approval in this organization (four eyes): "
            "ask someone to approve it."
        )
    return None


def awaits_another(principal: Principal, call: ToolCall) -> bool:
    """Whether ``call`` is not this member's to confirm (handed to another, four eyes)."""
    return call.id in awaiting_others(principal, [call])


def awaiting_others(principal: Principal, calls: Sequence[ToolCall]) -> set[int]:
    """Which of one conversation's ``calls`` are not this member's to confirm."""
    if not calls:
        return set()
    conversation = db.session.get(Conversation, calls[0].conversation_id)
    policy = ApprovalPolicy.of(calls[0].org_id)
    return {c.id for c in calls if confirm_refusal(policy, principal.user_id, c, conversation)}


def _fresh_preview(
    executor: ChatToolExecutor, principal: Principal, call: ToolCall
) -> dict[str, Any] | None:
    """A write's card drawn again from its target as the user sees it now, when its
    before side no longer holds (its digest, of the whole values, not of what the card
    kept); None when the card still holds."""
    if not call.mutates or not call.preview:
        return None
    fresh = preview_of(executor, principal.via_assistant(call.conversation_id), call)
    if fresh is None or before_digest(fresh) == before_digest(call.preview):
        return None
    return fresh


def _store_redrawn(principal: Principal, call: ToolCall, fresh: dict[str, Any]) -> None:
    """Store the card as it is now (the call stays PROPOSED, to be decided again)."""
    changed = db.session.execute(
        update(ToolCall)
        .where(ToolCall.id == call.id, ToolCall.status == ToolCallStatus.PROPOSED)
        .values(preview=fresh)
        .execution_options(synchronize_session=False)
    ).rowcount
    if changed != 1:
        db.session.rollback()
        raise Conflict(ALREADY_DECIDED)
    store.tool_call_event(principal.via_assistant(call.conversation_id), call, CallEvent.REDRAWN)
    db.session.commit()


def redrawn_ids(
    executor: ChatToolExecutor, principal: Principal, calls: Sequence[ToolCall]
) -> list[int]:
    """Read each write's target again, as the user, before it runs; store the card of
    each whose before side no longer holds and name them. The reads end once, after all
    of them (what one card read is not read again for the next)."""
    fresh = {c.id: _fresh_preview(executor, principal, c) for c in calls}
    db.session.rollback()  # the previews' reads: leave nothing open
    changed = [c for c in calls if fresh[c.id] is not None]
    for call in changed:
        _store_redrawn(principal, call, fresh[call.id])  # type: ignore[arg-type]
    return [c.id for c in changed]


def _as_checked(edited_at: Any) -> tuple[Any, ...]:
    """The condition that the call is still as checked: last edited at ``edited_at``
    (None: never), so an edit that lands after the checks makes the decision lose."""
    if edited_at is None:
        return (ToolCall.edited_at.is_(None),)
    return (ToolCall.edited_at == edited_at,)


def _lost(message: str, checked: Collection[int]) -> Callable[[ToolCall], Conflict]:
    """Why a conditional update changed nothing: decided meanwhile, or (a confirmed call)
    edited since it was checked, which asks again."""

    def lost(call: ToolCall) -> Conflict:
        current = db.session.get(ToolCall, call.id, populate_existing=True)
        edited = current is not None and current.status == ToolCallStatus.PROPOSED
        if call.id in checked and edited:
            return ProposalChanged(EDITED_SINCE, call_ids=[call.id])
        return Conflict(message)

    return lost


def decide(
    runner: Runner,
    calls: Sequence[ToolCall],
    decision: Decision,
    selected: Collection[int] | None = None,
) -> list[ToolCall]:
    """Decide one proposed write, or a step's writes together (``selected``: those a
    confirm confirms, the rest rejected), exactly once; the confirmed calls, in order.

    Checks, in this order, before anything is decided: expired (``ProposalExpired``);
    policy (``Forbidden``: not theirs to confirm, the runner's own check, an allowance
    refused); what each card showed, then each target, unchanged (``ProposalChanged``);
    then one transaction of conditional updates (``Conflict`` when decided meanwhile)."""
    actor = runner.actor
    already = GROUP_DECIDED if selected is not None else ALREADY_DECIDED
    if not calls:
        raise Conflict(already)
    conversation_id = calls[0].conversation_id
    if any(c.status == ToolCallStatus.EXPIRED or is_expired(c) for c in calls):
        expire_overdue(actor, conversation_id)
        raise ProposalExpired(expired_message())
    if any(c.status != ToolCallStatus.PROPOSED for c in calls):
        raise Conflict(already)
    if any(not c.mutates for c in calls):  # a question: answered on its card, never decided
        raise Conflict(NOT_A_WRITE)
    ids = [c.id for c in calls]
    chosen = [c for c in calls if decision.confirm and (selected is None or c.id in selected)]
    chosen_ids = [c.id for c in chosen]
    checked_edits = {c.id: c.edited_at for c in chosen}  # no edit may land after the checks
    # What the checks read of each call, kept apart from the session: a check that ends
    # its reads (a rollback) then costs no reload of every call after it.
    as_checked = {c.id: _snapshot(c) for c in chosen}

    policy = ApprovalPolicy.of(calls[0].org_id)
    conversation = db.session.get(Conversation, conversation_id)
    specs = {s.name: s for s in tool_executor().specs()} if decision.allow else {}
    for call in chosen:
        if refused := confirm_refusal(policy, actor.user_id, call, conversation):
            raise Forbidden(refused)
        if decision.allow and (refused := policy.allow_refusal(specs.get(call.name))):
            raise Forbidden(refused)
    if runner.check is not None:
        for call_id in chosen_ids:
            runner.check(as_checked[call_id])

    edited = [i for i in chosen_ids if not shows_current(as_checked[i], decision.shown.get(i))]
    if edited:
        raise ProposalChanged(EDITED_SINCE, call_ids=edited)
    changed = redrawn_ids(tool_executor(), actor, [as_checked[i] for i in chosen_ids])
    if changed:
        raise ProposalChanged(CHANGED_MESSAGE, call_ids=changed)

    # The calls as stored now, in one read, to settle (the checks may have ended reads).
    loaded = {
        c.id: c
        for c in db.session.scalars(
            select(ToolCall).where(ToolCall.id.in_(ids)).execution_options(populate_existing=True)
        )
    }
    if decision.allow:
        for call_id in chosen_ids:
            allowances.grant(actor, loaded[call_id], specs.get(loaded[call_id].name))
    settlements = [
        Settlement(loaded[i], ToolCallStatus.EXECUTING, holds=_as_checked(checked_edits[i]))
        if i in checked_edits
        else Settlement(loaded[i], ToolCallStatus.REJECTED, decision.reason)
        for i in ids
        if i in loaded
    ]
    if len(settlements) != len(ids):
        raise Conflict(already)
    # In the settlement's transaction: a decision that loses leaves no notification.
    notices.decided([loaded[i] for i in ids], actor.user_id, set(chosen_ids))
    settle(actor, settlements, _lost(already, set(chosen_ids)))
    return [loaded[i] for i in chosen_ids]


_CHECKED = (
    "id", "org_id", "conversation_id", "message_id", "name", "input", "mutates", "status",
    "preview", "edited_at", "edited_by_id",
)  # fmt: skip


def _snapshot(call: ToolCall) -> ToolCall:
    """A detached copy of what the checks read of ``call``."""
    return ToolCall(**{name: getattr(call, name) for name in _CHECKED})
