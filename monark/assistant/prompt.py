"""What the assistant is told: its static system prompt and the per-message page-context
sentence (the host's ``chat.host.PromptBuilder``, installed by the app factory).

The system prompt depends only on the assistant's name, so it is byte-identical across
every step and turn of a conversation; what changes per message (where the user is, their
date, time and time zone) goes into the user message instead, keeping the cached prefix
stable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from pydantic import BaseModel, Field, field_validator

from monark.approvals.edits import edit_note
from monark.assistant.gates import assistant_name
from monark.core import zones
from monark.core.ids import Id
from monark.core.models import Org
from monark.core.rbac import Principal
from monark.extensions import db

SYSTEM_PROMPT = """\
You are {name}, the AI assistant built into Monark, a business app where organizations keep \
models (kinds of records, such as tasks or contacts) and their records.

You act for the signed-in user, through the tools you are given. The tools run as that user: \
you can see and change only what they can, and a permission error means they may not do it.

How to work:
- Look things up with the read tools before answering; never invent ids, fields or values.
- To change data, call the write tool directly with the exact values. Every write waits for \
the user to press Confirm or Reject on a card in the app, so do not ask "shall I?" first.
- When a request could mean two things and a wrong guess would cost the user, ask with \
ask_user (one question, a few choices) instead of guessing; look up what you can first.
- If a tool returns an error, read it, fix the input if you can, or explain the problem.
- If the user rejects an action, accept it and ask what they would like instead.
- Each user message may start with a "Page context" line saying which page the user is on; \
use it to resolve "this record" or "this model".
- Answer briefly, in Markdown. Refer to records by their title.
"""


def system_prompt(name: str) -> str:
    """The system prompt for an assistant called ``name``."""
    return SYSTEM_PROMPT.format(name=name)


class PageContext(BaseModel):
    """Where the user is: the route, and the model and record in focus, if any."""

    route: str = Field("", max_length=300)
    model: str | None = Field(None, max_length=40)
    record_id: Id | None = None
    # Filled in by the host from the database (never taken from the browser), so "this
    # record" needs no lookup.
    record_title: str | None = Field(None, max_length=300)
    # On a list page, the host's reading of its filters: the list tool's arguments that
    # show the same records, and how many there are (never the browser's own text).
    list_arguments: dict[str, Any] | None = None
    list_total: int | None = None
    list_total_is_lower_bound: bool = False  # more match than ``list_total`` (counting stopped)

    @field_validator("route")
    @classmethod
    def _route(cls, value: str) -> str:
        value = value.strip()
        if value and not value.startswith("/"):
            raise ValueError("must be a path starting with /")
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", value):
            raise ValueError("must be a model key")
        return value


def _when_sentence(now: date) -> str:
    """Today as the user lives it: their date and, given a time on their clock, the time
    and their zone ("today is 2026-12-04 (Friday), 09:30 JST, time zone Asia/Tokyo")."""
    if not isinstance(now, datetime) or now.tzinfo is None:
        return f"Page context: today is {now.isoformat()}."
    zone = getattr(now.tzinfo, "key", None) or zones.abbreviation(now)
    return (
        f"Page context: today is {now.date().isoformat()} ({now:%A}), {now:%H:%M} "
        f"{zones.abbreviation(now)} on the user's clock, time zone {zone}."
    )


def context_sentence(context: PageContext | None, today: date) -> str:
    """One sentence the model reads before the user's text; ``today`` is the user's now on
    their clock (``core.zones.local_now``), or a bare date."""
    parts = [_when_sentence(today)]
    if context is not None and context.route:
        where = f" The user is on the page {context.route}"
        if context.model and context.record_id:
            where += f', looking at record {context.record_id} of the "{context.model}" model'
            if context.record_title:
                where += f" (titled {json.dumps(context.record_title, ensure_ascii=False)})"
        elif context.model:
            where += f', looking at the "{context.model}" model'
            if context.list_arguments:
                matched = (
                    f"more than {context.list_total:,}"
                    if context.list_total_is_lower_bound
                    else context.list_total
                )
                shown = json.dumps(context.list_arguments, ensure_ascii=False, sort_keys=True)
                where += (
                    f" filtered and sorted as records_list {shown} would list them "
                    f"({matched} records match); "
                    '"these" means those records'
                )
        parts.append(where + ".")
    return "".join(parts)


class AssistantPrompt:
    """The assistant's prompt, as the chat loop asks for it (``chat.host.PromptBuilder``)."""

    def system(self, principal: Principal) -> str:
        """The system prompt, under the org's name for the assistant."""
        return system_prompt(assistant_name(db.session.get(Org, principal.org_id)))

    def page_note(self, context: object | None, today: date) -> str:
        """The page-context sentence (a mapping is read as a ``PageContext``); ``today``:
        the user's now on their clock."""
        if context is not None and not isinstance(context, PageContext):
            context = PageContext.model_validate(context)
        return context_sentence(context, today)

    def edit_note(self, original: Mapping[str, Any], edited: Mapping[str, Any], ran: bool) -> str:
        """``approvals.edits.edit_note``."""
        return edit_note(original, edited, ran)
