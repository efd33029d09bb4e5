"""One card: what a tool call's card is (its state) and what it offers (its actions).

Derived once, in Python, for every call of a thread (or a card drawn alone), from facts
loaded in a few batched reads (names, undone calls, conversations, the org's policy, the
members who may approve): no query per card. The panel thread, the card endpoints and the
Approvals inbox all draw a ``Card``; its templates (``templates/assistant/card/``) draw
the state and actions they are handed and decide nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import func, select

from monark.approvals import allowances, expiry, handover, undo
from monark.approvals.decision import shown_token
from monark.approvals.declared import locked
from monark.approvals.inbox import holders, permission_of
from monark.approvals.policy import ApprovalPolicy
from monark.assistant.ask_user import answer_of, question_of
from monark.assistant.result_view import ResultTable, result_table
from monark.chat.executor import ToolSpec
from monark.chat.models import Conversation, ConversationKind, ToolCall, ToolCallStatus
from monark.chat.runtime import tool_executor
from monark.core.bounds import bounded, clip
from monark.core.markdown import pretty_json
from monark.core.models import User, as_utc
from monark.core.settings import chat_settings
from monark.extensions import db

STATUS_TEXT = {
    ToolCallStatus.PROPOSED: "waiting for you",
    ToolCallStatus.EXECUTING: "running",
    ToolCallStatus.SUCCEEDED: "done",
    ToolCallStatus.FAILED: "failed",
    ToolCallStatus.REJECTED: "rejected",
    ToolCallStatus.EXPIRED: "expired",
}


class Where(StrEnum):
    """Where a card is drawn: in its requester's panel, or in an approver's inbox."""

    PANEL = "panel"
    INBOX = "inbox"


class CardState(StrEnum):
    """What a card is; each has its partial, ``templates/assistant/card/_<state>.html``."""

    READ = "read"  # a read's status card
    NAVIGATE = "navigate"  # "Go to …"
    QUESTION = "question"  # a question waiting for the user's answer (``ask_user``)
    ANSWERED = "answered"  # a question answered, passed over or expired
    RAN = "ran"  # a write that ran without a card: under an allowance, or an undo
    PROPOSED = "proposed"  # waiting, drawn alone in the panel
    GROUPED = "grouped"  # waiting, one line of a group decided together
    INBOX = "inbox"  # waiting, in an approver's inbox
    EXPIRED = "expired"  # nobody decided in time
    REFUSED = "refused"  # failed its checks before any card asked
    SKIPPED = "skipped"  # a new message was sent instead of a decision
    REJECTED = "rejected"
    DECIDED = "decided"  # confirmed: running, done or failed


class Action(StrEnum):
    """What a card offers (its buttons)."""

    CONFIRM = "confirm"
    REJECT = "reject"
    EDIT = "edit"
    ALLOW = "allow"  # "Allow … for this conversation"
    HAND_OVER = "hand_over"  # "Ask someone to approve"
    PICK = "pick"  # "Include this change" in a group
    UNDO = "undo"
    ANSWER = "answer"  # a question's choices and "Something else…"


@dataclass
class CallView:
    """The facts a card draws of one tool call (already bounded for the page)."""

    id: int
    name: str
    status: ToolCallStatus
    mutates: bool
    headline: str
    changes: list[dict[str, Any]]
    input_json: str
    result_json: str | None
    error: str | None
    decided_by: str | None
    decided_at: datetime | None
    reject_reason: str | None
    skipped: bool = False  # rejected because the user sent a new message instead of deciding
    nav_path: str | None = None
    nav_label: str | None = None
    warning: str | None = None
    details: list[dict[str, Any]] = field(default_factory=list)
    # Past its time (``CHAT_APPROVAL_TTL``): it can no longer be confirmed. A proposal
    # shows so before the next decision or message stores it as EXPIRED.
    expired: bool = False
    # Handed over ("Ask someone to approve"): whom it waits for, and who asked.
    approver: str | None = None
    handed_by: str | None = None
    # Members the requester may ask (they hold the tool's permission; the requester is
    # left out); whether the org's four eyes keep the requester's Confirm away.
    approvers: list[tuple[int, str]] = field(default_factory=list)
    four_eyes: bool = False
    makers: frozenset[int] = frozenset()  # under four eyes, who may never confirm it
    from_key: bool = False  # an API key's held write (its arguments are the key's, not a model's)
    approver_gone: bool = False  # handed to a member who can no longer approve it
    # A list's or a query's result as a table (and a chart, when its shape fits one).
    table: ResultTable | None = None
    # Edited before the decision: by whom, when, and what the assistant had proposed.
    edited_by: str | None = None
    edited_at: datetime | None = None
    original_json: str | None = None
    editable: bool = False  # its tool has arguments a person may change
    # What a waiting card may allow for the conversation (“updates to Tasks records”); ran
    # at once under an allowance; the call this one undoes; may it be undone now, or was it.
    allow_label: str | None = None
    allowed: bool = False
    undo_of: int | None = None
    can_undo: bool = False
    undone: bool = False
    # The token of the arguments this card shows, sent with its decision (``approvals.edits``).
    shown: str = ""
    # A question to the user (``ask_user``): what it asks, its choices, the answer given.
    asks_user: bool = False
    question: str = ""
    choices: list[str] = field(default_factory=list)
    answer: str | None = None

    @property
    def waiting(self) -> bool:
        """A proposal the user may still decide."""
        return self.status == ToolCallStatus.PROPOSED and not self.expired

    @property
    def refused_before_asking(self) -> bool:
        """A write that failed its checks before any card asked the user."""
        return self.mutates and self.status == ToolCallStatus.FAILED and self.decided_at is None

    @property
    def status_text(self) -> str:
        return STATUS_TEXT.get(self.status, str(self.status).lower())

    @property
    def kind(self) -> str:
        if self.asks_user:
            return "question"
        if self.name == "navigate":
            return "navigate"
        return "write" if self.mutates else "read"


@dataclass(frozen=True)
class Card:
    """A card as drawn: the call's facts, what it is, and what it offers."""

    call: CallView
    state: CardState
    actions: frozenset[Action] = frozenset()
    group_id: int | None = None  # the message whose writes wait together, for a GROUPED line
    handover_error: str | None = None  # why "Ask someone to approve" just failed

    @property
    def partial(self) -> str:
        return f"assistant/card/_{self.state}.html"

    @property
    def status(self) -> str:
        """Its status as the page marks it (``data-status``): an overdue proposal is EXPIRED."""
        return ToolCallStatus.EXPIRED if self.call.expired else self.call.status

    @property
    def small(self) -> bool:
        return self.state == CardState.RAN

    @property
    def verb(self) -> str:
        """How a write card's head starts: it wants, did not, or asked to."""
        if self.state in (CardState.PROPOSED, CardState.GROUPED, CardState.INBOX):
            return "Wants to"
        if self.state == CardState.REFUSED:
            return "Wants to"
        if self.state in (CardState.REJECTED, CardState.SKIPPED, CardState.EXPIRED):
            return "Did not"
        return "Asked to"

    @property
    def warning(self) -> str | None:
        """The preview's warning (the role lacks the permission), unless handed over."""
        return None if self.call.approver else self.call.warning

    @property
    def waiting_note(self) -> str | None:
        """Why a waiting card is not the requester's to confirm: ``gone`` (handed to a
        member who can no longer approve it), ``handed``, ``four_eyes``; None otherwise."""
        if self.state not in (CardState.PROPOSED, CardState.GROUPED):
            return None
        if self.call.approver:
            return "gone" if self.call.approver_gone else "handed"
        return "four_eyes" if self.call.four_eyes else None

    @property
    def decided_by_other(self) -> bool:
        """Decided by another member than the one who asked (a hand-over)."""
        return bool(self.call.handed_by and self.call.decided_by != self.call.handed_by)

    def offers(self, action: str) -> bool:
        return action in self.actions


