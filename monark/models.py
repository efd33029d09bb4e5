"""Imports every table so metadata is complete (Alembic, tests)."""

from monark.automations.models import Automation, AutomationRun
from monark.chat.models import Conversation, Message, Participant, ToolCall
from monark.core.models import ApiKey, Event, Membership, Org, User
from monark.records.models import ModelField, Record, RecordModel
from monark.wiki.models import WikiPage

__all__ = [
    "ApiKey",
    "Automation",
    "AutomationRun",
    "Conversation",
    "Event",
    "Membership",
    "Message",
    "ModelField",
    "Org",
    "Participant",
    "Record",
    "RecordModel",
    "ToolCall",
    "User",
    "WikiPage",
]
