"""Running a tool call as the user via the assistant, and a call's card preview and checks.

The tool boundary: whatever a tool does wrong becomes a failed result, never a crash of
the turn; every call runs within ``CHAT_TOOL_TIMEOUT``, and what it stores is bounded.
"""

from __future__ import annotations

import time
from typing import Any

from flask import current_app
from sqlalchemy import update

import monark.core.metrics as metrics
from monark.chat import store
from monark.chat.executor import ChatToolExecutor, ToolOutcome, ToolSpec
from monark.chat.hooks import TurnHooks
from monark.chat.models import CallEvent, ToolCall, ToolCallStatus
from monark.chat.turn import lease
from monark.core.bounds import bounded, check_depth, clip
from monark.core.rbac import Principal
from monark.core.settings import chat_settings
from monark.core.text import storable
from monark.core.uow import (
    Deadline,
    TimeLimitPassed,
    session_released,
    time_limit,
    unit_of_work,
)
from monark.extensions import db


def _outcome_values(outcome: ToolOutcome, duration_ms: int) -> dict[str, Any]:
    if outcome.ok:
        return {
            "status": ToolCallStatus.SUCCEEDED,
            "result": kept(outcome.result),
            "error": None,
            "duration_ms": duration_ms,
        }
    return {
        "status": ToolCallStatus.FAILED,
        "error": kept(outcome.error or "The tool failed."),
        "result": {"details": kept(outcome.details)} if outcome.details else None,
        "duration_ms": duration_ms,
    }


def timed_out(seconds: float) -> ToolOutcome:
    """The outcome of a call stopped at its time limit."""
    return ToolOutcome(
        ok=False,
        error=f"The tool ran longer than its {seconds:g} s limit and was stopped; nothing "
        "it did was kept. Ask for less at a time, or try again later.",
    )


def _store_outcome(actor: Principal, call: ToolCall, values: dict[str, Any]) -> bool:
    """The call's outcome and event; False when a turn that took over settled it meanwhile."""
    changed = db.session.execute(
        update(ToolCall)
        .where(ToolCall.id == call.id, ToolCall.status == ToolCallStatus.EXECUTING)
        .values(**values)
        .execution_options(synchronize_session=False)
    ).rowcount
    if changed != 1:
        return False
    succeeded = values["status"] == ToolCallStatus.SUCCEEDED
    store.tool_call_event(actor, call, CallEvent.SUCCEEDED if succeeded else CallEvent.FAILED)
    return True


def run_tool_call(
    principal: Principal, call: ToolCall, executor: ChatToolExecutor, hooks: TurnHooks
) -> None:
    """Run one call as the user via the assistant; store SUCCEEDED or FAILED and commit (a
    write's in its own transaction, so one a crash leaves EXECUTING changed nothing)."""
    actor = principal.via_assistant(call.conversation_id)
    limit = chat_settings().tool_timeout
    started = time.perf_counter()
    # Nothing of ours pending, no connection held, while the tool's own unit runs.
    with session_released():
        outcome, stored = _run_within(limit, actor, call, executor, started)
    if not stored:
        duration = int((time.perf_counter() - started) * 1000)
        _store_outcome(actor, call, _outcome_values(outcome, duration))
        db.session.commit()
    db.session.refresh(call)
    metrics.tool_call(call.name, call.status)
    hooks.on_tool_call(call)


def _run_within(
    limit: float, actor: Principal, call: ToolCall, executor: ChatToolExecutor, started: float
) -> tuple[ToolOutcome, bool]:
    """The call's outcome within ``limit`` seconds, and whether it was stored with its writes."""
    deadline: Deadline | None = None
    stored = False
    try:
        # Its writes are kept only if it succeeds within the limit (a commit after it keeps
        # nothing); the in-process calls it makes share its unit and connection.
        with time_limit(limit) as deadline, unit_of_work(read_only=not call.mutates) as unit:
            outcome = executor.execute(actor, call.name, dict(call.input))
            if outcome.ok and deadline.passed():  # past it outside the database: failed
                outcome = timed_out(limit)
            if not outcome.ok:
                unit.fail()
            elif call.mutates:
                duration = int((time.perf_counter() - started) * 1000)
                values = _outcome_values(outcome, duration)
                # An undo is not undone again.
                values["undo"] = outcome.undo if call.undo_of_id is None else None
                stored = _store_outcome(actor, call, values)
                if not stored:  # settled as interrupted meanwhile: keep its word, undo
                    unit.fail()
                    outcome = ToolOutcome(ok=False, error=lease.INTERRUPTED_CALL)
    except TimeLimitPassed:  # a statement, or the commit, came after the deadline
        return timed_out(limit), False
    except Exception as err:  # the tool boundary: a failure becomes a result the model sees
        current_app.logger.exception("tool %s failed", call.name)
        # The exception's text may hold SQL or internals: it goes to the log, not the model.
        outcome = ToolOutcome(
            ok=False,
            error=f"The tool failed unexpectedly ({type(err).__name__}); the server logged it.",
        )
        stored = False
    if not outcome.ok and deadline is not None and deadline.passed():
        outcome = timed_out(limit)  # whatever its stopped statement made of it
    return outcome, stored


def kept(value: Any, limit: int | None = None) -> Any:
    """Anything a call keeps, storable, cut with markers at ``CHAT_TOOL_RESULT_MAX`` of JSON."""
    limit = limit if limit is not None else chat_settings().tool_result_max
    if isinstance(value, str):
        return storable(clip(value, limit))
    return storable(bounded(value, limit))


def preview_of(
    executor: ChatToolExecutor, actor: Principal, call: ToolCall
) -> dict[str, Any] | None:
    """The card's preview of a call (None when it cannot be made)."""
    try:
        return executor.preview(actor, call.name, dict(call.input))
    except Exception:  # a preview is a courtesy; the call itself must still be stored
        current_app.logger.exception("previewing %s failed", call.name)
        return None


def validate(spec: ToolSpec | None, call: ToolCall) -> str | None:
    """Why a call is refused before any card or run (undeclared, too deep, its own check)."""
    try:
        check_depth(call.input)
    except ValueError as err:
        call.input = {}
        return f"The arguments {err}; nothing was run."
    if spec is None:
        return f"There is no tool named {call.name!r}; call only the tools you were given."
    if spec.validate is None:
        return None
    try:
        refused = spec.validate(dict(call.input))
    except Exception:  # a check that breaks does not decide: the tool checks again
        current_app.logger.exception("validating %s failed", call.name)
        return None
    return kept(refused) if refused else None


def precheck(executor: ChatToolExecutor, actor: Principal, call: ToolCall) -> None:
    """Fail a write now (no card) when its arguments can never work."""
    try:
        outcome = executor.precheck(actor, call.name, dict(call.input))
    except Exception:  # a check that breaks must not block the call: the user still decides
        current_app.logger.exception("prechecking %s failed", call.name)
        return
    if outcome is not None and not outcome.ok:
        call.status = ToolCallStatus.FAILED
        call.error = kept(outcome.error or "The arguments are invalid.")
        call.result = {"details": kept(outcome.details)} if outcome.details else None
