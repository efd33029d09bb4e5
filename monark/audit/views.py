"""The audit log: every domain event of the org, filterable, paginated."""

from __future__ import annotations

from flask import Blueprint, render_template, request
from sqlalchemy import select

from monark.core.auth import guard, require_principal
from monark.core.htmx import is_partial
from monark.core.ids import parse_id, query_id
from monark.core.models import MAX_ID, ApiKey, Event, User
from monark.extensions import db
from monark.records.models import Record, RecordModel
from monark.records.queries import members

bp = Blueprint("audit", __name__)
PAGE_SIZE = 50


@bp.get("/audit")
@guard("audit.view")
def audit_log():
    """Events newest first, filtered by type and actor, in keyset pages."""
    principal = require_principal()
    event_type = request.args.get("type", "").strip()
    actor = request.args.get("actor", "").strip()
    before = query_id("before")
    # Every assistant message writes an event: a busy assistant buries the rest.
    hide_chat = request.args.get("hide_chat") == "1"
    stmt = select(Event).where(Event.org_id == principal.org_id)
    if event_type:
        stmt = stmt.where(Event.type == event_type)
    if hide_chat:
        stmt = stmt.where(Event.type != "chat.message.created")
    if actor:
        kind, _, raw_id = actor.partition(":")
        actor_id = parse_id(raw_id, "actor", "query")
        if kind == "user" and actor_id is not None:
            # A person's actions include those they made through the assistant.
            stmt = stmt.where(Event.actor_kind.in_(("user", "assistant")))
        else:
            stmt = stmt.where(Event.actor_kind == kind)
        if actor_id is not None:
            stmt = stmt.where(Event.actor_id == actor_id)
    if before is not None:
        stmt = stmt.where(Event.id < before)
    rows = list(db.session.scalars(stmt.order_by(Event.id.desc()).limit(PAGE_SIZE + 1)))
    next_before = rows[PAGE_SIZE - 1].id if len(rows) > PAGE_SIZE else None
    rows = rows[:PAGE_SIZE]
    types = db.session.scalars(
        select(Event.type).where(Event.org_id == principal.org_id).distinct().order_by(Event.type)
    ).all()
    user_ids = {e.actor_id for e in rows if e.actor_kind in ("user", "assistant") and e.actor_id}
    # Member events name the member by id in their payload: show the name instead.
    user_ids |= {
        e.payload["user_id"]
        for e in rows
        if isinstance(e.payload, dict) and isinstance(e.payload.get("user_id"), int)
    }
    users = (
        {u.id: u for u in db.session.scalars(select(User).where(User.id.in_(user_ids)))}
        if user_ids
        else {}
    )
    # Names for the model ids in payloads, and links for the records that still exist.
    model_ids = {e.payload.get("model_id") for e in rows if isinstance(e.payload, dict)}
    model_ids = {m for m in model_ids if isinstance(m, int) and 0 < m <= MAX_ID}
    models = (
        dict(
            db.session.execute(
                select(RecordModel.id, RecordModel.name).where(
                    RecordModel.org_id == principal.org_id, RecordModel.id.in_(model_ids)
                )
            ).all()
        )
        if model_ids
        else {}
    )
    record_ids = {e.subject_id for e in rows if e.subject_type == "record" and e.subject_id}
    records = (
        dict(
            db.session.execute(
                select(Record.id, RecordModel.key)
                .join(RecordModel, RecordModel.id == Record.model_id)
                .where(Record.org_id == principal.org_id, Record.id.in_(record_ids))
            ).all()
        )
        if record_ids
        else {}
    )
    actors = [(f"user:{u.id}", u.name) for u in members(principal.org_id)]
    actors += [
        (f"api_key:{k.id}", f"API key {k.name}")
        for k in db.session.scalars(select(ApiKey).where(ApiKey.org_id == principal.org_id))
    ]
    actors.append(("assistant", "The assistant (any user)"))
    actors.append(("automation", "Automations"))
    context = {
        "actors": actors,
        "events": rows,
        "users": users,
        "models": models,
        "records": records,
        "types": types,
        "event_type": event_type,
        "hide_chat": hide_chat,
        "actor": actor,
        "next_before": next_before,
        "before": before,
    }
    if is_partial() and request.headers.get("HX-Target", "").endswith("#audit-table"):
        return render_template("audit/_table.html", **context)
    return render_template("audit/list.html", **context)
