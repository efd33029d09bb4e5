"""Reading a JSON request body with a pydantic model, for the app's internal JSON endpoints."""

from __future__ import annotations

from typing import Any, TypeVar

from flask import request
from pydantic import BaseModel, ValidationError

from monark.core.errors import ValidationFailed

M = TypeVar("M", bound=BaseModel)


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
