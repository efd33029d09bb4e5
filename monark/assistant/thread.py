"""Plain view data for the panel: messages and tool-call cards, safe to hand across threads."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal

from markupsafe import Markup
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from monark.approvals import allowances, expiry
from monark.assistant import feedback
from monark.assistant.card_view import CallView, Card, Where, call_views, card_of
from monark.assistant.versions import Spot, spots
from monark.chat import branches, store
from monark.chat.models import (
    Conversation,
    Message,
    MessageRole,
    MessageStatus,
    ToolCall,
    ToolCallStatus,
)
from monark.chat.turn import lease
from monark.core.markdown import render_markdown
from monark.core.models import as_utc
from monark.core.money import money_text
from monark.core.rbac import Principal
from monark.extensions import db


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
    rating: str | None = None  # the reader's feedback on a reply: up, down, or none
    # Where it stands among its versions (Regenerate, Edit made others), None: it has none.
    branch: Spot | None = None

    @property
    def is_step(self) -> bool:
        """A step of the conversation, for its foot (Retry): an undo's note is not one."""
        return branches.is_step(self.role, self.author_kind)

    @property
    def waiting_writes(self) -> list[CallView]:
        """Its writes still waiting for a decision."""
        return [c for c in self.calls if c.kind == "write" and c.waiting]

    @property
    def group(self) -> bool:
        """Several writes of one step wait: they are decided together, on one card."""
        return len(self.waiting_writes) > 1

    @property
    def cards(self) -> list[Card]:
        """Its calls' cards as the panel draws them (its waiting writes in one group)."""
        group_id = self.id if self.group else None
        return [
            card_of(c, Where.PANEL, group_id if c.kind == "write" and c.waiting else None)
            for c in self.calls
        ]


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


def _calls_of(message: Message) -> list[ToolCall]:
    # A reply still streaming has no calls yet (they are stored with its end).
    # An undo's note carries its call too (``approvals.undo``).
    has_calls = message.role in (MessageRole.ASSISTANT, MessageRole.NOTE) and (
        message.status != MessageStatus.STREAMING
    )
    return list(message.tool_calls) if has_calls else []


def message_view(message: Message, views: dict[int, CallView] | None = None) -> MessageView:
    """A bubble's data; assistant text is rendered from Markdown and sanitized
    (``views``: its calls' card facts, read already with the rest of the thread)."""
    calls = _calls_of(message)
    if views is None:
        views = {v.id: v for v in call_views(calls)}
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
        calls=[views[c.id] for c in calls],
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
    regenerate: bool = False  # the last reply is done with: another may be asked for
    # What waits is not the user's to confirm: handed to another member, or four eyes;
    # those calls, which an open panel waits for another member to decide.
    elsewhere: bool = False
    awaited: tuple[int, ...] = ()
    question: bool = False  # what waits is a question to the user (``ask_user``), no write
    # A regenerated or edited question whose new reply broke off or never came, with the
    # reply set aside for it: (conversation, that reply), to go back to beside Retry.
    earlier_reply: tuple[int, int] | None = None

    @classmethod
    def of(cls, waiting: bool, running: bool, last: tuple[str, str] | None) -> ThreadFoot:
        """From the last message's ``(role, status)``."""
        retry = False
        if last is not None and last[0] != "note" and not running:
            role, status = last
            state = "unanswered" if role == "user" else status
            retry = state in RETRY_AFTER or state == "streaming"  # "streaming": interrupted
        # The service refuses it otherwise too (``chat.turn.branching``): this only draws it.
        regenerate = (
            last is not None
            and last[0] == MessageRole.ASSISTANT
            and not (retry or running or waiting)
        )
        return cls(waiting, running, retry, regenerate)


def thread_tail(principal: Principal, conversation_id: int) -> tuple[str, ThreadFoot]:
    """The title and the foot as stored now, without loading the thread (three queries)."""
    conversation = store.get_conversation(principal, conversation_id)
    last, waiting = store.tail_state(conversation.id, expiry.cutoff(), conversation.head_id)
    foot = ThreadFoot.of(waiting, lease.live_turn_id(conversation) is not None, last)
    if waiting and not _write_waits(conversation.id):
        foot = replace(foot, question=True)
    if foot.retry and conversation.head_id is not None:
        earlier = db.session.scalar(
            select(Message.id)
            .where(Message.conversation_id == conversation.id)
            .where(Message.parent_id == conversation.head_id)
            .order_by(Message.seq.desc())
            .limit(1)
        )
        if earlier is not None:
            foot = replace(foot, earlier_reply=(conversation.id, earlier))
    return conversation.title, foot


def _write_waits(conversation_id: int) -> bool:
    """Whether a proposed write waits (else what waits is a question to the user)."""
    waits = select(ToolCall.id).where(
        ToolCall.conversation_id == conversation_id,
        ToolCall.status == ToolCallStatus.PROPOSED,
        ToolCall.mutates.is_(True),
        ToolCall.created_at >= expiry.cutoff(),
    )
    return db.session.scalar(waits.limit(1)) is not None


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
    # The newest reply set aside below the path's last message (``ThreadFoot.earlier_reply``).
    earlier_reply_id: int | None = None

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
        if open_calls and all(c.kind == "question" for c in open_calls):
            return replace(foot, question=True)
        if open_calls and all(c.approver or c.four_eyes for c in open_calls):
            foot = replace(foot, elsewhere=True, awaited=tuple(c.id for c in open_calls))
        if foot.retry and self.earlier_reply_id is not None and self.conversation_id:
            foot = replace(foot, earlier_reply=(self.conversation_id, self.earlier_reply_id))
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
    stored = load_messages(conversation.id)
    # The active path alone (``chat.branches``); each message with other versions says so.
    messages = branches.active_path(stored, conversation.head_id)
    versions = spots(stored, messages, conversation.head_id is not None)
    # Every card of the thread from the same few reads, however many there are.
    facts = {v.id: v for v in call_views([c for m in messages for c in _calls_of(m)])}
    views = [message_view(m, facts) for m in messages]
    rated = feedback.ratings_of(
        principal, [m.id for m in messages if m.role == MessageRole.ASSISTANT]
    )
    for view in views:
        view.rating = rated.get(view.id)
        view.branch = versions.get(view.id)
    turn_id = lease.live_turn_id(conversation)
    if turn_id is None:
        for view in views:
            _as_interrupted(view)
    held = allowance_views(principal, conversation)
    # Replies below the path's last message: set aside by a Regenerate or an Edit whose
    # own reply has not come (yet).
    below = [
        m.id for m in stored if m.parent_id is not None and m.parent_id == conversation.head_id
    ]
    return ThreadView(
        conversation.id,
        conversation.title,
        views,
        turn_id=turn_id,
        allowances=held,
        earlier_reply_id=below[-1] if below else None,
    )


def branch_spot(principal: Principal, message: Message) -> Spot | None:
    """Where one message drawn alone stands among its versions (two queries; none for a
    conversation that never branched)."""
    conversation = store.get_conversation(principal, message.conversation_id)
    if conversation.head_id is None:
        return None
    nodes = branches.load_nodes(conversation.id)
    path = branches.active_path(nodes, conversation.head_id)
    return spots(nodes, path, branched=True).get(message.id)


def load_messages(conversation_id: int) -> list[Message]:
    """All messages of a conversation in order, with their tool calls (two queries)."""
    stmt = (
        select(Message)
        .where(Message.conversation_id == conversation_id)
        .options(selectinload(Message.tool_calls))
        .order_by(Message.seq)
    )
    return list(db.session.scalars(stmt))
