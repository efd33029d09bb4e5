"""Ids from requests, read in one place: ASCII digits, within what an INTEGER column holds.

``str.isdigit`` is true for "²", which ``int`` refuses (a 500); ``int`` and the regex ``\\d``
take any script's digits (U+0661, Arabic-Indic one, is 1); and a number past ``MAX_ID``
overflows PostgreSQL's INTEGER (a ``DataError``). Forms and query strings use ``form_id`` and
``query_id``, URLs the ``IdConverter`` behind ``<int:...>``, pydantic models the ``Id`` type.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from flask import request
from pydantic import Field
from werkzeug.routing import IntegerConverter

from monark.core.errors import ValidationFailed
from monark.core.models import MAX_ID

Id = Annotated[int, Field(ge=1, le=MAX_ID)]
"""An id in a pydantic model: out of range is a validation error naming the field."""

_ASCII_DIGITS = re.compile(r"[0-9]+")
_MAX_DIGITS = len(str(MAX_ID))
ID_RULE = f"Give a whole number from 1 to {MAX_ID}."


def parse_id(
    raw: str | None, field: str, where: Literal["form", "query", "path", "body"] = "form"
) -> int | None:
    """The id in ``raw`` (``None`` when empty); ``ValidationFailed`` naming ``field`` otherwise."""
    text = (raw or "").strip()
    if not text:
        return None
    digits = text.lstrip("0")
    if _ASCII_DIGITS.fullmatch(text) and 0 < len(digits) <= _MAX_DIGITS:
        value = int(digits)
        if value <= MAX_ID:
            return value
    raise ValidationFailed(
        f"Invalid {field}: {ID_RULE[0].lower()}{ID_RULE[1:]}",
        [{"field": field, "in": where, "message": ID_RULE}],
    )


def id_or_none(value: Any) -> int | None:
    """An id from loose input (a model's tool arguments): an int in range or its digits;
    None for anything else, so no raw text ever reaches a lookup."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 < value <= MAX_ID else None
    if isinstance(value, str):
        try:
            return parse_id(value, "id")
        except ValidationFailed:
            return None
    return None


def form_id(name: str) -> int | None:
    """The id in form field ``name`` of this request (``None`` when empty or absent)."""
    return parse_id(request.form.get(name), name, "form")


def query_id(name: str) -> int | None:
    """The id in query parameter ``name`` of this request (``None`` when empty or absent)."""
    return parse_id(request.args.get(name), name, "query")


class IdConverter(IntegerConverter):
    """``<int:...>`` in URLs: ASCII digits from 1 to ``MAX_ID``; anything else is a 404."""

    regex = r"[0-9]+"  # werkzeug's \d+ also takes other scripts' digits, which int() reads

    def __init__(self, map: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min", 1)
        kwargs.setdefault("max", MAX_ID)
        super().__init__(map, *args, **kwargs)
