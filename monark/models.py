"""Imports every table so metadata is complete (Alembic, tests)."""

from monark.core.models import ApiKey, Event, Membership, Org, User
from monark.records.models import ModelField, Record, RecordModel

__all__ = ["ApiKey", "Event", "Membership", "ModelField", "Org", "Record", "RecordModel", "User"]
