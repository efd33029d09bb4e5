"""The Approvals inbox's queries: what waits for a member, and who may see or decide it.

A request is a stored ``ToolCall``, PROPOSED: handed to this member ("Ask someone to
approve", ``approvals.handover``), or an API key's held write (``ConversationKind.API``,
``monark.api.key_holds``). Only members whose role holds the tool's permission see or
decide one, and a request handed to someone else is 404 to everyone else.
"""

from __future__ import annotations

from sqlalchemy import func, select

from monark.approvals import expiry
from monark.chat.executor import ChatToolExecutor
from monark.chat.models import Conversation, ConversationKind, ToolCall, ToolCallStatus
from monark.core.errors import Forbidden, NotFound
from monark.core.models import Membership, User
from monark.core.rbac import ROLE_PERMISSIONS, Principal
from monark.extensions import db

NO_REQUEST = "No such approval request."


def permission_of(executor: ChatToolExecutor, name: str) -> str | None:
    """The permission a tool's write needs (None for a tool nobody registered)."""
    return next((s.permission for s in executor.specs() if s.name == name), None)


def holders(org_id: int, permission: str) -> list[tuple[int, str, str]]:
    """The org's members whose role grants ``permission``, as ``(user_id, name, role)``
    by name."""
    roles = [role for role, granted in ROLE_PERMISSIONS.items() if permission in granted]
    rows = db.session.execute(
        select(User.id, User.name, Membership.role)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.org_id == org_id, Membership.role.in_(roles))
        .order_by(User.name, User.id)
    )
    return [(row.id, row.name, str(row.role)) for row in rows]


def _requests(principal: Principal):
    """Calls of the org that may wait in someone's inbox: handed to this member, or an API
    key's held writes."""
    return (
        select(ToolCall, Conversation)
        .join(Conversation, Conversation.id == ToolCall.conversation_id)
        .where(
            ToolCall.org_id == principal.org_id,
            Conversation.org_id == principal.org_id,
            Conversation.archived.is_(False),
            (
                (ToolCall.approver_id == principal.user_id)
                & (Conversation.kind == ConversationKind.AI)
            )
            | (Conversation.kind == ConversationKind.API),
        )
    )


def _may_decide(principal: Principal, executor: ChatToolExecutor, call: ToolCall) -> bool:
    permission = permission_of(executor, call.name)
    return permission is not None and principal.can(permission)


def inbox(principal: Principal, executor: ChatToolExecutor) -> list[tuple[ToolCall, Conversation]]:
    """What waits for this member's decision, oldest first: handed to them, or held from an
    API key, and only what their role may approve."""
    rows = db.session.execute(
        _requests(principal)
        .where(
            ToolCall.status == ToolCallStatus.PROPOSED,
            ToolCall.created_at >= expiry.cutoff(),
        )
        .order_by(ToolCall.id)
    ).all()
    return [(c, conv) for c, conv in rows if _may_decide(principal, executor, c)]


def inbox_count(principal: Principal, executor: ChatToolExecutor) -> int:
    """How many requests wait for this member (the header's badge), in one query."""
    if principal.user_id is None:
        return 0
    tools = [s.name for s in executor.specs() if s.permission and principal.can(s.permission)]
    if not tools:
        return 0
    waiting = _requests(principal).where(
        ToolCall.status == ToolCallStatus.PROPOSED,
        ToolCall.created_at >= expiry.cutoff(),
        ToolCall.mutates.is_(True),
        ToolCall.name.in_(tools),
    )
    return db.session.scalar(select(func.count()).select_from(waiting.subquery())) or 0


def get_request(
    principal: Principal, executor: ChatToolExecutor, call_id: int
) -> tuple[ToolCall, Conversation]:
    """One request of this member's inbox, decided or not: ``NotFound`` for another org's,
    or one handed to someone else; ``Forbidden`` when their role may not approve it."""
    row = db.session.execute(_requests(principal).where(ToolCall.id == call_id)).one_or_none()
    if row is None or not row[0].mutates:
        raise NotFound(NO_REQUEST)
    call, conversation = row
    if not _may_decide(principal, executor, call):
        raise Forbidden(
            f"Your role ({principal.role}) lacks {permission_of(executor, call.name)}: "
            "you cannot approve this."
        )
    return call, conversation
