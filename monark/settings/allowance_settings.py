"""The org's allowance settings for the assistant's writes, for admins:
whether "Allow <tool> for this conversation" is offered at all, and which write tools
always ask (``Org.chat_allowances_enabled``, ``Org.chat_always_confirm``). Its form is a
section of the settings page (``templates/settings/_approvals.html``), saved on its own
(``views.approval_settings``)."""

from __future__ import annotations

from monark.core.errors import ValidationFailed
from monark.core.events import record_event
from monark.core.models import Org
from monark.core.rbac import Principal
from monark.extensions import db
from monark.settings import four_eyes, services


def update_approval_settings(
    principal: Principal, *, allowances_enabled: bool, always_confirm: list[str]
) -> Org:
    """Save the org's allowance switch and its always-confirm tools, with an event."""
    principal.require("org.manage")
    org = services.get_org(principal)
    known = {s.name for s in four_eyes.always_ask_candidates()}
    unknown = sorted(set(always_confirm) - known)
    if unknown:
        raise ValidationFailed(
            "Unknown tools.",
            [{"field": "always_confirm", "message": f"No write tool named {n}."} for n in unknown],
        )
    chosen = sorted(set(always_confirm))
    changed = [
        key
        for key, value in (
            ("chat_allowances_enabled", allowances_enabled),
            ("chat_always_confirm", chosen),
        )
        if getattr(org, key) != value
    ]
    org.chat_allowances_enabled = allowances_enabled
    org.chat_always_confirm = chosen
    if changed:
        record_event(principal, "org.updated", "org", org.id, {"fields": changed})
    db.session.commit()
    return org
