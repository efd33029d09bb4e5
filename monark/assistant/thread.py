"""Plain view data for the panel: messages and tool-call cards, safe to hand across threads."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from markupsafe import Markup
from sqlalchemy import func, select

from monark.approvals import allowances, handover, undo
from monark.approvals.decision import shown_token
from monark.approvals.inbox import holders, permission_of
from monark.approvals.policy import ApprovalPolicy
from monark.chat import decisions, store
from monark.chat.models import (
    Conversation,
    Message,
    MessageRole,
    MessageStatus,
    ToolCall,
    ToolCallStatus,
)
from monark.chat.runtime import tool_executor
from monark.chat.turn import lease
from monark.core.bounds import bounded, clip
from monark.core.markdown import pretty_json, render_markdown
from monark.core.models import User, as_utc
from monark.core.money import money_text
from monark.core.rbac import Principal
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


@dataclass
class CallView:
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
    # left out by the card); whether the org's four eyes keep the requester's Confirm away.
    approvers: list[tuple[int, str]] = field(default_factory=list)
    four_eyes: bool = False
    approver_gone: bool = False  # handed to a member who can no longer approve it
    # Edited before the decision: by whom, when, and what the assistant had proposed.
    edited_by: str | None = None
    edited_at: datetime | None = None
    original_json: str | None = None
    editable: bool = False  # its tool has arguments a person may change
    # Allowances and undo (``approvals.allowances``, ``approvals.undo``): what a waiting card may
    # allow for the conversation (“updates to Tasks records”); ran at once under an
    # allowance; the call this one undoes; whether it may be undone now, or was.
    allow_label: str | None = None
    allowed: bool = False
    undo_of: int | None = None
    can_undo: bool = False
    undone: bool = False
    # The token of the arguments this card shows, sent with its decision (``approvals.edits``).
    shown: str = ""

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
        if self.name == "navigate":
            return "navigate"
        return "write" if self.mutates else "read"


@dataclass
class MessageView:
    id: int
    conversation_id: int
    role: str
    text: str
    html: Markup
    status: str
    error: str | None
    created_at: datetime | None
    calls: list[CallView] = field(default_factory=list)
    provider: str | None = None  # which provider and model wrote a reply
    model: str | None = None
    author_kind: str = "agent"
    usage: ReplyUsage | None = None  # a reply's tokens and cost (its details)

    @property
    def is_step(self) -> bool:
        """A step of the conversation, for its foot (Retry): not a summary, and not a
        person's own note (an undo), which leaves the reply before it as the last word."""
        return self.role != MessageRole.SUMMARY and not (
            self.role == MessageRole.NOTE and self.author_kind == "user"
        )

    @property
    def waiting_writes(self) -> list[CallView]:
        """Its writes still waiting for a decision."""
        return [c for c in self.calls if c.kind == "write" and c.waiting]

    @property
    def group(self) -> bool:
        """Several writes of one step wait: they are decided together, on one card."""
        return len(self.waiting_writes) > 1


def _user_names(ids: set[int]) -> dict[int, str]:
    if not ids:
        return {}
    rows = db.session.execute(select(User.id, User.name).where(User.id.in_(ids)))
    return {row.id: row.name for row in rows}


def _hand_over_view(view: CallView, call: ToolCall) -> None:
    """A waiting write's hand-over: the members who may approve it, and whether four eyes
    keeps the requester's Confirm away (they last set its arguments)."""
    if not (view.waiting and call.mutates):
        return
    executor = tool_executor()
    permission = permission_of(executor, call.name)
    if permission is not None:
        may = {uid for uid, _, _ in holders(call.org_id, permission)}
        # Handed to someone whose role lost the permission (or who left): ask someone else.
        view.approver_gone = call.approver_id is not None and call.approver_id not in may
        if call.approver_id is None or view.approver_gone:
            view.approvers = handover.approvers(executor, call)
    conversation = db.session.get(Conversation, call.conversation_id)
    requester = conversation.creator_id if conversation is not None else None
    view.four_eyes = requester in ApprovalPolicy.of(call.org_id).makers(call, conversation)


def _shown(value: Any) -> str:
    """A card's block of JSON (arguments, a result), within ``CHAT_CARD_MAX`` characters."""
    return clip(pretty_json(value), chat_settings().card_max)


def _changes_shown(changes: Any) -> list[dict[str, Any]]:
    """A card's before → after rows, within ``CHAT_CARD_MAX`` (bounded when stored, by
    ``kept_preview``, and again here for a card stored before every storer did); a cut's
    marker is a row of its own, saying what was left out."""
    kept = bounded(changes if isinstance(changes, list) else [], chat_settings().card_max)
    return [c if isinstance(c, dict) else {"field": "…", "after": str(c)} for c in kept]


