"""Validating record values against a model's fields.

API callers send typed JSON; browser forms send strings, which ``parse_form_values``
turns into the same typed values first, so both paths share ``validate_values``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import date
from typing import Any

from monark.core.text import unsafe_in_one_line
from monark.records.models import ModelField

TEXT_MAX = 1000
# Every integer up to 2^53 is exact as a float (JSON numbers); 10^15 keeps well inside it.
NUMBER_MAX = 10**15
LONG_TEXT_MAX = 20000


class _Invalid(ValueError):
    pass


# A calendar date as people and the API write it. ``date.fromisoformat`` takes more (week
# dates such as 2026-W52-1, ordinal and compact forms), which nobody means in a date field.
_CALENDAR_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def parse_date(raw: str, today: date | None = None) -> str:
    """``raw`` as ``YYYY-MM-DD``, a real day of the calendar, or ``today`` when given the
    reader's today (a filter); ``ValueError`` for anything else."""
    if today is not None and raw.lower() == "today":
        return today.isoformat()
    if not _CALENDAR_DATE.fullmatch(raw):
        raise ValueError(f"{raw!r} is not a date as YYYY-MM-DD")
    return date.fromisoformat(raw).isoformat()  # refuses 2026-02-30


def _check(field: ModelField, value: Any, member_ids: set[int]) -> Any:
    kind = field.type
    if kind in ("text", "long_text"):
        if not isinstance(value, str):
            raise _Invalid("must be a string")
        value = value.strip() if kind == "text" else value
        limit = TEXT_MAX if kind == "text" else LONG_TEXT_MAX
        if len(value) > limit:
            raise _Invalid(f"must be at most {limit} characters")
        if kind == "text" and unsafe_in_one_line(value):
            # A line break, a tab or a bidirectional override would make a title read
            # otherwise than it is stored, wherever it is listed.
            raise _Invalid(
                "must be a single line, without control characters or bidirectional overrides"
            )
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Invalid("must be a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise _Invalid("must be a finite number")
        if abs(value) > NUMBER_MAX:
            raise _Invalid("must be between -10^15 and 10^15")
        return value
    if kind == "date":
        if not isinstance(value, str):
            raise _Invalid("must be a date as YYYY-MM-DD")
        try:
            return parse_date(value)
        except ValueError:
            raise _Invalid("must be a date as YYYY-MM-DD") from None
    if kind == "boolean":
        if not isinstance(value, bool):
            raise _Invalid("must be true or false")
        return value
    if kind == "select":
        if not isinstance(value, str) or value not in (field.options or []):
            allowed = ", ".join(field.options or [])
            raise _Invalid(f"must be one of: {allowed}")
        return value
    if kind == "user":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid("must be a user id")
        if value not in member_ids:
            raise _Invalid("must be a member of this organization")
        return value
    raise _Invalid(f"has an unsupported type {kind}")


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def validate_values(
    fields: Iterable[ModelField],
    values: Mapping[str, Any],
    *,
    partial: bool,
    member_ids: set[int],
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Check ``values`` against ``fields``; return clean values and per-field problems.

    Empty values clear a field (``None``). With ``partial`` only the given keys are
    checked, as for a PATCH; otherwise every required field must have a value.
    Problem fields are named ``values.<key>``.
    """
    by_key = {f.key: f for f in fields}
    clean: dict[str, Any] = {}
    problems: list[dict[str, str]] = []
    for key in values:
        if key not in by_key:
            known = ", ".join(by_key) or "none"
            problems.append(
                {"field": f"values.{key}", "message": f"Unknown field '{key}' (known: {known})."}
            )
    for key, field in by_key.items():
        if key not in values:
            if not partial and field.required:
                problems.append(
                    {"field": f"values.{key}", "message": f"{field.label} is required."}
                )
            continue
        value = values[key]
        if _is_empty(value):
            if field.required:
                problems.append(
                    {"field": f"values.{key}", "message": f"{field.label} is required."}
                )
            else:
                clean[key] = None
            continue
        try:
            clean[key] = _check(field, value, member_ids)
        except _Invalid as err:
            problems.append({"field": f"values.{key}", "message": f"{field.label} {err}."})
    return clean, problems


def parse_form_values(fields: Iterable[ModelField], form: Mapping[str, str]) -> dict[str, Any]:
    """Turn a browser form's strings into typed values (before ``validate_values``).

    A number or user id that does not parse is passed on as the typed string, so
    ``validate_values`` reports it together with every other problem of the form.
    """
    out: dict[str, Any] = {}
    for field in fields:
        name = f"v_{field.key}"
        if field.type == "boolean":
            out[field.key] = form.get(name) in ("on", "true", "1")
            continue
        raw = form.get(name, "")
        if raw.strip() == "":
            out[field.key] = None
            continue
        if field.type == "number":
            out[field.key] = _form_number(raw)
        elif field.type == "user":
            out[field.key] = _form_int(raw)
        else:
            out[field.key] = raw
    return out


def _form_int(raw: str) -> int | str:
    try:
        return int(raw)
    except ValueError:
        return raw


def _form_number(raw: str) -> int | float | str:
    if "_" in raw:  # Python reads "1_000"; people do not write numbers that way
        return raw
    try:
        number = float(raw)
    except ValueError:
        return raw
    return int(number) if number.is_integer() and "." not in raw else number


def display_title(fields: Iterable[ModelField], values: Mapping[str, Any]) -> str:
    """The record's title: the first non-empty text field, cut to 300 characters."""
    for field in fields:
        if field.type == "text" and values.get(field.key):
            return str(values[field.key])[:300]
    return ""


def search_text(fields: Iterable[ModelField], values: Mapping[str, Any]) -> str:
    """Lower-cased text of the searchable fields, stored for ``q`` search."""
    parts = [
        str(values[f.key])
        for f in fields
        if f.type in ("text", "long_text", "select") and values.get(f.key)
    ]
    return "\n".join(parts).lower()
