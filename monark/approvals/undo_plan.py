"""What undoing a done write takes, planned as the write runs.

A route that declares how its writes are undone (``core.routes.Undo``) has its tool run
through ``run_keeping_undo``: the hook reads the before-state in the write's own unit of
work, just before it; once the write succeeded, it plans the undo from that and the
result. The plan rides on the outcome (``ToolOutcome.undo``), which chat keeps on the call
(``ToolCall.undo``) in the same transaction as the write; ``approvals.undo`` carries it out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import current_app

from monark.chat.executor import ToolOutcome
from monark.core.rbac import Principal
from monark.core.routes import Undo
from monark.core.text import storable


def _before(undo: Undo, name: str, principal: Principal, arguments: dict[str, Any]) -> Any:
    """What the undo hook reads before the write runs (None when it cannot)."""
    try:
        return undo.before(principal, dict(arguments))
    except Exception:  # no undo then; the write itself still runs and says how it went
        current_app.logger.info("no undo state for %s", name, exc_info=True)
        return None


def _plan(
    undo: Undo, name: str, principal: Principal, arguments: dict[str, Any], result: Any, before: Any
) -> dict[str, Any] | None:
    """What undoing the done write takes (``ToolCall.undo``), or None."""
    try:
        return storable(undo.plan(principal, dict(arguments), result, before))
    except Exception:  # a write that cannot be undone is still done
        current_app.logger.exception("planning the undo of %s failed", name)
        return None


def run_keeping_undo(
    undo: Undo | None,
    name: str,
    principal: Principal,
    arguments: dict[str, Any],
    run: Callable[[], ToolOutcome],
) -> ToolOutcome:
    """``run()``'s outcome, with what undoing it takes when the write succeeded."""
    if undo is None:
        return run()
    before = _before(undo, name, principal, arguments)
    outcome = run()
    if outcome.ok and before is not None:
        outcome.undo = _plan(undo, name, principal, arguments, outcome.result, before)
    return outcome
