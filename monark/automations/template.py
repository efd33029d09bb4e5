"""A tiny, safe placeholder language: ``{{record.title}}`` looks a value up in plain dicts.

No expressions, filters, attribute access or calls: a placeholder is a dotted path of
names, resolved key by key in the run's context. User input never reaches Jinja.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_]\w*(?:\.[\w-]+)*)\s*\}\}")
WHOLE = re.compile(r"^\s*\{\{\s*([A-Za-z_]\w*(?:\.[\w-]+)*)\s*\}\}\s*$")


def placeholders(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """``(where, path)`` for each placeholder in a string or in nested lists and dicts.

    ``where`` is the dotted location inside ``value`` (``values.title``), for error messages.
    """
    if isinstance(value, str):
        for match in PLACEHOLDER.finditer(value):
            yield where, match.group(1)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from placeholders(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from placeholders(item, f"{where}.{index}" if where else str(index))


def has_placeholder(value: Any) -> bool:
    """Whether ``value`` holds at least one placeholder."""
    return next(placeholders(value), None) is not None


def lookup(path: str, context: Mapping[str, Any]) -> Any:
    """The value at a dotted path of dict keys; ``None`` when any part is missing."""
    current: Any = context
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return None
        current = current[part]
    return current


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render(value: Any, context: Mapping[str, Any]) -> Any:
    """Fill the placeholders of ``value``; a string that is one placeholder keeps its type."""
    if isinstance(value, str):
        whole = WHOLE.match(value)
        if whole:
            return lookup(whole.group(1), context)
        return PLACEHOLDER.sub(lambda m: _as_text(lookup(m.group(1), context)), value)
    if isinstance(value, Mapping):
        return {key: render(item, context) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [render(item, context) for item in value]
    return value
