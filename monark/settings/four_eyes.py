"""Four eyes: the org's tools whose writes always need another member's approval; and which
write tools each of the settings page's two lists offers (four eyes, always ask).

For such a tool the member who asked cannot confirm their own card: they hand it to a
member who holds its permission (``monark.approvals.handover``), who decides it. An API
key's write of such a tool is always held, for a member other than its creator to decide.
"""

from __future__ import annotations

from monark.chat.executor import ToolSpec
from monark.chat.runtime import tool_executor
from monark.core.errors import ValidationFailed
from monark.core.events import record_event
from monark.core.rbac import Principal
from monark.core.routes import RouteDescriptor
from monark.extensions import db
from monark.settings.services import get_org


def four_eyes_candidates() -> list[str]:
    """The tools that write and need a permission, by name: what four eyes may apply to."""
    return sorted(s.name for s in tool_executor().specs() if s.mutates and s.permission)


def always_ask_candidates() -> list[ToolSpec]:
    """The write tools an admin may set to always ask: those a user could allow at all
    (their route says so: deletes and the like always ask anyway), by name."""
    return [s for s in tool_executor().specs() if s.mutates and _allowable(s.declared)]


def _allowable(declared: object) -> bool:
    return isinstance(declared, RouteDescriptor) and declared.allowable


def update_four_eyes(principal: Principal, tools: list[str]) -> list[str]:
    """Save the org's four-eyes tools (admins); unknown or read-only tools are refused."""
    principal.require("org.manage")
    known = set(four_eyes_candidates())
    unknown = sorted(set(tools) - known)
    if unknown:
        raise ValidationFailed(
            "Unknown write tools.",
            [{"field": "four_eyes", "message": f"Not a write tool: {name}."} for name in unknown],
        )
    org = get_org(principal)
    chosen = sorted(set(tools))
    if chosen != sorted(org.chat_four_eyes or []):
        org.chat_four_eyes = chosen
        record_event(principal, "org.updated", "org", org.id, {"fields": ["chat_four_eyes"]})
    db.session.commit()
    return chosen
