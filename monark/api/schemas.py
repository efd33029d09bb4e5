"""Pydantic request and response models of /api/v1."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from monark.core.ids import Id
from monark.core.schemas import RowOut
from monark.core.schemas import StrictModel as Strict
from monark.records.charts import ChartKind
from monark.records.models import Visibility
from monark.records.schemas import FieldOut

# ---- inputs ---------------------------------------------------------------------------


class ModelPath(Strict):
    model: str = Field(description="The model's key, for example 'tasks'.", max_length=40)


class RecordPath(ModelPath):
    record_id: Id = Field(description="The record's id.")


class RecordsQuery(Strict):
    q: str | None = Field(None, description="Text to search for in text fields.", max_length=200)
    filter: list[Annotated[str, Field(max_length=1000)]] = Field(
        default_factory=list,
        description=(
            "Filters, all of which must hold, each field:op:value (or field:value for eq): "
            "ops eq, ne, lt, lte, gt, gte, contains, in (values split by commas), and "
            "field:empty / field:not_empty. Examples: status:done, due:lt:today, "
            "points:gte:5, status:in:todo,doing, assignee:eq:Ana. Select options and text "
            "match in any case; a user field takes a member's id or (part of) their name; "
            "dates are YYYY-MM-DD or today; ne and empty include records without a value."
        ),
        max_length=10,
    )
    sort: str | None = Field(
        None,
        description=(
            "Order by a field or id, title, created_at, updated_at; '-' first for "
            "descending (e.g. -due). Empty values come last. Default: newest first."
        ),
        max_length=41,
    )
    limit: int = Field(25, ge=1, le=100, description="Page size, at most 100.")
    cursor: str | None = Field(
        None,
        description="The next_cursor of the previous page (same filters and sort).",
        max_length=600,
    )

    @field_validator("filter", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class QueryParams(Strict):
    sql: str = Field(
        description=(
            "One SQLite SELECT (WITH, joins, GROUP BY, window and date functions allowed) "
            "over one table per model, named by the model's key."
        ),
        max_length=10_000,
    )
    chart: ChartKind | None = Field(
        None,
        description=(
            "Ask for the result drawn as a chart beside its table in the assistant's panel: "
            "bar, or line (over dates). It draws when the first column is a label or date and "
            "later columns are numbers, every row returned; otherwise chart_note says why."
        ),
    )


class QueryOut(BaseModel):
    columns: list[str]
    rows: list[list[Any]]
    row_count: int = Field(description="Rows the query gave in all (counted up to a million).")
    truncated: bool = Field(
        description="Whether rows, or the end of long values, were left out (see note)."
    )
    note: str | None = Field(description="What was left out, and how to ask for less.")
    chart: ChartKind | None = Field(None, description="The chart asked for, when it draws.")
    chart_note: str | None = Field(None, description="Why a chart asked for is not drawn.")


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
    total: int = Field(
        description="How many records match, over all pages: exact unless "
        "total_is_lower_bound, when counting stopped at the deployment's cap (1,000 by "
        "default) and more match."
    )
    total_is_lower_bound: bool = Field(
        False, description="True when more records match than total (counting stopped there)."
    )


class RecordUpdated(RecordOut):
    changed_fields: list[str]


class Deleted(BaseModel):
    id: int
    deleted: bool = True


# ---- writes held for approval (keys marked "writes need approval") ----------------------


class ApprovalPath(Strict):
    approval_id: Id = Field(description="The approval's id, as the 202 answer gave it.")


class ApprovalPending(BaseModel):
    """The answer to a write held for approval (HTTP 202): nothing has changed yet."""

    id: int = Field(description="The approval's id.")
    status: Literal["pending"] = "pending"
    tool: str = Field(description="The route (and MCP tool) that will run once approved.")
    status_url: str = Field(description="GET it (or call approvals_get) to learn the outcome.")
    message: str


class ApprovalOut(BaseModel):
    """A held write: pending, approved (with the route's answer), failed, rejected (with the
    reason) or expired."""

    id: int
    tool: str
    status: Literal["pending", "running", "succeeded", "failed", "rejected", "expired"]
    message: str
    created_at: datetime
    decided_at: datetime | None = None
    decided_by: str | None = Field(None, description="The member who decided it.")
    result: Any = Field(None, description="The route's answer, once approved and run.")
    error: str | None = None
    reason: str | None = Field(None, description="Why it was rejected, when the member said.")
    asked_again_as: int | None = Field(
        None,
        description=(
            "Approved, but the server stopped while it ran (nothing was changed): the id of "
            "the approval it waits for again. Check that one; do not send the write again."
        ),
    )
