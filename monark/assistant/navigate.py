"""The ``navigate`` tool: offers a "Go to {label}" button; the user's click is the consent.

It has no server effect. It accepts only a path inside this app that the user may open
(checked by rendering it in-process as them) and hands it back for the panel's button.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, ValidationError

from monark.api.dispatch import dispatch
from monark.assistant.tools import invalid
from monark.chat.executor import ToolOutcome, ToolSpec
from monark.core.errors import ValidationFailed
from monark.core.rbac import Principal
from monark.core.routes import without_titles

NOT_PAGES = ("/api/", "/internal/", "/chat/", "/static/", "/login", "/logout")
ENCODED_SEPARATOR = re.compile(r"%(2f|5c|2e)", re.IGNORECASE)


class NavigateInput(BaseModel):
    path: str = Field(
        description="A path inside this app, such as /models/tasks/records/12.", max_length=500
    )
    label: str = Field(
        description="What the button names, e.g. 'Tasks' for 'Go to Tasks'.",
        min_length=1,
        max_length=60,
    )


def check_path(path: str) -> str | None:
    """Why ``path`` is not an in-app page path, or ``None`` when its shape is fine."""
    if not path.startswith("/") or path.startswith("//"):
        return "Give a path inside the app that starts with a single /."
    if "\\" in path or any(ord(c) < 32 for c in path):
        return "The path has characters a page path cannot have."
    if ENCODED_SEPARATOR.search(path):
        return "The path must not contain encoded slashes or dots."
    parts = urlsplit(path)
    if parts.scheme or parts.netloc:
        return "Only paths inside this app are allowed."
    if any(segment in (".", "..") for segment in parts.path.split("/")):
        return "The path must not contain . or .. segments."
    if parts.path.startswith(NOT_PAGES) or parts.path in ("/chat", "/api", "/internal"):
        return "That path is not a page the user can open."
    return None


class NavigateTool:
    """The ``navigate`` tool (``monark.assistant.tools.AssistantTool``)."""

    spec = ToolSpec(
        name="navigate",
        description=(
            "Offer the user a button that opens a page of this app, e.g. a model's records "
            "(/models/tasks/records) or one record (/models/tasks/records/12). Nothing happens "
            "until the user clicks it. Use paths you have seen, not guesses."
        ),
        input_schema={
            "type": "object",
            "properties": without_titles(NavigateInput.model_json_schema()["properties"]),
            "required": ["path", "label"],
            "additionalProperties": False,
        },
        mutates=False,
    )

    def preview(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"headline": f"offer a link to {arguments.get('label') or 'a page'}"}

    def precheck(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome | None:
        return None  # a read: it runs at once, and says itself what is wrong

    def run(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome:
        try:
            data = NavigateInput.model_validate(arguments)
        except ValidationError as err:
            problem = ValidationFailed.from_pydantic(err, "Invalid arguments.")
            return invalid(problem.message, problem.details)
        problem = check_path(data.path)
        if problem:
            return ToolOutcome(ok=False, error=f"Cannot navigate to {data.path!r}: {problem}")
        response = dispatch(principal, "GET", data.path)
        if response.status != 200:
            reason = {404: "there is no such page", 403: "the user may not open it"}.get(
                response.status, f"it answered HTTP {response.status}"
            )
            return ToolOutcome(ok=False, error=f"Cannot navigate to {data.path}: {reason}.")
        return ToolOutcome(ok=True, result={"path": data.path, "label": data.label})
