"""Imports every table so metadata is complete (Alembic, tests)."""

from monark.approvals.models import Allowance
from monark.assistant.feedback import ReplyFeedback
from monark.automations.models import (
    Automation,
    AutomationRun,
    WebhookAttempt,
    WebhookDelivery,
)
from monark.chat.models import Conversation, Message, Participant, ToolCall
from monark.core.models import (
    ApiKey,
    Event,
    Invite,
    Membership,
    Org,
    RecoveryCode,
    User,
    UserSession,
)
from monark.extensions import db
from monark.notifications.models import Notification, NotificationPreference
from monark.records.models import ModelField, Record, RecordModel, RecordValue
from monark.search import index as _search_index  # noqa: F401  (its flush hook, its DDL)
from monark.search.models import SearchDocument
from monark.settings.models import (
    OrgAiSettings,
    OrgBudget,
    OrgDay,
    OrgPrompt,
    ToolDay,
    UsageDay,
)
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
    "Notification",
    "NotificationPreference",
    "Org",
    "OrgAiSettings",
    "OrgBudget",
    "OrgDay",
    "OrgPrompt",
    "Participant",
    "Record",
    "RecordModel",
    "RecordValue",
    "RecoveryCode",
    "ReplyFeedback",
    "SearchDocument",
    "ToolCall",
    "ToolDay",
    "UsageDay",
    "User",
    "UserSession",
    "WebhookAttempt",
    "WebhookDelivery",
    "WikiPage",
]
