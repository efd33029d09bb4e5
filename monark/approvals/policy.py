"""One org's approval policy: four eyes, the tools that always ask, allowances on or off.

Read once per decision (``ApprovalPolicy.of``), it answers every question the decision
paths ask of the org's settings, so no path reads them on its own.

Four eyes is maker-checker: for a four-eyes tool, whoever last set a call's arguments (the
member who asked, or the one who edited it since) never confirms it, and neither does the
creator of the API key that asked for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from monark.approvals.declared import allowable
from monark.chat.executor import ToolSpec
from monark.chat.models import Conversation, ConversationKind, ToolCall
from monark.core.models import Org
from monark.extensions import db

SWITCHED_OFF = "Allowing a tool for a conversation is switched off in this organization."


@dataclass(frozen=True)
class ApprovalPolicy:
    """What the org says about deciding writes."""

    four_eyes_tools: frozenset[str] = frozenset()
    always_confirm: frozenset[str] = frozenset()
    allowances_enabled: bool = False

    @classmethod
    def of(cls, org_id: int) -> ApprovalPolicy:
        """The org's policy as stored now (an org that is gone allows nothing)."""
        org = db.session.get(Org, org_id)
        if org is None:
            return cls()
        return cls(
            frozenset(org.chat_four_eyes or []),
            frozenset(org.chat_always_confirm or []),
            bool(org.chat_allowances_enabled),
        )

    def four_eyes(self, tool: str) -> bool:
        """Whether another member than its maker must confirm each write of ``tool``."""
        return tool in self.four_eyes_tools

    def makers(self, call: ToolCall, conversation: Conversation | None) -> set[int]:
        """Who may not confirm ``call`` under four eyes (empty for any other tool): whoever
        last set its arguments, and for a key's write the key's creator."""
        if not self.four_eyes(call.name):
            return set()
        asker = conversation.creator_id if conversation is not None else None
        if call.handed_by_id is not None:
            asker = call.handed_by_id
        makers = {call.edited_by_id or asker}
        if conversation is not None and conversation.kind == ConversationKind.API:
            makers.add(conversation.creator_id)  # the key's creator, whoever edited it
        return {m for m in makers if m is not None}

    def allow_refusal(self, spec: ToolSpec | None) -> str | None:
        """Why ``spec`` may not be allowed for a conversation (None: it may)."""
        if not self.allowances_enabled:
            return SWITCHED_OFF
        if spec is None or not spec.mutates:
            return "Only a write can be allowed."
        if not allowable(spec):
            return f"{spec.name} always asks: deletes and risky writes cannot be allowed."
        if spec.name in self.always_confirm:
            return f"An admin set {spec.name} to always ask in this organization."
        if self.four_eyes(spec.name):
            return f"{spec.name} needs another member's approval here (four eyes)."
        return None
