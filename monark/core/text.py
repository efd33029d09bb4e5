"""Text that can always be sent and stored: lone UTF-16 surrogates (and, for storing, NUL)
replaced before they reach a response or a row.

A Python ``str`` may hold a surrogate code point (``"\\ud800"``) that UTF-8 cannot encode:
JSON's ``\\ud800`` escape decodes to one, and a JSON column hands it back as it was stored.
Encoding such a string for a page raises ``UnicodeEncodeError`` (a 500), so everything a
template outputs goes through ``scrub`` (installed as the Jinja environment's ``finalize``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any, TypeVar

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


def _each_string(value: Any, fix: Callable[[str], str]) -> Any:
    """``value`` with ``fix`` applied to every string in it: in dicts (keys too), lists and
    tuples, however deep."""
    if isinstance(value, str):
        return fix(value)
    if isinstance(value, dict):
        return {_each_string(k, fix): _each_string(v, fix) for k, v in value.items()}
    if isinstance(value, list):
        return [_each_string(v, fix) for v in value]
    if type(value) is tuple:
        return tuple(_each_string(v, fix) for v in value)
    return value


def scrub(value: T) -> T:
    """``value`` with lone surrogates replaced by U+FFFD, in strings, dicts, lists and tuples."""
    return _each_string(value, _scrub_str)


def _storable_str(text: str) -> str:
    text = _scrub_str(text)
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def storable(value: T) -> T:
    """``scrub``, and NUL (which PostgreSQL text and JSON cannot hold) replaced by U+FFFD:
    for text from outside that is stored as it came (a model's replies and tool calls)."""
    return _each_string(value, _storable_str)


# Characters that make one line of text read otherwise than it is stored: the bidirectional
# embeddings, overrides and isolates (a name "\u202egnp.exe" shows as "exe.png") and the
# controls (a tab, a line break, an escape) that a one-line label never holds.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
ONE_LINE_RULE = (
    "Leave out control characters (a tab, a line break) and bidirectional overrides "
    "(U+202A-U+202E, U+2066-U+2069)."
)


def unsafe_in_one_line(text: str) -> bool:
    """Whether ``text`` holds a control character, a line or paragraph separator, or a
    bidirectional override: what a name or title shown on one line must not hold."""
    return any(ch in BIDI_CONTROLS or unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in text)


def scalar_text(value: Any) -> str:
    """A JSON value written plainly: null as nothing, a whole float as the integer it is
    ("2", not "2.0": JSON does not tell them apart), anything else as ``str`` writes it
    (each caller says booleans and lists in its own words first)."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
