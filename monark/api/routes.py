"""``V1_ROUTES``: every /api/v1 endpoint, with handlers that call the services."""

from __future__ import annotations

from monark.api import schemas as s
from monark.core.models import ApiKey, Org, User
from monark.core.rbac import Principal
from monark.core.routes import RouteDescriptor, headline
from monark.extensions import db
from monark.records import previews
from monark.records import services as records
from monark.records.models import Record, RecordModel


def record_out(model: RecordModel, record: Record) -> s.RecordOut:
    """A record as the API shows it."""
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
    return s.ModelOut(
        key=model.key,
        name=model.name,
        description=model.description,
        fields=[
            s.FieldOut(
                key=f.key, label=f.label, type=f.type, required=f.required, options=f.options or []
            )
            for f in model.fields
        ],
    )


def me_get(principal: Principal, path: None, query: None, body: None) -> s.MeOut:
    org = db.session.get(Org, principal.org_id)
    user = db.session.get(User, principal.user_id) if principal.user_id else None
    key = db.session.get(ApiKey, principal.actor_id) if principal.actor_kind == "api_key" else None
    return s.MeOut(
        actor_kind=principal.actor_kind,
        user=s.UserOut(id=user.id, email=user.email, name=user.name) if user else None,
        api_key=s.ApiKeyRef(id=key.id, name=key.name) if key else None,
        org=s.OrgOut(id=org.id, name=org.name, slug=org.slug),
        role=principal.role,
        permissions=sorted(principal.permissions),
    )


def models_list(principal: Principal, path: None, query: None, body: None) -> s.ModelList:
    return s.ModelList(
        items=[
            s.ModelSummary(key=m.key, name=m.name, description=m.description)
            for m in records.list_models(principal)
        ]
    )


def models_get(principal: Principal, path: s.ModelPath, query: None, body: None) -> s.ModelOut:
    return model_out(records.get_model(principal, path.model))


def records_list(
    principal: Principal, path: s.ModelPath, query: s.RecordsQuery, body: None
) -> s.RecordList:
    model = records.get_model(principal, path.model)
    page = records.list_records(
        principal,
        model,
        q=query.q,
        filter=records.parse_filter(query.filter),
        limit=query.limit,
        cursor=query.cursor,
    )
    return s.RecordList(
        items=[record_out(model, r) for r in page.items], next_cursor=page.next_cursor
    )


def records_get(principal: Principal, path: s.RecordPath, query: None, body: None) -> s.RecordOut:
    model = records.get_model(principal, path.model)
    return record_out(model, records.get_record(principal, model, path.record_id))


def records_create(
    principal: Principal, path: s.ModelPath, query: None, body: s.RecordCreate
) -> s.RecordOut:
    model = records.get_model(principal, path.model)
    record = records.create_record(principal, model, body.values, body.visibility)
    return record_out(model, record)


def records_update(
    principal: Principal, path: s.RecordPath, query: None, body: s.RecordUpdate
) -> s.RecordUpdated:
    model = records.get_model(principal, path.model)
    record, changed = records.update_record(
        principal, model, path.record_id, body.values, body.visibility
    )
    return s.RecordUpdated(**record_out(model, record).model_dump(), changed_fields=changed)


def records_delete(principal: Principal, path: s.RecordPath, query: None, body: None) -> s.Deleted:
    model = records.get_model(principal, path.model)
    records.delete_record(principal, model, path.record_id)
    return s.Deleted(id=path.record_id)


# Public: each is under /api/v1, in the OpenAPI document, an MCP tool and an in-app tool.
V1_ROUTES: tuple[RouteDescriptor, ...] = (
    RouteDescriptor(
        method="GET",
        path="/me",
        name="me_get",
        summary="Who the caller is: user or API key, org, role and permissions.",
        permission="records.view",
        handler=me_get,
        response_model=s.MeOut,
        preview=headline("check who you are"),
    ),
    RouteDescriptor(
        method="GET",
        path="/models",
        name="models_list",
        summary="List the organization's models (kinds of records, such as tasks).",
        permission="records.view",
        handler=models_list,
        response_model=s.ModelList,
        preview=headline("list the models"),
    ),
    RouteDescriptor(
        method="GET",
        path="/models/{model}",
        name="models_get",
        summary="Get one model with its fields: key, label, type, required, options.",
        permission="records.view",
        handler=models_get,
        response_model=s.ModelOut,
        path_model=s.ModelPath,
        preview=previews.model_get,
    ),
    RouteDescriptor(
        method="GET",
        path="/models/{model}/records",
        name="records_list",
        summary="List a model's records, newest first, with search, a field filter and paging.",
        permission="records.view",
        handler=records_list,
        response_model=s.RecordList,
        path_model=s.ModelPath,
        query_model=s.RecordsQuery,
        preview=previews.list_records,
    ),
    RouteDescriptor(
        method="GET",
        path="/models/{model}/records/{record_id}",
        name="records_get",
        summary="Get one record by id.",
        permission="records.view",
        handler=records_get,
        response_model=s.RecordOut,
        path_model=s.RecordPath,
        preview=previews.get,
    ),
    RouteDescriptor(
        method="POST",
        path="/models/{model}/records",
        name="records_create",
        summary="Create a record; values are checked against the model's fields.",
        permission="records.create",
        handler=records_create,
        response_model=s.RecordOut,
        path_model=s.ModelPath,
        body_model=s.RecordCreate,
        preview=previews.create,
        status=201,
    ),
    RouteDescriptor(
        method="PATCH",
        path="/models/{model}/records/{record_id}",
        name="records_update",
        summary="Change some fields of a record; fields not given keep their values.",
        permission="records.update",
        handler=records_update,
        response_model=s.RecordUpdated,
        path_model=s.RecordPath,
        body_model=s.RecordUpdate,
        preview=previews.update,
    ),
    RouteDescriptor(
        method="DELETE",
        path="/models/{model}/records/{record_id}",
        name="records_delete",
        summary="Delete a record.",
        permission="records.delete",
        handler=records_delete,
        response_model=s.Deleted,
        path_model=s.RecordPath,
        preview=previews.delete,
    ),
)
