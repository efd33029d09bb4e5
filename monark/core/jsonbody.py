"""Reading JSON from requests: a depth-limited parser for every body (``JSONProvider``), and
``request_json``, which says what is wrong with a body the parser refuses.

Python's ``json`` recurses once per nesting level: ``[[[[…]]]]`` a few thousand deep raises
``RecursionError`` (a 500), and a value a few hundred deep still breaks later recursive code
(pydantic, deep copies, the JSON column). No input needs more than ``MAX_DEPTH`` levels, so
deeper JSON is refused as malformed wherever the app parses it.

Text no database can store is refused the same way, naming its path: NUL (PostgreSQL text
cannot hold it) and lone UTF-16 surrogates (``"\\ud800"`` parses to a code point UTF-8
cannot encode, which fails at the database or when the page is sent).
"""

from __future__ import annotations

import json
from typing import Any

from flask import request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import BadRequest

from monark.core.errors import ValidationFailed
from monark.core.text import has_surrogate

MAX_DEPTH = 64


class UnstorableText(ValueError):
    """A string in parsed JSON that cannot be stored; ``path`` says where (``""``: the root)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "cannot contain NUL characters (\\u0000)."
    if has_surrogate(text):
        return "cannot contain a lone UTF-16 surrogate (\\ud800-\\udfff): it is not valid Unicode."
    return None


def _path(entry: tuple) -> str:
    keys = []
    while entry[2] is not None:
        keys.append(str(entry[3]))
        entry = entry[2]
    return ".".join(reversed(keys))


def _check(value: Any) -> None:
    """``ValueError`` for nesting deeper than ``MAX_DEPTH``; ``UnstorableText`` for a NUL or a
    lone surrogate in any string or key. Iterative: no recursion to exhaust."""
    # (item, level, parent entry, key in parent): the path is rebuilt only for a problem.
    stack: list[tuple] = [(value, 1, None, None)]
    while stack:
        entry = stack.pop()
        item, level = entry[0], entry[1]
        if isinstance(item, str):
            if problem := _text_problem(item):
                raise UnstorableText(_path(entry), f"Text {problem}")
        elif isinstance(item, dict | list):
            if level > MAX_DEPTH:
                raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels.")
            if isinstance(item, dict):
                for key, child in item.items():
                    if problem := _text_problem(key):
                        raise UnstorableText(_path(entry), f"A key {problem}")
                    stack.append((child, level + 1, entry, key))
            else:
                stack.extend((child, level + 1, entry, i) for i, child in enumerate(item))


def loads(text: str | bytes) -> Any:
    """``json.loads``, with ``ValueError`` for too deep nesting, NUL or lone surrogates."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels.") from None
    _check(value)
    return value


def body_error(err: BadRequest) -> ValidationFailed:
    """What was wrong with a JSON body, from the error ``request.get_json`` raised."""
    # Outside debug mode Flask raises a bare BadRequest; the parser's error is down its chain.
    seen: BaseException | None = err
    while seen is not None and not isinstance(seen, ValueError):
        seen = seen.__cause__ or seen.__context__
    if isinstance(seen, UnstorableText):
        return ValidationFailed(
            "The request body holds text that cannot be stored.",
            [{"field": seen.path or "body", "in": "body", "message": seen.message}],
        )
    message = f"Malformed JSON: {seen}" if seen is not None else "Malformed JSON."
    return ValidationFailed(
        "The request body is not valid JSON.",
        [{"field": "body", "in": "body", "message": message}],
    )


def request_json() -> Any:
    """The request's JSON body (``{}`` when empty); ``ValidationFailed`` naming the problem."""
    if not request.content_length and not request.data:
        return {}
    if not request.is_json:
        raise ValidationFailed(
            "Send the body as JSON (Content-Type: application/json).",
            [{"field": "body", "in": "body", "message": "Expected application/json."}],
        )
    try:
        return request.get_json()
    except BadRequest as err:
        raise body_error(err) from None


class JSONProvider(DefaultJSONProvider):
    """Flask's JSON, parsing request bodies with the depth limit (``request.get_json``)."""

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return loads(s)
