"""Pydantic models of the records workspace that other layers show (the API, automations)."""

from __future__ import annotations

from typing import Any

from monark.core.schemas import RowOut


class FieldOut(RowOut):
    key: str
    label: str
    type: str
    required: bool
    options: list[str]

    @classmethod
    def of(cls, field: Any, **given: Any) -> FieldOut:
        """A model's field (a row, or the org schema's view of one)."""
        return super().of(field, options=list(field.options or []), **given)