def card_of(
    view: CallView,
    where: Where = Where.PANEL,
    group_id: int | None = None,
    handover_error: str | None = None,
    reader: int | None = None,
) -> Card:
    """What ``view``'s card is and offers, drawn ``where`` (``group_id``: the message
    whose writes wait together; ``reader``: the inbox's member). The one place a card's
    policy is read."""

    def card(state: CardState, *actions: Action | None) -> Card:
        offered = frozenset(a for a in actions if a is not None)
        return Card(view, state, offered, group_id, handover_error)

    if view.kind == "question":  # none of a write's approval actions apply
        return card(CardState.QUESTION, Action.ANSWER) if view.waiting else card(CardState.ANSWERED)
    if view.kind == "navigate" and view.nav_path:
        return card(CardState.NAVIGATE)
    if view.kind != "write":
        return card(CardState.READ)
    undo_action = Action.UNDO if view.can_undo else None
    if view.allowed or view.undo_of:
        return card(CardState.RAN, undo_action)
    if view.expired:
        return card(CardState.EXPIRED)
    if view.status == ToolCallStatus.PROPOSED:
        edit = Action.EDIT if view.editable else None
        if where == Where.INBOX:
            # Four eyes: who set its arguments, or made the key, never confirms it.
            confirm = None if reader in view.makers else Action.CONFIRM
            return card(CardState.INBOX, Action.REJECT, confirm, edit)
        # Not the requester's to confirm: handed to someone, or four eyes.
        theirs = not view.approver and not view.four_eyes
        hand_over = (
            Action.HAND_OVER
            if view.approvers and (not view.approver or view.approver_gone)
            else None
        )
        if group_id is not None:
            if not theirs:  # Confirm selected leaves it waiting
                return card(CardState.GROUPED, hand_over)
            return card(CardState.GROUPED, Action.PICK, edit, hand_over)
        return card(
            CardState.PROPOSED,
            Action.REJECT,
            edit if not view.approver else None,
            Action.CONFIRM if theirs else None,
            Action.ALLOW if theirs and view.allow_label else None,
            hand_over,
        )
    if view.refused_before_asking:
        return card(CardState.REFUSED)
    if view.status == ToolCallStatus.REJECTED:
        return card(CardState.SKIPPED if view.skipped else CardState.REJECTED)
    return card(CardState.DECIDED, undo_action)