def call_view(
    call: ToolCall,
    names: dict[int, str] | None = None,
    preview: dict[str, Any] | None = None,
) -> CallView:
    """A card's data for one tool call (``preview``: the card as drawn for someone else
    than the one it was stored for)."""
    if names is None:
        names = _user_names(people_of([call]))
    preview = preview or call.preview or {}
    headline = preview.get("headline") or f"run {call.name}"
    result = call.result
    nav_path = nav_label = None
    if (
        call.name == "navigate"
        and call.status == ToolCallStatus.SUCCEEDED
        and isinstance(result, dict)
    ):
        nav_path, nav_label = result.get("path"), result.get("label")
    view = CallView(
        id=call.id,
        name=call.name,
        status=call.status,
        mutates=call.mutates,
        headline=headline,
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
        warning=preview.get("warning"),
        details=list(result.get("details") or [])
        if call.status == ToolCallStatus.FAILED and isinstance(result, dict)
        else [],
        expired=call.status == ToolCallStatus.EXPIRED or decisions.is_expired(call),
        approver=names.get(call.approver_id) if call.approver_id else None,
        handed_by=names.get(call.handed_by_id) if call.handed_by_id else None,
        edited_by=names.get(call.edited_by_id) if call.edited_by_id else None,
        edited_at=as_utc(call.edited_at),
        original_json=_shown(call.original_input) if call.original_input else None,
        editable=call.mutates and call.name in editable_tools(),
        shown=shown_token(call.input) if call.status == ToolCallStatus.PROPOSED else "",
        **_approval_state(call),
    )
    _hand_over_view(view, call)
    return view


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


def people_of(calls) -> set[int]:
    """The members a set of cards names (who decided, who edited, whom it was handed to
    and who asked)."""
    return {
        i
        for c in calls
        for i in (c.decided_by_id, c.edited_by_id, c.approver_id, c.handed_by_id)
        if i
    }


def editable_tools() -> frozenset[str]:
    """The tools whose proposed calls a person may edit: writes with arguments other than
    those naming their target."""
    specs = tool_executor().specs()
    return frozenset(
        s.name
        for s in specs
        if s.mutates and set(s.input_schema.get("properties", {})) - set(s.locked)
    )


def _approval_state(call: ToolCall) -> dict[str, Any]:
    """What a card says of allowances and undo."""
    state: dict[str, Any] = {"allowed": call.allowed, "undo_of": call.undo_of_id}
    if call.mutates and call.status == ToolCallStatus.PROPOSED:
        spec = next((s for s in tool_executor().specs() if s.name == call.name), None)
        state["allow_label"] = allowances.offer(call, spec)
    if undo.undoable(call):
        undone = undo.undo_of(call.id) is not None
        state |= {"undone": undone, "can_undo": not undone and not undo.four_eyes_refusal(call)}
    return state


@dataclass(frozen=True)
class ReplyUsage:
    """What one reply used: input (not cached), output and cached tokens, and its cost."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost: Decimal | None  # None: unknown (no price for the model, or no usage reported)

    @classmethod
    def of(cls, message: Message) -> ReplyUsage | None:
        """A finished reply's usage, None for other messages."""
        if message.role != MessageRole.ASSISTANT or message.status == MessageStatus.STREAMING:
            return None
        return cls(
            message.input_tokens,
            message.output_tokens,
            message.cache_read_tokens,
            message.cache_creation_tokens,
            message.cost,
        )

    @property
    def cost_text(self) -> str:
        """The cost as people read it: dollars to the cent, or to the first figure below."""
        return money_text(self.cost)


def message_view(message: Message, names: dict[int, str] | None = None) -> MessageView:
    """A bubble's data; assistant text is rendered from Markdown and sanitized."""
    # A reply still streaming has no calls yet (they are stored with its end).
    # An undo's note carries its call too (``approvals.undo``).
    has_calls = message.role in (MessageRole.ASSISTANT, MessageRole.NOTE) and (
        message.status != MessageStatus.STREAMING
    )
    calls = list(message.tool_calls) if has_calls else []
    if names is None:
        names = _user_names(people_of(calls))
    # A reply still streaming is plain text until it is whole (its Markdown may be cut);
    # a summary is the model's text too, rendered the same way.
    markdown = message.role == MessageRole.SUMMARY or (
        message.role == MessageRole.ASSISTANT and message.status != MessageStatus.STREAMING
    )
    html = render_markdown(message.text) if markdown else Markup("")
    return MessageView(
        author_kind=message.author_kind,
        id=message.id,
        conversation_id=message.conversation_id,
        role=message.role,
        text=message.text,
        html=html,
        status=message.status,
        error=message.error,
        created_at=as_utc(message.created_at),
        calls=[call_view(c, names) for c in calls],
        provider=message.provider,
        model=message.model,
        usage=ReplyUsage.of(message),
    )


