"""Imports every table so metadata is complete (Alembic, tests)."""

from monark.chat.models import Conversation, Message, Participant, ToolCall
from monark.core.models import ApiKey, Event, Membership, Org, User
from monark.records.models import ModelField, Record, RecordModel

__all__ = [
    "ApiKey",
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
]
