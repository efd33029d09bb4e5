"""“Allow <tool> for this conversation”: later calls of one tool, in one conversation, by one
user, run at once instead of asking.

A tool that declares a scope (``route.allow_scope``) is allowed on one target only: a
record tool on the model its allowed call named ("Allow updates to Tasks records for this
conversation"), never on another. An allowance trusts whatever asks for such a call later
in the conversation (the user, or text the model read: a record another member wrote, the
page); what it bounds is the tool and its target, and every such run still has Undo.

An allowance is offered only for a write its route says may be allowed
(``route.allowable``: creates and updates, never a delete, never automations' enable,
test runs or graphs), not for a tool the org's admins listed in ``chat_always_confirm``, and
not at all while the org's ``chat_allowances_enabled`` is off. All of that is checked again
each time a call would run under it, so an admin's change or a revoke applies at once.

An allowance belongs to its conversation and its user (never inherited by another of
either), and holds while the conversation was active within ``CHAT_ALLOWANCE_IDLE``; a
conversation left idle longer loses its allowances for good (``lapse_idle``, at the next
claim of its turn), so coming back later asks again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update

from monark.approvals import expiry
from monark.approvals.declared import allow_scope
from monark.approvals.models import Allowance
from monark.approvals.policy import ApprovalPolicy
from monark.chat.executor import ToolSpec
from monark.chat.models import Conversation, ToolCall, ToolCallStatus
from monark.chat.runtime import tool_executor
from monark.core.errors import Forbidden, NotFound
from monark.core.events import record_event
from monark.core.models import as_utc, utcnow
from monark.core.rbac import Principal
from monark.core.settings import chat_settings
from monark.extensions import db


def idle_seconds() -> float:
    """How long an allowance holds without activity in its conversation."""
    return chat_settings().allowance_idle


def _cutoff() -> datetime:
    return utcnow() - timedelta(seconds=idle_seconds())


def offered(org_id: int, spec: ToolSpec | None) -> bool:
    """Whether a card of ``spec`` offers “Allow … for this conversation”."""
    return ApprovalPolicy.of(org_id).allow_refusal(spec) is None


@dataclass(frozen=True)
class Reach:
    """What an allowance covers: a tool, and for a tool with a scope, its one target."""

    tool: str
    scope: str | None = None


def reach(spec: ToolSpec | None, call: ToolCall) -> Reach | None:
    """What allowing ``call`` would cover; None when its tool has a scope the call does not
    name (such a call is never allowed, nor runs under an allowance)."""
    if spec is None:
        return None
    scope = allow_scope(spec)
    if scope is None:
        return Reach(call.name)
    arguments = call.input if isinstance(call.input, dict) else {}
    target = arguments.get(scope.argument)
    if not isinstance(target, str) or not target:
        return None
    return Reach(call.name, target)


def _reach_of(allowance: Allowance) -> Reach:
    return Reach(allowance.tool, allowance.scope)


def _say(org_id: int, spec: ToolSpec | None, covered: Reach) -> str:
    if covered.scope is None:
        return covered.tool
    scope = allow_scope(spec)
    if scope is None:  # the tool lost its scope since
        return f"{covered.tool} on {covered.scope}"
    return scope.describe(org_id, covered.scope)


def offer(call: ToolCall, spec: ToolSpec | None) -> str | None:
    """What a waiting card of ``call`` offers to allow (“updates to Tasks records”, or the
    tool's name for a tool without a scope); None: it offers nothing."""
    covered = reach(spec, call)
    if covered is None or not offered(call.org_id, spec):
        return None
    return _say(call.org_id, spec, covered)


def described(allowance: Allowance) -> str:
    """What an allowance covers, in the words of the card that granted it."""
    spec = next((s for s in tool_executor().specs() if s.name == allowance.tool), None)
    return _say(allowance.org_id, spec, _reach_of(allowance))


def _live(conversation: Conversation | None) -> bool:
    active = as_utc(conversation.last_activity_at)
    return active is not None and active >= _cutoff()


def active(principal: Principal, conversation: Conversation) -> list[Allowance]:
    """The principal's allowances that hold in ``conversation`` now, oldest first."""
    if principal.user_id is None or not _live(conversation):
        return []
    return list(
        db.session.scalars(
            select(Allowance)
            .where(
                Allowance.org_id == principal.org_id,
                Allowance.conversation_id == conversation.id,
                Allowance.user_id == principal.user_id,
                Allowance.revoked_at.is_(None),
            )
            .order_by(Allowance.id)
        )
    )


def applies(
    principal: Principal,
    conversation: Conversation,
    spec: ToolSpec | None,
    call: ToolCall,
) -> bool:
    """Whether a just-proposed write runs at once under an allowance: the user's own, in
    this conversation, still holding, of this tool on this target, and the tool still one
    that may be allowed."""
    if not call.mutates or call.status != ToolCallStatus.PROPOSED:
        return False
    wanted = reach(spec, call)
    if wanted is None or ApprovalPolicy.of(principal.org_id).allow_refusal(spec) is not None:
        return False
    return any(_reach_of(a) == wanted for a in active(principal, conversation))


def grant(principal: Principal, call: ToolCall, spec: ToolSpec | None) -> Allowance:
    """Store an allowance of ``call``'s tool (on its target, for a tool with a scope) for
    its conversation and the principal, with its event, in the current transaction (the
    caller's decision commits it): ``Forbidden`` when it may not be allowed."""
    reason = ApprovalPolicy.of(principal.org_id).allow_refusal(spec)
    if reason is not None:
        raise Forbidden(reason)
    wanted = reach(spec, call)
    if wanted is None or spec is None:
        argument = scope.argument if (scope := allow_scope(spec)) else "target"
        raise Forbidden(f"{call.name} names no {argument}: it cannot be allowed.")
    conversation = db.session.get(Conversation, call.conversation_id)
    held = next((a for a in active(principal, conversation) if _reach_of(a) == wanted), None)
    if held is not None:  # allowed already (a second card of the same reach): one is enough
        return held
    allowance = Allowance(
        org_id=principal.org_id,
        conversation_id=call.conversation_id,
        user_id=principal.user_id,
        tool=wanted.tool,
        scope=wanted.scope,
    )
    db.session.add(allowance)
    db.session.flush()
    record_event(
        principal.via_assistant(call.conversation_id),
        "chat.allowance.granted",
        "allowance",
        allowance.id,
        {
            "conversation_id": call.conversation_id,
            "tool": call.name,
            "scope": wanted.scope,
            "tool_call_id": call.id,
        },
    )
    return allowance


def revoke(principal: Principal, allowance_id: int) -> Allowance:
    """Revoke one of the principal's own allowances (``NotFound`` for anyone else's); a
    second revoke changes nothing."""
    allowance = db.session.scalar(
        select(Allowance).where(
            Allowance.id == allowance_id,
            Allowance.org_id == principal.org_id,
            Allowance.user_id == principal.user_id,
        )
    )
    if allowance is None:
        raise NotFound("No such allowance.")
    changed = db.session.execute(
        update(Allowance)
        .where(Allowance.id == allowance.id, Allowance.revoked_at.is_(None))
        .values(revoked_at=utcnow())
        .execution_options(synchronize_session=False)
    ).rowcount
    if changed == 1:
        record_event(
            principal.via_assistant(allowance.conversation_id),
            "chat.allowance.revoked",
            "allowance",
            allowance.id,
            {
                "conversation_id": allowance.conversation_id,
                "tool": allowance.tool,
                "scope": allowance.scope,
            },
        )
    db.session.commit()
    db.session.refresh(allowance)
    return allowance


def lapse_idle(principal: Principal, conversation_id: int) -> int:
    """End, for good, the allowances of a conversation idle past ``CHAT_ALLOWANCE_IDLE``
    (called as a turn is claimed, before its message makes the conversation active again);
    how many lapsed."""
    conversation = db.session.get(Conversation, conversation_id)
    if conversation is None or _live(conversation):
        return 0
    lapsed = db.session.scalars(
        select(Allowance).where(
            Allowance.conversation_id == conversation_id, Allowance.revoked_at.is_(None)
        )
    ).all()
    for allowance in lapsed:
        allowance.revoked_at = utcnow()
        record_event(
            principal.via_assistant(conversation_id),
            "chat.allowance.lapsed",
            "allowance",
            allowance.id,
            {"conversation_id": conversation_id, "tool": allowance.tool, "scope": allowance.scope},
        )
    db.session.commit()
    return len(lapsed)


class AllowanceGate:
    """The chat loop's proposal gate (``chat.executor.ProposalGate``): a write runs at once
    under one of the user's allowances, a claimed turn first lapses idle ones, and a
    proposal expires after ``CHAT_APPROVAL_TTL``."""

    def runs_at_once(
        self, actor: Principal, conversation: Conversation, spec: ToolSpec | None, call: ToolCall
    ) -> bool:
        return applies(actor, conversation, spec, call)

    def on_claim(self, principal: Principal, conversation_id: int) -> None:
        lapse_idle(principal, conversation_id)

    def expire_overdue(self, principal: Principal, conversation_id: int) -> None:
        expiry.expire_overdue(principal, conversation_id)
