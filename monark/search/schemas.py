"""Pydantic models of the ``search`` route: its query and its answer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from monark.core.schemas import StrictModel
from monark.search.services import MAX_LIMIT, MAX_QUERY


class SearchQuery(StrictModel):
    q: str = Field(
        description="Plain words to look for (no operators: every character is literal). "
        "Pages, records, automations and conversations having every word come first; "
        "failing that, those with any.",
        max_length=MAX_QUERY,
    )
    limit: int = Field(10, ge=1, le=MAX_LIMIT, description="At most this many results.")


class SearchHit(BaseModel):
    kind: Literal["record", "wiki", "automation", "conversation"]
    id: int = Field(description="The record's, wiki page's, automation's or conversation's id.")
    title: str
    snippet: str = Field(description="The text around the match.")
    model: str | None = Field(None, description="A record's model key.")
    url: str


class SearchOut(BaseModel):
    query: str
    results: list[SearchHit]
