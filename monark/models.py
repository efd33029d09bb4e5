"""Imports every table so metadata is complete (Alembic, tests)."""

from monark.approvals.models import Allowance
from monark.automations.models import (
    Automation,
    AutomationRun,
    WebhookAttempt,
    WebhookDelivery,
)
from monark.chat.models import Conversation, Message, Participant, ToolCall
from monark.core.models import ApiKey, Event, Invite, Membership, Org, User
from monark.extensions import db
from monark.records.models import ModelField, Record, RecordModel, RecordValue
from monark.search import index as _search_index  # noqa: F401  (its flush hook, its DDL)
from monark.search.models import SearchDocument
from monark.settings.models import OrgAiSettings, OrgBudget, ToolDay, UsageDay
from monark.wiki.models import WikiPage

# On SQLite, ids are never reused (AUTOINCREMENT): without it, deleting the newest record and
# creating another gives the new one the old id, and the audit log, chat cards and links
# that name the old one would point at the new. PostgreSQL sequences never reuse ids anyway.
for _table in db.metadata.tables.values():
    _table.dialect_kwargs["sqlite_autoincrement"] = True

__all__ = [
    "Allowance",
    "ApiKey",
    "Automation",
    "AutomationRun",
    "Conversation",
    "Event",
    "Invite",
    "Membership",
    "Message",
    "ModelField",
    "Org",
    "OrgAiSettings",
    "OrgBudget",
    "Participant",
    "Record",
    "RecordModel",
    "RecordValue",
    "SearchDocument",
    "ToolCall",
    "ToolDay",
    "UsageDay",
    "User",
    "WebhookAttempt",
    "WebhookDelivery",
    "WikiPage",
]
