"""The org's prompt library: prompts its admins saved, which every new conversation offers."""

from __future__ import annotations

from sqlalchemy import func, select

from monark.core.errors import NotFound, ValidationFailed
from monark.core.events import record_event
from monark.core.models import Org
from monark.core.rbac import Principal
from monark.core.text import ONE_LINE_RULE, storable, unsafe_in_one_line
from monark.core.uow import for_update
from monark.extensions import db
from monark.settings.models import OrgPrompt

MAX_LENGTH = 500  # characters of one prompt
MAX_PROMPTS = 20  # prompts an org keeps


def list_prompts(org_id: int) -> list[OrgPrompt]:
    """The org's saved prompts, oldest first (the order admins added them)."""
    stmt = select(OrgPrompt).where(OrgPrompt.org_id == org_id).order_by(OrgPrompt.id)
    return list(db.session.scalars(stmt))


def _refused(message: str) -> ValidationFailed:
    return ValidationFailed(message, [{"field": "text", "message": message}])


def add_prompt(principal: Principal, text: str) -> OrgPrompt:
    """Save a prompt for the org (admins)."""
    principal.require("org.manage")
    cleaned = " ".join(storable(text or "").split())
    if not cleaned:
        raise _refused("Write the prompt.")
    if unsafe_in_one_line(cleaned):
        raise _refused(ONE_LINE_RULE)
    if len(cleaned) > MAX_LENGTH:
        raise _refused(f"Keep a prompt to {MAX_LENGTH} characters at most.")
    # Saves take turns on the org's row, so the count read is what the last save committed:
    # simultaneous saves at the limit cannot each see room for one more.
    db.session.scalar(for_update(select(Org.id).where(Org.id == principal.org_id)))
    count = db.session.scalar(
        select(func.count()).select_from(OrgPrompt).where(OrgPrompt.org_id == principal.org_id)
    )
    if count >= MAX_PROMPTS:
        raise _refused(f"An organization keeps at most {MAX_PROMPTS} prompts: remove one first.")
    prompt = OrgPrompt(org_id=principal.org_id, text=cleaned, created_by_id=principal.user_id)
    db.session.add(prompt)
    db.session.flush()
    record_event(principal, "settings.prompt.added", "org_prompt", prompt.id)
    db.session.commit()
    return prompt


def remove_prompt(principal: Principal, prompt_id: int) -> None:
    """Remove one of the org's saved prompts (admins); ``NotFound`` for any other id."""
    principal.require("org.manage")
    prompt = db.session.scalar(
        select(OrgPrompt).where(OrgPrompt.id == prompt_id, OrgPrompt.org_id == principal.org_id)
    )
    if prompt is None:
        raise NotFound("No such prompt in this organization.")
    record_event(principal, "settings.prompt.removed", "org_prompt", prompt.id)
    db.session.delete(prompt)
    db.session.commit()