# ---- the facts, for many calls at once --------------------------------------------------------


@dataclass
class _Lookups:
    """What the cards of a set of calls read, each in one query for all of them."""

    names: dict[int, str]
    undone: set[int]
    conversations: dict[int, Conversation]
    specs: dict[str, ToolSpec]
    editable: frozenset[str]
    policies: dict[int, ApprovalPolicy] = field(default_factory=dict)
    holding: dict[tuple[int, str], list[tuple[int, str, str]]] = field(default_factory=dict)

    @classmethod
    def of(cls, calls: Sequence[ToolCall], names: dict[int, str] | None) -> _Lookups:
        specs = {s.name: s for s in tool_executor().specs()}
        waiting = {c.conversation_id for c in calls if c.mutates and _waiting(c)}
        conversations: dict[int, Conversation] = {}
        if waiting:
            conversations = {
                c.id: c
                for c in db.session.scalars(
                    select(Conversation).where(Conversation.id.in_(waiting))
                )
            }
        return cls(
            names=names if names is not None else user_names(people_of(calls)),
            undone=undo.undone_ids([c.id for c in calls if undo.undoable(c)]),
            conversations=conversations,
            specs=specs,
            editable=frozenset(
                s.name
                for s in specs.values()
                if s.mutates and set(s.input_schema.get("properties", {})) - set(locked(s))
            ),
        )

    def policy(self, org_id: int) -> ApprovalPolicy:
        if org_id not in self.policies:
            self.policies[org_id] = ApprovalPolicy.of(org_id)
        return self.policies[org_id]

    def holders(self, org_id: int, permission: str) -> list[tuple[int, str, str]]:
        key = (org_id, permission)
        if key not in self.holding:
            self.holding[key] = holders(org_id, permission)
        return self.holding[key]


def _waiting(call: ToolCall) -> bool:
    return call.status == ToolCallStatus.PROPOSED and not expiry.is_expired(call)


def user_names(ids: set[int]) -> dict[int, str]:
    """Members' names by id, in one query."""
    if not ids:
        return {}
    rows = db.session.execute(select(User.id, User.name).where(User.id.in_(ids)))
    return {row.id: row.name for row in rows}


def people_of(calls: Sequence[ToolCall]) -> set[int]:
    """The members a set of cards names (who decided, who edited, whom it was handed to
    and who asked)."""
    return {
        i
        for c in calls
        for i in (c.decided_by_id, c.edited_by_id, c.approver_id, c.handed_by_id)
        if i
    }


def _shown(value: Any) -> str:
    """A card's block of JSON (arguments, a result), within ``CHAT_CARD_MAX`` characters."""
    return clip(pretty_json(value), chat_settings().card_max)


def _changes_shown(changes: Any) -> list[dict[str, Any]]:
    """A card's before → after rows, within ``CHAT_CARD_MAX`` (bounded when stored, by
    ``approvals.shown.kept_preview``, and again here for a card stored before every storer
    did); a cut's marker is a row of its own, saying what was left out."""
    kept = bounded(changes if isinstance(changes, list) else [], chat_settings().card_max)
    return [c if isinstance(c, dict) else {"field": "…", "after": str(c)} for c in kept]


def call_views(
    calls: Sequence[ToolCall],
    names: dict[int, str] | None = None,
    previews: dict[int, dict[str, Any]] | None = None,
) -> list[CallView]:
    """The facts of each call's card, read for all of them at once (``previews``: a card
    as drawn for someone else than the one it was stored for, by call id)."""
    looked = _Lookups.of(calls, names)
    return [_call_view(c, looked, (previews or {}).get(c.id)) for c in calls]


def call_view(
    call: ToolCall,
    names: dict[int, str] | None = None,
    preview: dict[str, Any] | None = None,
) -> CallView:
    """The facts of one call's card."""
    return call_views([call], names, {call.id: preview} if preview else None)[0]


