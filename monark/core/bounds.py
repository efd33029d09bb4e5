"""How much a JSON value from outside may hold: how deep it nests, and how big it is.

A tool's arguments (the model's, or a person's on a card's Edit form) nest at most
``MAX_DEPTH`` levels: storing, comparing and checking them all recurse, so deeper values
are refused before anything else reads them (``check_depth`` walks without recursing).

A tool's result, and what a card shows, are kept within a size (``bounded``, ``clip``):
past it, text is cut and lists and objects end early, each cut marked with what it left
out, so no tool can put megabytes into a conversation.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 32  # far past any graph's nesting; well inside the stack of what follows
_MARKER_ROOM = 60  # characters a marker takes, about


def depth(value: Any) -> int:
    """How deeply lists and objects nest in a decoded JSON value (without recursing)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def check_depth(value: Any) -> None:
    """``ValueError`` when ``value`` nests deeper than ``MAX_DEPTH`` levels."""
    if depth(value) > MAX_DEPTH:
        raise ValueError(f"must be nested at most {MAX_DEPTH} levels deep")


def clip(text: str, limit: int, length: int | None = None) -> str:
    """``text`` within about ``limit`` characters, with a marker saying how much was cut
    (``length``: how long the text was, when only its start is at hand)."""
    length = len(text) if length is None else length
    if length <= limit:
        return text
    keep = max(0, limit - _MARKER_ROOM)
    return text[:keep] + f"…[cut: {length - keep:,} more characters]"


def bounded(value: Any, limit: int) -> Any:
    """``value`` whose JSON takes about ``limit`` characters at most (itself when it fits):
    the first parts kept whole, then a string cut, and each list or object that goes on
    ended with a marker saying how many items or keys were left out."""
    if len(json.dumps(value, ensure_ascii=False, default=str)) <= limit:
        return value
    return _shrink(value, [limit])


def _shrink(value: Any, room: list[int]) -> Any:
    """``value`` within ``room[0]`` characters, which it uses up (a list, to share it)."""
    if isinstance(value, str):
        size = len(value) + 2
        if size > room[0]:
            value = clip(value, max(room[0], _MARKER_ROOM))
            size = len(value) + 2
        room[0] -= size
        return value
    if isinstance(value, list):
        items: list[Any] = []
        for i, item in enumerate(value):
            if room[0] <= _MARKER_ROOM:
                items.append(f"…[cut: {len(value) - i:,} more items]")
                room[0] -= _MARKER_ROOM
                break
            items.append(_shrink(item, room))
        return items
    if isinstance(value, dict):
        kept: dict[Any, Any] = {}
        for i, (key, item) in enumerate(value.items()):
            if room[0] <= _MARKER_ROOM:
                kept["…"] = f"[cut: {len(value) - i:,} more keys]"
                room[0] -= _MARKER_ROOM
                break
            room[0] -= len(str(key)) + 4
            kept[key] = _shrink(item, room)
        return kept
    room[0] -= len(json.dumps(value, default=str))
    return value
