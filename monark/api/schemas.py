"""Pydantic request and response models of /api/v1."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from monark.core.ids import Id
from monark.core.schemas import RowOut
from monark.core.schemas import StrictModel as Strict
from monark.records.models import Visibility
from monark.records.schemas import FieldOut

# ---- inputs ---------------------------------------------------------------------------


class ModelPath(Strict):
    model: str = Field(description="The model's key, for example 'tasks'.", max_length=40)


class RecordPath(ModelPath):
    record_id: Id = Field(description="The record's id.")


class RecordsQuery(Strict):
    q: str | None = Field(None, description="Text to search for in text fields.", max_length=200)
    filter: str | None = Field(
        None,
        description=(
            "Only records whose field equals a value, as field:value (e.g. status:done). "
            "Select options match in any case; a user field takes a member's id or (part of) "
            "their name; dates are YYYY-MM-DD."
        ),
        max_length=200,
    )
    limit: int = Field(25, ge=1, le=100, description="Page size, at most 100.")
    cursor: str | None = Field(
        None, description="The next_cursor of the previous page.", max_length=40
    )


class QueryParams(Strict):
    sql: str = Field(
        description=(
            "One SQLite SELECT (WITH, joins, GROUP BY, window and date functions allowed) "
            "over one table per model, named by the model's key."
        ),
        max_length=10_000,
    )


class QueryOut(BaseModel):
    columns: list[str]
    rows: list[list[Any]]
    row_count: int = Field(description="Rows the query gave in all (counted up to a million).")
    truncated: bool = Field(description="Whether rows were left out (see note).")
    note: str | None = Field(description="What was left out, and how to ask for less.")


class QueryColumn(BaseModel):
    name: str
    type: Literal["INTEGER", "REAL", "TEXT"]
    field: str | None = Field(description="The model field behind the column, if any.")
    field_type: str | None


class QueryTable(BaseModel):
    name: str = Field(description="The table's name in SQL: the model's key.")
    model: str = Field(description="The model's display name.")
    columns: list[QueryColumn]


class QueryTables(BaseModel):
    dialect: Literal["sqlite"] = "sqlite"
    tables: list[QueryTable]


class RecordCreate(Strict):
    values: dict[str, Any] = Field(description="Field key to value, checked against the model.")
    visibility: Visibility = Field(
        "org", description="'private' hides the record from members other than its creator."
    )


class RecordUpdate(Strict):
    values: dict[str, Any] = Field(
        description="Only the fields to change; null or an empty string clears a field."
    )
    visibility: Visibility | None = None


# ---- outputs --------------------------------------------------------------------------


class UserOut(RowOut):
    id: int
    email: str
    name: str


class OrgOut(RowOut):
    id: int
    name: str
    slug: str


class ApiKeyRef(RowOut):
    id: int
    name: str


class MeOut(BaseModel):
    actor_kind: Literal["user", "api_key", "assistant"]
    user: UserOut | None
    api_key: ApiKeyRef | None
    org: OrgOut
    role: str
    permissions: list[str]


class ModelSummary(RowOut):
    key: str
    name: str
    description: str


class ModelList(BaseModel):
    items: list[ModelSummary]


class ModelOut(RowOut):
    key: str
    name: str
    description: str
    fields: list[FieldOut]


class RecordOut(BaseModel):
    id: int
    model: str
    title: str
    values: dict[str, Any]
    visibility: Visibility
    creator_id: int | None
    created_at: datetime
    updated_at: datetime


class RecordList(BaseModel):
    items: list[RecordOut]
    next_cursor: str | None


class RecordUpdated(RecordOut):
    changed_fields: list[str]


class Deleted(BaseModel):
    id: int
    deleted: bool = True
