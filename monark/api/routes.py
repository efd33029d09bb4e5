"""``V1_ROUTES``: every /api/v1 endpoint, declared on its handler (which calls the services).

Public: each is under /api/v1, in the OpenAPI document, an MCP tool and an in-app tool.
"""

from __future__ import annotations

from typing import Any

from monark.api import schemas as s
from monark.core.errors import ValidationFailed
from monark.core.models import ApiKey, Org, User
from monark.core.ratelimit import check_queries
from monark.core.rbac import Principal
from monark.core.routes import RouteDescriptor, RouteTable, headline
from monark.core.settings import settings
from monark.extensions import db
from monark.records import editing, previews, queries, sql
from monark.records import services as records
from monark.records import undo as undoing
from monark.records.charts import chart_problem
from monark.records.models import Record, RecordModel


def record_out(model: RecordModel, record: Record) -> s.RecordOut:
    """A record as the API shows it."""
    # Spelled out, not ``RecordOut.of``: every records_list pays this per row, and reading
    # the fields by name costs about a microsecond a row more.
    return s.RecordOut(
        id=record.id,
        model=model.key,
        title=record.title,
        values=record.values,
        visibility=record.visibility,  # type: ignore[arg-type]
        creator_id=record.creator_id,
        created_at=record.created_at,
        updated_at=record.updated_at,
    )


def model_out(model: RecordModel) -> s.ModelOut:
    """A model with its fields, as the API shows it."""
    return s.ModelOut.of(model, fields=[s.FieldOut.of(f) for f in model.fields])


routes = RouteTable("public")


def compact_records(result: dict[str, Any]) -> dict[str, Any]:
    """A page of records as the model reads it: one row per record under shared column
    names (``id``, ``title``, the fields, ``updated_at``), instead of an object each."""
    items = result.get("items") or []
    fields = list(dict.fromkeys(k for item in items for k in (item.get("values") or {})))
    columns = ["id", "title", *fields, "updated_at"]
    private = any(item.get("visibility") == "private" for item in items)
    if private:
        columns.append("visibility")
    rows = [
        [
            item.get("id"),
            item.get("title"),
            *((item.get("values") or {}).get(k) for k in fields),
            item.get("updated_at"),
            *([item.get("visibility")] if private else []),
        ]
        for item in items
    ]
    return {
        "columns": columns,
        "rows": rows,
        "total": result.get("total"),
        **({"total_is_lower_bound": True} if result.get("total_is_lower_bound") else {}),
        "next_cursor": result.get("next_cursor"),
    }


def compact_query(result: dict[str, Any]) -> dict[str, Any]:
    """A query's answer as the model reads it: columns and rows, and what was left out."""
    shown = {"columns": result.get("columns"), "rows": result.get("rows")}
    if result.get("truncated"):
        shown |= {"row_count": result.get("row_count"), "note": result.get("note")}
    # A chart asked for: drawn, or why not (the model says so rather than describe one).
    shown |= {k: result[k] for k in ("chart", "chart_note") if result.get(k)}
    return shown


def check_query(arguments: dict[str, Any]) -> str | None:
    """The keyword guard, before the tool is even called (a clear refusal to the model)."""
    try:
        sql.check_sql(str(arguments.get("sql") or ""), sql.QueryLimits.of(settings().query))
    except ValidationFailed as err:
        return err.detail_text()
    return None


@routes.get("/me", "records.view", preview=headline("check who you are"))
def me_get(principal: Principal, path: None, query: None, body: None) -> s.MeOut:
    """Who the caller is: user or API key, org, role and permissions."""
    org = db.session.get(Org, principal.org_id)
    user = db.session.get(User, principal.user_id) if principal.user_id else None
    key = db.session.get(ApiKey, principal.actor_id) if principal.actor_kind == "api_key" else None
    return s.MeOut(
        actor_kind=principal.actor_kind,
        user=s.UserOut.of(user) if user else None,
        api_key=s.ApiKeyRef.of(key) if key else None,
        org=s.OrgOut.of(org),
        role=principal.role,
        permissions=sorted(principal.permissions),
    )


@routes.get("/models", "records.view", preview=headline("list the models"))
def models_list(principal: Principal, path: None, query: None, body: None) -> s.ModelList:
    """List the organization's models (kinds of records, such as tasks)."""
    return s.ModelList(items=[s.ModelSummary.of(m) for m in records.list_models(principal)])


@routes.get("/models/{model}", "records.view", preview=previews.model_get)
def models_get(principal: Principal, path: s.ModelPath, query: None, body: None) -> s.ModelOut:
    """Get one model with its fields: key, label, type, required, options."""
    return model_out(records.get_model(principal, path.model))


@routes.get(
    "/models/{model}/records",
    "records.view",
    preview=previews.list_records,
    summarize=compact_records,
)
def records_list(
    principal: Principal, path: s.ModelPath, query: s.RecordsQuery, body: None
) -> s.RecordList:
    """List a model's records with search, typed filters, a sort, paging and the total."""
    model = records.get_model(principal, path.model)
    params = queries.ListParams.parse(model, query.q, query.filter, query.sort)
    page = queries.list_records(
        principal, model, params, limit=query.limit, cursor=query.cursor, count=True
    )
    return s.RecordList(
        items=[record_out(model, r) for r in page.items],
        next_cursor=page.next_cursor,
        total=page.total or 0,
        total_is_lower_bound=page.total_is_lower_bound,
    )


