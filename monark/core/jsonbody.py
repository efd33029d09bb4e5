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

from monark.core.errors import ValidationFailed

M = TypeVar("M", bound=BaseModel)
MAX_DEPTH = 64


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (iteratively: no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def loads(text: str | bytes) -> Any:
    """``json.loads``, with ``ValueError`` for JSON nested deeper than ``MAX_DEPTH``."""
    try:
        value = json.loads(text)
    except RecursionError:
        value = None
        too_deep = True
    else:
        too_deep = _depth(value) > MAX_DEPTH
    if too_deep:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels.")
    return value


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
        data = request.get_json(silent=True)
        if data is None:
            raise ValidationFailed(
                "The request body is not valid JSON.",
                [{"field": "body", "message": "Malformed JSON."}],
            )
    try:
        return model.model_validate(data)
    except ValidationError as err:
        details = [
            {"field": ".".join(str(p) for p in e["loc"]) or "body", "message": e["msg"]}
            for e in err.errors(include_url=False)
        ]
        raise ValidationFailed("The request body is invalid.", details) from None
