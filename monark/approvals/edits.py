"""Editing a proposed write before it is decided: the person changes the arguments, the
card is drawn again from them, and Confirm runs exactly what the card then shows.

What may change is what the tool's edit schema offers (``Editable.edit_schema``);
the tool and its locked arguments (``declared.locked``: the path params that name the
target) never change, so an edit can never move the write to a record the card did not
name. The new arguments are checked by the route's own models (the tool's precheck) before
anything is stored; the model's own arguments stay on the call (``original_input``), and
the next step tells the model what the person changed. Under four eyes, an approver who
edits a call handed to them hands it back (``handover.hand_back``): they set its arguments
now, so the one who asked, or another member, confirms them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import update

from monark.approvals import declared, handover
from monark.approvals.policy import ApprovalPolicy
from monark.chat.calls import preview_of
from monark.chat.executor import ChatToolExecutor, ToolSpec
from monark.chat.models import CallEvent, ToolCall, ToolCallStatus
from monark.chat.store import tool_call_event
from monark.core.errors import Conflict, ValidationFailed
from monark.core.models import utcnow
from monark.core.rbac import Principal
from monark.core.text import storable
from monark.extensions import db

NOT_EDITABLE = "This action cannot be edited: Confirm or Reject it as it is."
ALREADY_DECIDED = "This action was already decided, so it can no longer be edited."


@runtime_checkable
class Editable(Protocol):
    """A tool executor whose proposed calls a person may edit (the host's toolset)."""

    def edit_schema(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The JSON Schema of what a person may change in a proposed call (its locked
        arguments left out), typed for the call's target; None: it cannot be edited."""
        ...


def edit_schema(
    executor: object, principal: Principal, name: str, arguments: dict[str, Any]
) -> dict[str, Any] | None:
    """What a person may change in a proposed call of ``executor`` (None: nothing, as for
    every call of an executor that edits none)."""
    if not isinstance(executor, Editable):
        return None
    return executor.edit_schema(principal, name, arguments)


def edited_arguments(
    spec: ToolSpec | None, current: Mapping[str, Any], edited: Mapping[str, Any]
) -> dict[str, Any]:
    """The call's new arguments: the edit, with every locked argument as it was (a locked
    name sent in the edit is ignored, never applied)."""
    locked = set(declared.locked(spec))
    merged = {k: v for k, v in edited.items() if k not in locked}
    merged.update({k: current[k] for k in locked if k in current})
    return merged


def arguments_after(
    executor: ChatToolExecutor, call: ToolCall, edited: Mapping[str, Any]
) -> dict[str, Any]:
    """The arguments ``edited`` would leave on ``call``: its locked ones kept, the rest as
    they would be stored."""
    spec = next((s for s in executor.specs() if s.name == call.name), None)
    return storable(edited_arguments(spec, call.input, edited))


def edit_call(
    executor: ChatToolExecutor,
    principal: Principal,
    call: ToolCall,
    edited: Mapping[str, Any],
) -> list[str]:
    """Store ``edited`` as the arguments of the still-proposed ``call`` (checked by the
    route's own models, its card drawn again) and say which arguments changed.

    ``ValidationFailed`` names each bad field and stores nothing; ``Conflict`` when the
    call was decided meanwhile (one conditional update: an edit never lands on a decided
    call)."""
    if not call.mutates or call.status != ToolCallStatus.PROPOSED:
        raise Conflict(ALREADY_DECIDED if call.status != ToolCallStatus.PROPOSED else NOT_EDITABLE)
    actor = principal.via_assistant(call.conversation_id)
    if edit_schema(executor, actor, call.name, dict(call.input)) is None:
        raise Conflict(NOT_EDITABLE)
    arguments = arguments_after(executor, call, edited)
    changed = changed_paths(call.input, arguments)
    if not changed:
        return []
    refused = executor.precheck(actor, call.name, dict(arguments))
    if refused is not None and not refused.ok:
        details = refused.details or [{"field": "arguments", "message": refused.error or ""}]
        raise ValidationFailed("These changes cannot work; nothing was saved.", details)
    preview = preview_of(executor, actor, _with_input(call, arguments))
    done = db.session.execute(
        update(ToolCall)
        .where(ToolCall.id == call.id, ToolCall.status == ToolCallStatus.PROPOSED)
        .values(
            input=arguments,
            original_input=call.original_input if call.original_input is not None else call.input,
            edited_by_id=principal.user_id,
            edited_at=utcnow(),
            preview=preview,
        )
        .execution_options(synchronize_session=False)
    ).rowcount
    if done != 1:
        db.session.rollback()
        raise Conflict(ALREADY_DECIDED)
    tool_call_event(actor, call, CallEvent.EDITED, {"fields": changed})
    if call.approver_id == principal.user_id and ApprovalPolicy.of(call.org_id).four_eyes(
        call.name
    ):
        # Maker-checker: whoever set these arguments never confirms them.
        handover.hand_back(principal, call)
    db.session.commit()
    db.session.refresh(call)
    return changed


def _with_input(call: ToolCall, arguments: dict[str, Any]) -> ToolCall:
    """A detached copy of the call with other arguments, to draw its card from."""
    return ToolCall(name=call.name, input=arguments, mutates=call.mutates, status=call.status)


def changed_paths(before: Any, after: Any, prefix: str = "") -> list[str]:
    """The dotted names of what differs between two argument objects (``values.status``)."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        paths: list[str] = []
        for key in sorted(set(before) | set(after), key=str):
            name = f"{prefix}{key}"
            if key not in before or key not in after:
                paths.append(name)
            else:
                paths += changed_paths(before[key], after[key], f"{name}.")
        return paths
    return [] if before == after else [prefix.rstrip(".") or "arguments"]


def edit_note(
    original: Mapping[str, Any] | None, edited: Mapping[str, Any], ran: bool = True
) -> str:
    """What the model reads before an edited call's result: which arguments the person
    changed, and what the call ran with (``ran`` False: it never ran, rejected or expired,
    so the note says only what the arguments became)."""
    if not original:
        return ""
    changed = ", ".join(changed_paths(original, edited)) or "nothing"
    shown = json.dumps(edited, ensure_ascii=False, sort_keys=True, default=str)
    if not ran:
        return (
            f"The user edited your arguments (changed: {changed}) to these: {shown}; "
            "it did not run. "
        )
    return (
        f"The user edited your arguments before deciding (changed: {changed}); "
        f"the call used these arguments instead: {shown}. "
    )
