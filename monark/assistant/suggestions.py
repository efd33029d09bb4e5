"""What a new conversation suggests asking: up to three prompts drawn from the page the person
is on (a list, a record, a wiki page, an automation or one of its runs), and the org's own
saved prompts.

A suggestion names a thing only when this person may read it: each is looked up as them, and
what they may not read suggests nothing but the general prompts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import current_app
from werkzeug.exceptions import HTTPException

from monark.automations import services as automations
from monark.core.errors import AppError
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records import services as records
from monark.settings import prompts
from monark.wiki import services as wiki

MAX_SHOWN = 3  # suggestions drawn from the page
GENERAL = ("What can you help me with here?", "What changed in the workspace this week?")


@dataclass(frozen=True)
class Suggestions:
    """What a new conversation offers: prompts from the page, and the org's saved ones."""

    page: list[str]
    saved: list[str]


def _endpoint(route: str) -> tuple[str, dict[str, Any]] | None:
    """The app's own reading of a page's path: its endpoint and arguments (None: no page)."""
    if not route.startswith("/") or len(route) > 300:
        return None
    try:
        return current_app.url_map.bind("").match(route, method="GET")
    except HTTPException:  # no such page, or a redirect
        return None


def _for_list(principal: Principal, key: str, filtered: bool) -> list[str]:
    model = records.get_model(principal, key)
    label = model.name.lower()
    has_dates = any(f.type in ("date", "datetime") for f in model.fields)
    these = "these" if filtered else f"the {label}"
    out = [f"Summarize {these}"]
    if has_dates:
        out.append(f"How many of {these} are overdue?")
    out.append(f"Which of {these} changed most recently?")
    return out


def _for_record(principal: Principal, key: str, record_id: int) -> list[str]:
    model = records.get_model(principal, key)
    title = records.get_record(principal, model, record_id).title or "this record"
    return [
        "Summarize this record and what changed",
        f"What else is related to “{title[:80]}”?",
        "Draft the next step for this record",
    ]


def _for_wiki(principal: Principal, page_id: int) -> list[str]:
    page = wiki.get_page(principal, page_id)
    return [
        "Summarize this page",
        f"What does “{page.title[:80]}” leave unanswered?",
        "Which records does this page mention?",
    ]


def _for_run(principal: Principal, automation_id: int, run_id: int) -> list[str]:
    run = automations.get_run(principal, run_id, automation_id)
    if run.status == "failed":
        return ["Why did this run fail?", "How can I fix this automation?"]
    return ["Explain what this run did", "When did this automation last fail?"]


def _for_automation(principal: Principal, automation_id: int) -> list[str]:
    automations.get_automation(principal, automation_id)
    return ["Explain what this automation does", "When did this automation last fail?"]


def from_page(principal: Principal, route: str, filtered: bool = False) -> list[str]:
    """Up to three prompts about the page at ``route``, as this person may see it."""
    found = _endpoint(route)
    endpoint, args = found if found else ("", {})
    drawn: list[str] = []
    try:
        if endpoint == "records.record_list":
            drawn = _for_list(principal, args["key"], filtered)
        elif endpoint == "records.record_detail":
            drawn = _for_record(principal, args["key"], args["record_id"])
        elif endpoint == "wiki.page":
            drawn = _for_wiki(principal, args["page_id"])
        elif endpoint == "automations.run_detail":
            drawn = _for_run(principal, args["automation_id"], args["run_id"])
        elif endpoint == "automations.detail":
            drawn = _for_automation(principal, args["automation_id"])
    except AppError:  # not there, or not for this person: nothing of it is named
        drawn = []
    finally:
        db.session.rollback()  # reads only: leave nothing open
    return (drawn or list(GENERAL))[:MAX_SHOWN]


def suggestions(principal: Principal, route: str, filtered: bool = False) -> Suggestions:
    """What a new conversation on the page at ``route`` offers this person."""
    saved = [p.text for p in prompts.list_prompts(principal.org_id)]
    return Suggestions(from_page(principal, route, filtered), saved)
