"""Text that can always be stored, encoded and shown, whatever code points it came with."""

from __future__ import annotations

from typing import Any

REPLACEMENT = "\ufffd"


def scrub_str(text: str) -> str:
    """``text`` with lone UTF-16 surrogates replaced by U+FFFD (valid pairs are joined).

    A lone surrogate (``"\\ud800"``, which JSON can spell and a model can emit) is a Python
    string no encoder accepts: it breaks a database write, an HTTP response, a log line.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def scrub(value: Any) -> Any:
    """``scrub_str`` applied to every string in a JSON-like value (keys included)."""
    if isinstance(value, str):
        return scrub_str(value)
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value
