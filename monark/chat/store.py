"""Loading and storing conversations, messages and tool calls, always within one org."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import func, inspect, select
from sqlalchemy.orm.attributes import set_committed_value

from monark.chat import branches
from monark.chat.models import (
    PENDING_STATUSES,
    CallEvent,
    Conversation,
    ConversationKind,
    Message,
    MessageRole,
    Participant,
    ToolCall,
    ToolCallStatus,
)
from monark.core.errors import NotFound
from monark.core.events import record_event, record_events
from monark.core.models import utcnow
from monark.core.rbac import Principal
from monark.extensions import db

TITLE_LENGTH = 60


def default_title(text: str) -> str:
    """The start of the first message, on one line."""
    line = " ".join(text.split())
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


def _own(principal: Principal, conversation_id: int) -> tuple[Any, ...]:
    """The conditions on a conversation of the principal's own, in their org."""
    return (
        Conversation.id == conversation_id,
        Conversation.org_id == principal.org_id,
        Conversation.creator_id == principal.user_id,
        Conversation.archived.is_(False),
        # An API key's held writes are decided in the Approvals inbox, not the panel.
        Conversation.kind == ConversationKind.AI,
    )


def get_conversation(principal: Principal, conversation_id: int) -> Conversation:
    """A conversation of the principal's own, in their org; ``NotFound`` otherwise."""
    conversation = db.session.scalar(select(Conversation).where(*_own(principal, conversation_id)))
    if conversation is None:
        raise NotFound("No such conversation.")
    return conversation


def conversation_of_message(principal: Principal, message_id: int) -> int:
    """The conversation of a message in one of the principal's own; ``NotFound`` otherwise."""
    found = db.session.scalar(
        select(Message.conversation_id)
        .join(Conversation, Conversation.id == Message.conversation_id)
        .where(Message.id == message_id, *_own(principal, Message.conversation_id))
    )
    if found is None:
        raise NotFound("No such message in this conversation.")
    return found


def end_transaction(*keep: Any, commit: bool = True) -> None:
    """Commit (or roll back a read), keeping the rows in ``keep`` (this turn's own) loaded."""
    kept = []
    for row in keep:
        state = inspect(row)
        columns = [a.key for a in state.mapper.column_attrs if a.key in state.dict]
        kept.append((row, {key: state.dict[key] for key in columns}))
    if commit:
        db.session.commit()
    else:
        db.session.rollback()
    for row, values in kept:
        for key, value in values.items():
            set_committed_value(row, key, value)


def create_conversation(principal: Principal, title: str) -> Conversation:
    """A new AI conversation with the user and the agent as participants."""
    conversation = Conversation(
        org_id=principal.org_id,
        kind=ConversationKind.AI,
        title=title,
        creator_id=principal.user_id,
    )
    conversation.participants = [
        Participant(kind="user", user_id=principal.user_id),
        Participant(kind="agent"),
    ]
    db.session.add(conversation)
    db.session.flush()
    record_event(
        principal,
        "chat.conversation.created",
        "conversation",
        conversation.id,
        {"conversation_id": conversation.id},
    )
    return conversation


@dataclass(frozen=True)
class TranscriptCall:
    """What the model sees of a stored tool call."""

    provider_call_id: str
    name: str
    input: dict[str, Any]
    status: str
    result: Any
    error: str | None
    reject_reason: str | None
    provider_meta: dict[str, Any] | None = None
    decided_by_user: bool = False  # by a click, not skipped: the step budget starts again
    original_input: dict[str, Any] | None = None
    mutates: bool = False


def done_write(call: TranscriptCall) -> bool:
    """Whether a call is a write that went through (it stays done, whatever branch)."""
    return call.mutates and call.status == ToolCallStatus.SUCCEEDED


@dataclass(frozen=True)
class TranscriptMessage:
    """What the model sees of a stored message, with its tool calls in order."""

    id: int
    role: str
    text: str
    content: list[dict[str, Any]]
    status: str
    tool_calls: list[TranscriptCall] = field(default_factory=list)
    prompt_tokens: int = 0  # a reply's: its request's size, cached or not
    parent_id: int | None = None
    # Writes done in versions set aside here (``branches.set_aside``): told, never run again.
    set_aside: tuple[TranscriptCall, ...] = ()
    # The same after the path's end (a regenerated question), so the prefix holds.
    left_after: tuple[TranscriptCall, ...] = ()


def load_transcript(conversation_id: int, head_id: int | None = None) -> list[TranscriptMessage]:
    """The active path (to ``head_id``) as the model reads it, in two queries.

    Plain rows, not ORM objects: the loop reloads it every step, and hydrating then
    expiring ORM rows at each commit was about half of a step at 500 messages.
    """
    rows = _transcript_rows(conversation_id)
    path = branches.active_path(rows, head_id)
    if head_id is None:
        return path
    aside = branches.set_aside(rows, path)

    def done(at: int | None) -> tuple[TranscriptCall, ...]:
        return tuple(c for r in aside.get(at, ()) for c in r.tool_calls if done_write(c))

    shown = [replace(row, set_aside=done(row.id)) if row.id in aside else row for row in path]
    if None in aside and shown:
        shown[-1] = replace(shown[-1], left_after=done(None))
    return shown


