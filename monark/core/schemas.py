"""Pieces of pydantic models every feature shares: request models that refuse unknown
fields, answers read from table rows, and UTC timestamps written as ISO 8601 text."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict

from monark.core.models import as_utc


def _iso(value: Any) -> Any:
    """A stored datetime as aware UTC ISO 8601 text (SQLite hands them back naive)."""
    return as_utc(value).isoformat() if isinstance(value, datetime) else value  # type: ignore[union-attr]


class StrictModel(BaseModel):
    """A request model that refuses unknown fields."""

    model_config = ConfigDict(extra="forbid")


# A timestamp in an answer: ``2026-01-02T03:04:05+00:00``; give it the row's datetime.
UtcTime = Annotated[str, BeforeValidator(_iso)]


class RowOut(BaseModel):
    """An answer about one row (or any object with attributes): its fields named like the
    row's attributes are read from the row, the others are given."""

    @classmethod
    def of(cls, row: Any, **given: Any) -> Self:
        """The answer for ``row``: each field from ``given``, else the row's attribute."""
        read = {name: getattr(row, name) for name in cls.model_fields if name not in given}
        return cls(**read, **given)
