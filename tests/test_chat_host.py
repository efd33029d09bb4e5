"""What chat asks of its host (``chat.host``, ``ToolOutcome.undo``), and the host's answers."""

from __future__ import annotations

from datetime import date

import pytest
from flask import Flask

from monark.approvals.undo_plan import run_keeping_undo
from monark.assistant.prompt import AssistantPrompt, PageContext, context_sentence
from monark.chat import runtime
from monark.chat.executor import ToolOutcome
from monark.chat.turn.start import require_assistant
from monark.core.errors import Forbidden
from monark.core.routes import Undo


def test_an_app_whose_host_injected_no_gates_keeps_the_assistant_closed(world):
    bare = Flask("bare")
    with bare.app_context():
        assert runtime.runtime().access.check(world.a.principal("member")).open is False
        with pytest.raises(Forbidden, match="not set up"):
            require_assistant(world.a.principal("member"))


def test_the_app_factory_injects_the_assistants_gates_and_prompt(app, world):
    member = world.a.principal("member")
    assert runtime.runtime().access.check(member).open is True
    assert runtime.runtime().prompt.system(member).startswith("You are Chrysa")


def test_the_page_note_reads_a_mapping_as_the_page_context_it_names():
    where = {"route": "/models/tasks/records/3", "model": "tasks", "record_id": 3}
    today = date(2026, 12, 3)
    expected = context_sentence(PageContext(**where), today)
    assert AssistantPrompt().page_note(where, today) == expected
    assert 'record 3 of the "tasks" model' in expected


def _plan(principal, arguments, result, before):
    return {"reverse": {"tool": "put_back", "arguments": {"to": before}}, "summary": "put back"}


def test_a_done_write_carries_the_undo_its_route_plans_from_the_state_before_it(app, world):
    undo = Undo(before=lambda principal, arguments: "old", plan=_plan)
    outcome = run_keeping_undo(
        undo, "set", world.a.principal("member"), {}, lambda: ToolOutcome(ok=True, result={})
    )
    assert outcome.undo == {
        "reverse": {"tool": "put_back", "arguments": {"to": "old"}},
        "summary": "put back",
    }


def test_a_write_whose_before_state_cannot_be_read_still_runs_and_keeps_no_undo(app, world):
    def unreadable(principal, arguments):
        raise LookupError("gone")

    ran = []
    outcome = run_keeping_undo(
        Undo(before=unreadable, plan=_plan),
        "set",
        world.a.principal("member"),
        {},
        lambda: ran.append(1) or ToolOutcome(ok=True, result={}),
    )
    assert ran == [1] and outcome.ok and outcome.undo is None


def test_a_failed_write_keeps_no_undo(app, world):
    undo = Undo(before=lambda principal, arguments: "old", plan=_plan)
    outcome = run_keeping_undo(
        undo, "set", world.a.principal("member"), {}, lambda: ToolOutcome(ok=False, error="no")
    )
    assert outcome.undo is None