def _transcript_rows(conversation_id: int) -> list[TranscriptMessage]:
    """Every message of a conversation with its calls, in order (two queries)."""
    calls: dict[int, list[TranscriptCall]] = defaultdict(list)
    call_rows = db.session.execute(
        select(
            ToolCall.message_id,
            ToolCall.provider_call_id,
            ToolCall.name,
            ToolCall.input,
            ToolCall.status,
            ToolCall.result,
            ToolCall.error,
            ToolCall.reject_reason,
            ToolCall.provider_meta,
            ToolCall.decided_by_id.is_not(None) & ToolCall.skipped.is_(False),
            ToolCall.original_input,
            ToolCall.mutates,
        )
        .where(ToolCall.conversation_id == conversation_id)
        .order_by(ToolCall.message_id, ToolCall.position, ToolCall.id)
    )
    for message_id, *rest in call_rows:
        calls[message_id].append(TranscriptCall(*rest))
    prompt = Message.input_tokens + Message.cache_read_tokens + Message.cache_creation_tokens
    message_rows = db.session.execute(
        select(
            Message.id,
            Message.role,
            Message.text,
            Message.content,
            Message.status,
            prompt,
            Message.parent_id,
        )
        .where(Message.conversation_id == conversation_id)
        .order_by(Message.seq)
    )
    return [
        TranscriptMessage(id, role, text, content, status, calls.get(id, []), tokens or 0, parent)
        for id, role, text, content, status, tokens, parent in message_rows
    ]


def next_seq(conversation_id: int) -> Any:
    """The next message number of a conversation, worked out by the insert itself."""
    return (
        select(func.coalesce(func.max(Message.seq), 0) + 1)
        .where(Message.conversation_id == conversation_id)
        .scalar_subquery()
    )


def add_message(conversation: Conversation, actor: Principal, **fields: Any) -> Message:
    """Store a message and its event; once branched, it follows the head and becomes it."""
    if fields.get("author_kind") == "user":
        fields["author_user_id"] = actor.user_id
    branched = conversation.head_id is not None
    parent_id = fields.pop("parent_id", conversation.head_id)
    message = Message(
        org_id=conversation.org_id,
        conversation_id=conversation.id,
        seq=next_seq(conversation.id),
        parent_id=parent_id if branched else None,
        **fields,
    )
    db.session.add(message)
    db.session.flush()
    conversation.last_activity_at = utcnow()  # after the insert: the conversation's one update
    if branched:
        conversation.head_id = message.id
    record_event(
        actor,
        "chat.message.created",
        "message",
        message.id,
        _message_payload(message),
    )
    return message


def _message_payload(message: Message) -> dict[str, Any]:
    """A message event's payload: ids, and for a reply which provider and model wrote it."""
    payload = {
        "conversation_id": message.conversation_id,
        "message_id": message.id,
        "role": message.role,
    }
    if message.provider:
        payload |= {"provider": message.provider, "model": message.model}
    return payload


def tool_call_event(
    actor: Principal, call: ToolCall, what: CallEvent, more: dict[str, Any] | None = None
) -> None:
    """``chat.tool_call.<what>`` with ids and the tool's name (and ``more``), never its input."""
    record_event(*_call_event(actor, call, what, more))


def tool_call_events(rows: Iterable[tuple[Principal, ToolCall, CallEvent]]) -> None:
    """``tool_call_event`` of each ``(actor, call, what)``, written in one statement."""
    record_events(_call_event(actor, call, what) for actor, call, what in rows)


def _call_event(
    actor: Principal, call: ToolCall, what: CallEvent, more: dict[str, Any] | None = None
) -> tuple[Principal, str, str, int | None, dict[str, Any]]:
    payload = {
        "conversation_id": call.conversation_id,
        "message_id": call.message_id,
        "tool_call_id": call.id,
        "tool": call.name,
        **(more or {}),
    }
    return actor, CallEvent(what).event_type, "tool_call", call.id, payload


def pending_calls(conversation_id: int) -> list[ToolCall]:
    """Calls still PROPOSED or EXECUTING (a dead turn's are settled at the next claim)."""
    stmt = (
        select(ToolCall)
        .where(ToolCall.conversation_id == conversation_id, ToolCall.status.in_(PENDING_STATUSES))
        .order_by(ToolCall.id)
    )
    return list(db.session.scalars(stmt))


def tail_state(
    conversation_id: int, proposed_since: datetime | None = None, head_id: int | None = None
) -> tuple[tuple[str, str] | None, bool]:
    """The last step's ``(role, status)`` on the active path (``branches.is_step``), and
    whether a call proposed (``proposed_since`` or later, when given) waits."""
    person_note = (Message.role == MessageRole.NOTE) & (Message.author_kind == "user")
    if head_id is not None:
        last = _path_tail(conversation_id, head_id)
    else:
        last = db.session.execute(
            select(Message.role, Message.status)
            .where(
                Message.conversation_id == conversation_id,
                Message.role != MessageRole.SUMMARY,
                ~person_note,
            )
            .order_by(Message.seq.desc())
            .limit(1)
        ).one_or_none()
    waits = select(ToolCall.id).where(
        ToolCall.conversation_id == conversation_id, ToolCall.status == ToolCallStatus.PROPOSED
    )
    if proposed_since is not None:
        waits = waits.where(ToolCall.created_at >= proposed_since)
    waiting = db.session.scalar(waits.limit(1))
    return (tuple(last) if last is not None else None), waiting is not None


def _path_tail(conversation_id: int, head_id: int) -> tuple[str, str] | None:
    """The last step of a branched conversation's path: the head, or the nearest before it."""
    at: int | None = head_id
    while at is not None:
        row = db.session.execute(
            select(Message.role, Message.status, Message.author_kind, Message.parent_id).where(
                Message.id == at, Message.conversation_id == conversation_id
            )
        ).one_or_none()
        if row is None:
            return None
        if branches.is_step(row.role, row.author_kind):
            return row.role, row.status
        at = row.parent_id
    return None
