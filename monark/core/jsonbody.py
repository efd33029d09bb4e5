"""Reading JSON from requests: a depth-limited parser for every body, and pydantic checks.

Python's ``json`` recurses once per nesting level: ``[[[[…]]]]`` a few thousand deep raises
``RecursionError`` (a 500), and a value a few hundred deep still breaks later recursive code
(pydantic, deep copies, the JSON column). No input needs more than ``MAX_DEPTH`` levels, so
deeper JSON is refused as malformed wherever the app parses it.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from flask import request
from flask.json.provider import DefaultJSONProvider
from pydantic import BaseModel, ValidationError
from werkzeug.exceptions import BadRequest

from monark.core.errors import ValidationFailed

M = TypeVar("M", bound=BaseModel)
MAX_DEPTH = 64


def _check(value: Any) -> None:
    """``ValueError`` for nesting deeper than ``MAX_DEPTH`` or a NUL in any string (which
    PostgreSQL text cannot hold). Iterative: no recursion to exhaust."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise ValueError("JSON text cannot contain NUL characters (\\u0000).")
        elif isinstance(item, dict | list):
            if level > MAX_DEPTH:
                raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels.")
            if isinstance(item, dict):
                stack.extend((key, level) for key in item)
                stack.extend((child, level + 1) for child in item.values())
            else:
                stack.extend((child, level + 1) for child in item)


def loads(text: str | bytes) -> Any:
    """``json.loads``, with ``ValueError`` for too deep nesting or NUL characters."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels.") from None
    _check(value)
    return value


def json_problem(err: BadRequest) -> str:
    """What was wrong with a JSON body, from the error ``request.get_json`` raised."""
    # Outside debug mode Flask raises a bare BadRequest; the parser's error is down its chain.
    seen: BaseException | None = err
    while seen is not None and not isinstance(seen, ValueError):
        seen = seen.__cause__ or seen.__context__
    return f"Malformed JSON: {seen}" if seen is not None else "Malformed JSON."


class JSONProvider(DefaultJSONProvider):
    """Flask's JSON, parsing request bodies with the depth limit (``request.get_json``)."""

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return loads(s)


def parse_body(model: type[M]) -> M:
    """The request's JSON body checked by ``model``; ``ValidationFailed`` names each field."""
    data: Any = {}
    if request.content_length or request.data:
        if not request.is_json:
            raise ValidationFailed(
                "Send the body as JSON (Content-Type: application/json).",
                [{"field": "body", "message": "Expected application/json."}],
            )
        try:
            data = request.get_json()
        except BadRequest as err:
            raise ValidationFailed(
                "The request body is not valid JSON.",
                [{"field": "body", "message": json_problem(err)}],
            ) from None
    try:
        return model.model_validate(data)
    except ValidationError as err:
        details = [
            {"field": ".".join(str(p) for p in e["loc"]) or "body", "message": e["msg"]}
            for e in err.errors(include_url=False)
        ]
        raise ValidationFailed("The request body is invalid.", details) from None
