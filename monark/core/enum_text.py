"""A ``StrEnum`` kept in a string column (chat's statuses, roles and kinds use it)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlalchemy import String, TypeDecorator


class EnumText(TypeDecorator):
    """A ``StrEnum`` stored as its plain value in a string column (the values stay what
    they always were, and a value the enum does not know is refused on write)."""

    impl = String
    cache_ok = True

    def __init__(self, enum: type[StrEnum], length: int):
        super().__init__(length)
        self.enum = enum

    def process_bind_param(self, value: Any, dialect: Any) -> str | None:
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: Any, dialect: Any) -> StrEnum | None:
        return None if value is None else self.enum(value)
