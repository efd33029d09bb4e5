"""What people hear of writes waiting for a decision: a write handed to you, your handed-over
request decided, an API key's held write waiting (``monark.notifications``).

Each is drawn when read, as its reader may read it now: a write on a record names that
record only to a reader who may read it (a private one is "a record you cannot see" to
anyone else), and what the card showed (the record's values) is never repeated.
"""

from __future__ import annotations

from typing import Any

from flask import url_for
from sqlalchemy import select

from monark.approvals.inbox import holders
from monark.chat.models import Conversation, ToolCall, ToolCallStatus
from monark.core.errors import AppError
from monark.core.models import User
from monark.core.rbac import Principal
from monark.extensions import db
from monark.notifications.kinds import GONE, Kind, Shown, register
from monark.notifications.models import Notification
from monark.notifications.services import notify
from monark.records.models import RecordModel
from monark.records.services import get_record, record_label

HIDDEN_RECORD = "a record you cannot see"
_VERBS = {
    "records_create": "create a record",
    "records_update": "update",
    "records_delete": "delete",
}


# ---- making them (in the change's own transaction) -------------------------------------------


def handed_to(call: ToolCall, approver_id: int, requester_id: int | None) -> None:
    """Tell the member a write was handed to, in the hand-over's transaction."""
    notify(
        call.org_id, [approver_id], Kind.HANDED_TO_YOU, "tool_call", call.id, actor_id=requester_id
    )


def decided(calls: list[ToolCall], decider_id: int | None, confirmed: set[int]) -> None:
    """Tell each requester whose handed-over write another member decided, in the
    decision's transaction (before it commits)."""
    for call in calls:
        if call.handed_by_id is None or call.handed_by_id == decider_id:
            continue
        notify(
            call.org_id,
            [call.handed_by_id],
            Kind.REQUEST_DECIDED,
            "tool_call",
            call.id,
            actor_id=decider_id,
            data={"confirmed": call.id in confirmed},
        )


def key_write_held(call: ToolCall, permission: str) -> None:
    """Tell the members who may decide an API key's held write (whose role holds its
    permission) that it waits, in the hold's transaction."""
    members = [uid for uid, _, _ in holders(call.org_id, permission)]
    notify(call.org_id, members, Kind.KEY_WRITE_WAITING, "tool_call", call.id)


# ---- drawing them (as the reader may read them now) ------------------------------------------


def _call(reader: Principal, notification: Notification) -> ToolCall | None:
    return db.session.scalar(
        select(ToolCall).where(
            ToolCall.id == notification.subject_id, ToolCall.org_id == reader.org_id
        )
    )


def _name(user_id: int | None, fallback: str = "A member") -> str:
    found = db.session.scalar(select(User.name).where(User.id == user_id)) if user_id else None
    return found or fallback


def target(reader: Principal, call: ToolCall) -> tuple[str, str | None]:
    """What ``call`` acts on, in words the reader may read, and the record's page if they
    may open it: a record is named only when the reader may read it now."""
    args: dict[str, Any] = call.input if isinstance(call.input, dict) else {}
    key, record_id = args.get("model"), args.get("record_id")
    if not isinstance(key, str):
        return "", None
    model = db.session.scalar(
        select(RecordModel).where(RecordModel.org_id == reader.org_id, RecordModel.key == key)
    )
    if model is None:
        return "", None
    if not isinstance(record_id, int):
        return f" in {model.name}", None
    try:
        record = get_record(reader, model, record_id)
    except AppError:  # not theirs to read (private, or no such record now): not named
        return f" on {HIDDEN_RECORD}", None
    link = url_for("records.record_detail", key=model.key, record_id=record.id)
    return f" on “{record_label(model, record)}”", link


def _action(reader: Principal, call: ToolCall) -> tuple[str, str | None]:
    words, link = target(reader, call)
    return f"{_VERBS.get(call.name, call.name.replace('_', ' '))}{words}", link


def _inbox_link(call: ToolCall) -> str:
    return url_for("approvals.inbox", _anchor=f"approval-{call.id}")


def _draw_handed(reader: Principal, notification: Notification) -> Shown:
    call = _call(reader, notification)
    if call is None:
        return GONE
    action, _ = _action(reader, call)
    title = f"{_name(notification.actor_id)} asks you to approve: {action}"
    if call.status != ToolCallStatus.PROPOSED:
        return Shown(f"{title} (decided since)", _inbox_link(call))
    return Shown(title, _inbox_link(call))


def _draw_decided(reader: Principal, notification: Notification) -> Shown:
    call = _call(reader, notification)
    if call is None:
        return GONE
    action, link = _action(reader, call)
    verdict = "approved" if (notification.data or {}).get("confirmed") else "rejected"
    return Shown(f"{_name(notification.actor_id)} {verdict} your request: {action}", link)


def _draw_key_write(reader: Principal, notification: Notification) -> Shown:
    call = _call(reader, notification)
    if call is None:
        return GONE
    key_name = db.session.scalar(
        select(Conversation.title).where(
            Conversation.id == call.conversation_id, Conversation.org_id == reader.org_id
        )
    )
    action, _ = _action(reader, call)
    title = f"API key “{key_name or 'an API key'}” waits for approval: {action}"
    if call.status != ToolCallStatus.PROPOSED:
        title += " (decided since)"
    return Shown(title, _inbox_link(call))


register(Kind.HANDED_TO_YOU, _draw_handed)
register(Kind.REQUEST_DECIDED, _draw_decided)
register(Kind.KEY_WRITE_WAITING, _draw_key_write)