def _call_view(call: ToolCall, looked: _Lookups, preview: dict[str, Any] | None = None) -> CallView:
    names = looked.names
    preview = preview or call.preview or {}
    result = call.result
    nav_path = nav_label = None
    done = call.status == ToolCallStatus.SUCCEEDED
    if call.name == "navigate" and done and isinstance(result, dict):
        nav_path, nav_label = result.get("path"), result.get("label")
    failed = call.status == ToolCallStatus.FAILED and isinstance(result, dict)
    view = CallView(
        id=call.id,
        name=call.name,
        status=call.status,
        mutates=call.mutates,
        headline=preview.get("headline") or f"run {call.name}",
        changes=_changes_shown(preview.get("changes")),
        input_json=_shown(call.input),
        result_json=_shown(result) if result is not None else None,
        error=clip(call.error, chat_settings().card_max) if call.error else None,
        decided_by=names.get(call.decided_by_id) if call.decided_by_id else None,
        decided_at=as_utc(call.decided_at),
        reject_reason=call.reject_reason,
        skipped=call.skipped,
        nav_path=nav_path,
        nav_label=nav_label,
        table=result_table(call.name, call.input, result) if done else None,
        warning=preview.get("warning"),
        details=list(result.get("details") or []) if failed else [],
        expired=call.status == ToolCallStatus.EXPIRED or expiry.is_expired(call),
        approver=names.get(call.approver_id) if call.approver_id else None,
        handed_by=names.get(call.handed_by_id) if call.handed_by_id else None,
        edited_by=names.get(call.edited_by_id) if call.edited_by_id else None,
        edited_at=as_utc(call.edited_at),
        original_json=_shown(call.original_input) if call.original_input else None,
        editable=call.mutates and call.name in looked.editable,
        shown=shown_token(call.input) if call.status == ToolCallStatus.PROPOSED else "",
        allowed=call.allowed,
        undo_of=call.undo_of_id,
    )
    spec = looked.specs.get(call.name)
    if spec is not None and spec.asks_user and not call.mutates:
        _question_facts(view, call)
    if call.mutates and call.status == ToolCallStatus.PROPOSED:
        view.allow_label = allowances.offer(call, looked.specs.get(call.name))
    if undo.undoable(call):
        view.undone = call.id in looked.undone
        refusal = undo.four_eyes_refusal(call, looked.policy(call.org_id))
        view.can_undo = not view.undone and not refusal
    if view.waiting and call.mutates:
        _hand_over_facts(view, call, looked)
    return view


def _question_facts(view: CallView, call: ToolCall) -> None:
    """A question's card: what it asks, its choices, and the answer given (model text and
    the user's, escaped where drawn)."""
    question, choices = question_of(call)
    limit = chat_settings().card_max
    view.asks_user = True
    view.question = clip(question, limit)
    view.choices = [clip(c, limit) for c in choices]
    answer = answer_of(call)
    view.answer = clip(answer, limit) if answer is not None else None


def _hand_over_facts(view: CallView, call: ToolCall, looked: _Lookups) -> None:
    """A waiting write's hand-over: the members who may approve it, and whether four eyes
    keeps the requester's Confirm away (they last set its arguments)."""
    executor = tool_executor()
    conversation = looked.conversations.get(call.conversation_id)
    permission = permission_of(executor, call.name)
    if permission is not None:
        holding = looked.holders(call.org_id, permission)
        may = {uid for uid, _, _ in holding}
        # Handed to someone whose role lost the permission (or who left): ask someone else.
        view.approver_gone = call.approver_id is not None and call.approver_id not in may
        if call.approver_id is None or view.approver_gone:
            view.approvers = handover.approvers(executor, call, conversation, holding)
    requester = conversation.creator_id if conversation is not None else None
    view.makers = frozenset(looked.policy(call.org_id).makers(call, conversation))
    view.from_key = conversation is not None and conversation.kind == ConversationKind.API
    view.four_eyes = requester in view.makers


def group_of(call: ToolCall) -> int | None:
    """The group a card drawn alone stands in: its message, when several writes of that
    step wait together (they are decided on one card)."""
    if call.status != ToolCallStatus.PROPOSED or not call.mutates:
        return None
    waiting = db.session.scalar(
        select(func.count()).where(
            ToolCall.message_id == call.message_id,
            ToolCall.status == ToolCallStatus.PROPOSED,
            ToolCall.mutates.is_(True),
        )
    )
    return call.message_id if (waiting or 0) > 1 else None


def panel_card(call: ToolCall, handover_error: str | None = None) -> Card:
    """A card drawn alone in the panel, as it stands in its thread (in its group, when
    its step's writes wait together)."""
    view = call_view(call)
    group_id = group_of(call) if view.waiting else None
    return card_of(view, Where.PANEL, group_id, handover_error)
