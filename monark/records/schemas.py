"""Pydantic models of the records workspace that other layers show (the API, automations)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class FieldOut(BaseModel):
    key: str
    label: str
    type: str
    required: bool
    options: list[str]

    @classmethod
    def of(cls, field: Any) -> FieldOut:
        """A model's field (a row, or the org schema's view of one)."""
        return cls(
            key=field.key,
            label=field.label,
            type=field.type,
            required=field.required,
            options=list(field.options or []),
        )
