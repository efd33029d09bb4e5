"""Text that can always be sent and stored: lone UTF-16 surrogates (and, for storing, NUL)
replaced before they reach a response or a row.

A Python ``str`` may hold a surrogate code point (``"\\ud800"``) that UTF-8 cannot encode:
JSON's ``\\ud800`` escape decodes to one, and a JSON column hands it back as it was stored.
Encoding such a string for a page raises ``UnicodeEncodeError`` (a 500), so everything a
template outputs goes through ``scrub`` (installed as the Jinja environment's ``finalize``).
"""

from __future__ import annotations

from typing import TypeVar

from markupsafe import Markup

T = TypeVar("T")


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a surrogate code point (which UTF-8 cannot encode)."""
    if text.isascii():  # O(1) in CPython: most strings stop here
        return False
    try:
        text.encode("utf-8")  # faster than a regex search, even on long text
    except UnicodeEncodeError:
        return True
    return False


def _scrub_str(text: str) -> str:
    if not has_surrogate(text):
        return text
    # Through UTF-16: a split pair becomes its character again, a lone half U+FFFD.
    fixed = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return Markup(fixed) if isinstance(text, Markup) else fixed


def scrub(value: T) -> T:
    """``value`` with lone surrogates replaced by U+FFFD, in strings, dicts, lists and tuples."""
    if isinstance(value, str):
        return _scrub_str(value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, list):
        return [scrub(v) for v in value]  # type: ignore[return-value]
    if type(value) is tuple:
        return tuple(scrub(v) for v in value)  # type: ignore[return-value]
    return value


def _storable_str(text: str) -> str:
    text = _scrub_str(text)
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def storable(value: T) -> T:
    """``scrub``, and NUL (which PostgreSQL text and JSON cannot hold) replaced by U+FFFD:
    for text from outside that is stored as it came (a model's replies and tool calls)."""
    if isinstance(value, str):
        return _storable_str(value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, list):
        return [storable(v) for v in value]  # type: ignore[return-value]
    if type(value) is tuple:
        return tuple(storable(v) for v in value)  # type: ignore[return-value]
    return value