@routes.get("/models/{model}/records/{record_id}", "records.view", preview=previews.get)
def records_get(principal: Principal, path: s.RecordPath, query: None, body: None) -> s.RecordOut:
    """Get one record by id."""
    model = records.get_model(principal, path.model)
    return record_out(model, records.get_record(principal, model, path.record_id))


@routes.post(
    "/models/{model}/records",
    "records.create",
    status=201,
    preview=previews.create,
    precheck=editing.check_create,
    edit_schema=editing.create_schema,
    allow_scope=previews.NEW_RECORDS,
    undo=undoing.CREATE,
)
def records_create(
    principal: Principal, path: s.ModelPath, query: None, body: s.RecordCreate
) -> s.RecordOut:
    """Create a record; values are checked against the model's fields."""
    model = records.get_model(principal, path.model)
    record = records.create_record(principal, model, body.values, body.visibility)
    return record_out(model, record)


@routes.patch(
    "/models/{model}/records/{record_id}",
    "records.update",
    preview=previews.update,
    precheck=editing.check_update,
    edit_schema=editing.update_schema,
    allow_scope=previews.RECORD_UPDATES,
    undo=undoing.UPDATE,
)
def records_update(
    principal: Principal, path: s.RecordPath, query: None, body: s.RecordUpdate
) -> s.RecordUpdated:
    """Change some fields of a record; fields not given keep their values."""
    model = records.get_model(principal, path.model)
    record, changed = records.update_record(
        principal, model, path.record_id, body.values, body.visibility
    )
    return s.RecordUpdated(**record_out(model, record).model_dump(), changed_fields=changed)


@routes.delete(
    "/models/{model}/records/{record_id}",
    "records.delete",
    preview=previews.delete,
    undo=undoing.DELETE,
)
def records_delete(principal: Principal, path: s.RecordPath, query: None, body: None) -> s.Deleted:
    """Delete a record."""
    model = records.get_model(principal, path.model)
    records.delete_record(principal, model, path.record_id)
    return s.Deleted(id=path.record_id)


def _tables_for(principal: Principal) -> str:
    return "Tables:\n" + sql.describe_tables(sql.catalogue(principal))


@routes.get(
    "/query",
    "records.view",
    preview=headline("query the records"),
    describe=_tables_for,
    validate=check_query,
    summarize=compact_query,
)
def records_query(principal: Principal, path: None, query: s.QueryParams, body: None) -> s.QueryOut:
    """Answer a question over all the records you can see with one read-only SQL SELECT.

    SQLite's dialect, whatever database runs Monark. One table per model, named by its key
    (records_query_tables lists them), with columns id, title, one per field (number: REAL;
    date: TEXT YYYY-MM-DD, compare with date('now') or today(), both the caller's own date
    in their time zone; boolean: 0/1; user: the member's id, with the name in
    <field>_name), created_at and updated_at (UTC, YYYY-MM-DD HH:MM:SS, as is
    datetime('now')), creator_id and visibility. Only the records you may see are there.
    Prefer aggregates (count, sum, GROUP BY) to long lists: at most a few hundred rows
    come back.
    """
    # Per principal (a user, whether through the assistant or not, or an API key); over the
    # limit, a tool call's result is the error, which the model and the card both show.
    check_queries(f"{principal.org_id}:{principal.actor_kind}:{principal.actor_id}")
    result = sql.run_query(principal, query.sql)
    problem = None
    if query.chart is not None:
        problem = chart_problem(result.columns, result.rows)
        if problem is None and result.truncated:
            problem = "the result was cut short: aggregate it to fewer rows"
    return s.QueryOut(
        columns=result.columns,
        rows=result.rows,
        row_count=result.row_count,
        truncated=result.truncated,
        note=result.note,
        chart=query.chart if query.chart and problem is None else None,
        chart_note=f"No chart drawn: {problem}. The table shows the result." if problem else None,
    )


@routes.get("/query/tables", "records.view", preview=headline("list the query tables"))
def records_query_tables(
    principal: Principal, path: None, query: None, body: None
) -> s.QueryTables:
    """List the tables and columns records_query can read: one table per model."""
    return s.QueryTables(
        tables=[
            s.QueryTable(
                name=t.name,
                model=t.model_name,
                columns=[
                    s.QueryColumn(
                        name=c.name, type=c.sql_type, field=c.field_key, field_type=c.field_type
                    )
                    for c in t.columns
                ],
            )
            for t in sql.catalogue(principal)
        ]
    )


@routes.get(
    "/approvals/{approval_id}", "records.view", preview=headline("check approval #{approval_id}")
)
def approvals_get(
    principal: Principal, path: s.ApprovalPath, query: None, body: None
) -> s.ApprovalOut:
    """Check a write that waits for approval in Monark: pending, done (with its result),
    failed, rejected (with the reason) or expired.

    A key marked "writes need approval" gets 202 with an approval id for each write; the
    write runs only once a member approves it in Monark's Approvals inbox."""
    # Imported here: held writes are stored calls of chat, which the MCP server (importing
    # these descriptors for its tools) must not load.
    from monark.api import hold_status

    return hold_status.approval_out(principal, path.approval_id)


V1_ROUTES: tuple[RouteDescriptor, ...] = tuple(routes.routes)