RETRY_AFTER = ("error", "incomplete", "unanswered")


@dataclass(frozen=True)
class ThreadFoot:
    """What the thread's foot shows: a card waiting, a reply being written, or Retry."""

    waiting: bool  # a proposed write still waits for the user's decision
    running: bool  # a turn is being written (in another tab, window or instance)
    retry: bool  # the last reply broke off or never came
    # What waits is not the user's to confirm: handed to another member, or four eyes;
    # those calls, which an open panel waits for another member to decide.
    elsewhere: bool = False
    awaited: tuple[int, ...] = ()

    @classmethod
    def of(cls, waiting: bool, running: bool, last: tuple[str, str] | None) -> ThreadFoot:
        """From the last message's ``(role, status)``."""
        retry = False
        if last is not None and last[0] != "note" and not running:
            role, status = last
            state = "unanswered" if role == "user" else status
            retry = state in RETRY_AFTER or state == "streaming"  # "streaming": interrupted
        return cls(waiting, running, retry)


def thread_tail(principal: Principal, conversation_id: int) -> tuple[str, ThreadFoot]:
    """The title and the foot as stored now, without loading the thread (three queries)."""
    conversation = store.get_conversation(principal, conversation_id)
    last, waiting = store.tail_state(conversation.id, decisions.cutoff())
    foot = ThreadFoot.of(waiting, lease.live_turn_id(conversation) is not None, last)
    return conversation.title, foot


@dataclass(frozen=True)
class AllowanceView:
    """One line of the allowance list: what it covers, in the card's words."""

    id: int
    tool: str
    label: str  # “updates to Tasks records”; the tool's name for a tool without a scope


def allowance_views(principal: Principal, conversation: Conversation) -> list[AllowanceView]:
    """The principal's allowances that hold in ``conversation`` now, as the list shows them."""
    return [
        AllowanceView(a.id, a.tool, allowances.described(a))
        for a in allowances.active(principal, conversation)
    ]


@dataclass
class ThreadView:
    conversation_id: int | None
    title: str
    messages: list[MessageView]
    turn_id: str | None = None  # the turn being written now (here, in another tab, anywhere)
    # The user's allowances that hold in this conversation now (``approvals.allowances``).
    allowances: list[AllowanceView] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.turn_id is not None

    @property
    def foot(self) -> ThreadFoot:
        waiting = any(c.waiting for m in self.messages for c in m.calls)
        # A summary or an undo is no step: the message before it says where things are.
        steps = [m for m in self.messages if m.is_step]
        last = (steps[-1].role, steps[-1].status) if steps else None
        foot = ThreadFoot.of(waiting, self.running, last)
        open_calls = [c for m in self.messages for c in m.calls if c.waiting]
        if open_calls and all(c.approver or c.four_eyes for c in open_calls):
            foot = replace(foot, elsewhere=True, awaited=tuple(c.id for c in open_calls))
        return foot


def _as_interrupted(view: MessageView) -> None:
    """A reply, or a call, that a turn which died left open shows as what it now is:
    interrupted, with Retry (the next turn stores it so; see ``lease.settle``)."""
    if view.status == MessageStatus.STREAMING:
        view.status, view.error = MessageStatus.INCOMPLETE, lease.INTERRUPTED_REPLY
        view.html = render_markdown(view.text)
    for call in view.calls:
        if call.status == ToolCallStatus.EXECUTING:
            call.status, call.error = ToolCallStatus.FAILED, lease.INTERRUPTED_CALL


def thread_view(principal: Principal, conversation_id: int) -> ThreadView:
    """Everything the thread screen shows, from the database."""
    conversation = store.get_conversation(principal, conversation_id)
    messages = store.load_messages(conversation.id)
    names = _user_names(people_of([c for m in messages for c in m.tool_calls]))
    views = [message_view(m, names) for m in messages]
    turn_id = lease.live_turn_id(conversation)
    if turn_id is None:
        for view in views:
            _as_interrupted(view)
    held = allowance_views(principal, conversation)
    return ThreadView(conversation.id, conversation.title, views, turn_id=turn_id, allowances=held)
