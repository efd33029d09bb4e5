"""Domain events: one row per mutation, added to the caller's transaction."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from sqlalchemy import insert

from monark.core.models import Event
from monark.core.rbac import Principal
from monark.extensions import db

# Event types some feature acts on after commit (the automations engine: record events).
_FOLLOWED: set[str] = set()
# The automation run whose actions are writing events in this context, if any.
_written_by_run: ContextVar[int | None] = ContextVar("written_by_run", default=None)


def follow(types: Iterable[str]) -> None:
    """Mark events of ``types`` pending when written: the outbox of work after commit."""
    _FOLLOWED.update(types)


@contextmanager
def written_by_run(run_id: int) -> Iterator[None]:
    """Events written inside carry ``run_id`` in their payload (what set them off)."""
    token = _written_by_run.set(run_id)
    try:
        yield
    finally:
        _written_by_run.reset(token)


def record_event(
    principal: Principal,
    type: str,
    subject_type: str,
    subject_id: int | None,
    payload: dict[str, Any] | None = None,
) -> Event:
    """Add an event row to the session; it commits or rolls back with the mutation.

    Payloads hold ids and field names, never field values or message content.
    """
    event = Event(**_event_values(principal, type, subject_type, subject_id, payload))
    db.session.add(event)
    return event


def record_events(
    rows: Iterable[tuple[Principal, str, str, int | None, dict[str, Any] | None]],
) -> None:
    """Events of one change to many rows (``record_event``'s arguments each), written in
    one statement: nobody reads their ids back, so SQLite need not insert them one by one."""
    values = [_event_values(*row) for row in rows]
    if values:
        db.session.execute(insert(Event), values)


def _event_values(
    principal: Principal,
    type: str,
    subject_type: str,
    subject_id: int | None,
    payload: dict[str, Any] | None,
) -> dict[str, Any]:
    """An event row's columns: who acted (and for whom), about what."""
    if principal.actor_kind == "assistant":
        actor_id, on_behalf_of = principal.user_id, principal.user_id
    else:
        actor_id, on_behalf_of = principal.actor_id, None
    payload = dict(payload or {})
    # Who else took part in a write decided in the Approvals inbox (ids, never names).
    if principal.requested_by_id is not None:
        payload["requested_by_id"] = principal.requested_by_id
    if principal.approved_by_id is not None:
        payload["approved_by_id"] = principal.approved_by_id
    # Written by a run for a private record: readers of the event (the audit log) see its
    # content only if they may read that record (``readable_event``).
    if principal.confined_to is not None:
        payload["private_to"] = principal.confined_to
    # A run's own pending events say which run: work they set off counts in its chain.
    pending = type in _FOLLOWED
    if pending and (run_id := _written_by_run.get()) is not None:
        payload["run_id"] = run_id
    return {
        "org_id": principal.org_id,
        "type": type,
        "actor_kind": principal.actor_kind,
        "actor_id": actor_id,
        "on_behalf_of_id": on_behalf_of,
        "conversation_id": principal.conversation_id,
        "subject_type": subject_type,
        "subject_id": subject_id,
        "payload": payload,
        "pending": pending,
    }


Row = TypeVar("Row")


def save_new(
    principal: Principal,
    row: Row,
    type: str,
    subject_type: str,
    payload: dict[str, Any] | None = None,
    *,
    id_key: str | None = None,
) -> Row:
    """Add a new row with its creation event about it, and commit.

    ``id_key`` names the row's new id in the payload (first), e.g. ``{"model_id": …}``.
    """
    db.session.add(row)
    db.session.flush()  # the row's id, for its event
    if id_key is not None:
        payload = {id_key: row.id, **(payload or {})}
    record_event(principal, type, subject_type, row.id, payload)
    db.session.commit()
    return row
