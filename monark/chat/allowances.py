"""“Allow <tool> for this conversation”: later calls of one tool, in one conversation, by one
user, run at once instead of asking (issue 14, point 3).

An allowance is offered only for a write its route says may be allowed
(``ToolSpec.allowable``: creates and updates, never a delete, never automations' enable,
test runs or graphs), not for a tool the org's admins listed in ``chat_always_confirm``, and
not at all while the org's ``chat_allowances_enabled`` is off. All of that is checked again
each time a call would run under it, so an admin's change or a revoke applies at once.

An allowance belongs to its conversation and its user (never inherited by another of
either), and holds while the conversation was active within ``CHAT_ALLOWANCE_IDLE``; a
conversation left idle longer loses its allowances for good (``lapse_idle``, at the next
claim of its turn), so coming back later asks again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import select, update

from monark.chat.models import Allowance, Conversation, ToolCall, ToolCallStatus
from monark.chat.runtime import tool_executor
from monark.chat.tools import ToolSpec
from monark.core.errors import Forbidden, NotFound
from monark.core.events import record_event
from monark.core.models import Org, as_utc, utcnow
from monark.core.rbac import Principal
from monark.extensions import db

DEFAULT_IDLE = 3600.0
SWITCHED_OFF = "Allowing a tool for a conversation is switched off in this organization."


def idle_seconds(config: Mapping[str, Any] | None = None) -> float:
    """How long an allowance holds without activity in its conversation."""
    config = config if config is not None else current_app.config
    return float(config.get("CHAT_ALLOWANCE_IDLE") or DEFAULT_IDLE)


def _cutoff(config: Mapping[str, Any] | None = None) -> datetime:
    return utcnow() - timedelta(seconds=idle_seconds(config))


def refusal(org: Org | None, spec: ToolSpec | None) -> str | None:
    """Why ``spec`` may not be allowed in ``org`` (None: it may)."""
    if org is None or not org.chat_allowances_enabled:
        return SWITCHED_OFF
    if spec is None or not spec.mutates:
        return "Only a write can be allowed."
    if not spec.allowable:
        return f"{spec.name} always asks: deletes and risky writes cannot be allowed."
    if spec.name in (org.chat_always_confirm or []):
        return f"An admin set {spec.name} to always ask in this organization."
    if spec.name in (org.chat_four_eyes or []):
        # Four eyes (``chat.handover``): another member decides each of its writes.
        return f"{spec.name} needs another member's approval here (four eyes)."
    return None


def offered(org_id: int, spec: ToolSpec | None) -> bool:
    """Whether a card of ``spec`` offers “Allow … for this conversation”."""
    return refusal(db.session.get(Org, org_id), spec) is None


def _live(conversation: Conversation, config: Mapping[str, Any] | None) -> bool:
    active = as_utc(conversation.last_activity_at)
    return active is not None and active >= _cutoff(config)


def active(
    principal: Principal, conversation: Conversation, config: Mapping[str, Any] | None = None
) -> list[Allowance]:
    """The principal's allowances that hold in ``conversation`` now, oldest first."""
    if principal.user_id is None or not _live(conversation, config):
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
    config: Mapping[str, Any] | None = None,
) -> bool:
    """Whether a just-proposed write runs at once under an allowance: the user's own, in
    this conversation, still holding, and the tool still one that may be allowed."""
    if not call.mutates or call.status != ToolCallStatus.PROPOSED or spec is None:
        return False
    if refusal(db.session.get(Org, principal.org_id), spec) is not None:
        return False
    return any(a.tool == call.name for a in active(principal, conversation, config))


def grant(principal: Principal, call: ToolCall, spec: ToolSpec | None) -> Allowance:
    """Store an allowance of ``call``'s tool for its conversation and the principal, with
    its event, in the current transaction (the caller's decision commits it): ``Forbidden``
    when the tool may not be allowed."""
    reason = refusal(db.session.get(Org, principal.org_id), spec)
    if reason is not None:
        raise Forbidden(reason)
    conversation = db.session.get(Conversation, call.conversation_id)
    held = next((a for a in active(principal, conversation) if a.tool == call.name), None)
    if held is not None:  # allowed already (a second card of the same tool): one is enough
        return held
    allowance = Allowance(
        org_id=principal.org_id,
        conversation_id=call.conversation_id,
        user_id=principal.user_id,
        tool=call.name,
    )
    db.session.add(allowance)
    db.session.flush()
    record_event(
        principal.via_assistant(call.conversation_id),
        "chat.allowance.granted",
        "allowance",
        allowance.id,
        {"conversation_id": call.conversation_id, "tool": call.name, "tool_call_id": call.id},
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
            {"conversation_id": allowance.conversation_id, "tool": allowance.tool},
        )
    db.session.commit()
    db.session.refresh(allowance)
    return allowance


def lapse_idle(
    principal: Principal, conversation_id: int, config: Mapping[str, Any] | None = None
) -> int:
    """End, for good, the allowances of a conversation idle past ``CHAT_ALLOWANCE_IDLE``
    (called as a turn is claimed, before its message makes the conversation active again);
    how many lapsed."""
    conversation = db.session.get(Conversation, conversation_id)
    if conversation is None or _live(conversation, config):
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
            {"conversation_id": conversation_id, "tool": allowance.tool},
        )
    db.session.commit()
    return len(lapsed)


def granting(principal: Principal) -> Callable[[ToolCall], None]:
    """What a confirm with “Allow <tool> for this conversation” adds to its decision
    (``service.begin_decision(on_confirm=...)``): the allowance, or a refusal."""

    def grant_for(call: ToolCall) -> None:
        specs = {s.name: s for s in tool_executor().specs()}
        grant(principal, call, specs.get(call.name))

    return grant_for
