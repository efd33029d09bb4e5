"""Pydantic models of the wiki routes (``wiki.routes``): bodies and answers."""

from __future__ import annotations

from pydantic import BaseModel, Field

from monark.core.ids import Id
from monark.core.schemas import RowOut, StrictModel, UtcTime

# ---- inputs ----------------------------------------------------------------------------------


class PagePath(StrictModel):
    page_id: Id = Field(description="The page's id (see wiki_list_pages).")


class CreateBody(StrictModel):
    title: str = Field(max_length=1000)
    icon: str = Field("", description="One emoji, or empty.", max_length=100)
    parent_id: Id | None = Field(None, description="The parent page; null for the top level.")


class RenameBody(StrictModel):
    title: str = Field(max_length=1000)


class IconBody(StrictModel):
    icon: str = Field(description="One emoji; empty removes the icon.", max_length=100)


class MoveBody(StrictModel):
    parent_id: Id | None = Field(
        None, description="The new parent; null for the top level; leave out to keep it."
    )
    position: int | None = Field(None, description="0 is first; leave out to go last.")


# ---- answers ---------------------------------------------------------------------------------


class TreePage(RowOut):
    id: int
    title: str
    icon: str
    position: int
    url: str
    children: list[TreePage]


class PageTree(BaseModel):
    pages: list[TreePage]


class PageOut(RowOut):
    id: int
    title: str
    icon: str
    parent_id: int | None
    position: int
    url: str
    created_at: UtcTime
    updated_at: UtcTime


class PathStep(RowOut):
    id: int
    title: str


class PageDetail(PageOut):
    body: str
    path: list[PathStep]


class Archived(BaseModel):
    archived_ids: list[int]
