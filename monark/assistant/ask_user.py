"""The ``ask_user`` tool: a question with choices (and "Something else…"), asked on a card.

Its call waits PROPOSED like a write (``ToolSpec.asks_user``): the turn stops there, and the
stored call is the question, so any instance resumes it from the database. Nothing runs it:
the user's answer settles it, exactly once (``chat.decisions.settle``), as its result
``{"answer": …}``, under a new turn that goes on. None of a write's approval rules apply to
a question (no Allow, no hand-over, no Edit, no four eyes): ``approvals`` decides only
calls that write (``decision.NOT_A_WRITE``). A new message instead passes it over
(``chat.turn.start.MOVED_ON_REASON``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from monark.approvals import expiry, own_calls
from monark.assistant.tools import invalid
from monark.chat import decisions
from monark.chat.executor import ToolOutcome, ToolSpec
from monark.chat.hooks import TurnHooks
from monark.chat.models import ToolCall, ToolCallStatus
from monark.chat.runtime import tool_executor
from monark.chat.turn.progress import Progress
from monark.chat.turn.run import Turn
from monark.chat.turn.start import claimed, require_assistant
from monark.core.errors import Conflict, NotFound, ValidationFailed
from monark.core.rbac import Principal
from monark.core.routes import describe_error, without_titles

NAME = "ask_user"
QUESTION_MAX, CHOICE_MAX, CHOICES_MIN, CHOICES_MAX = 300, 100, 2, 6
ANSWER_MAX = 2_000  # what a person types in "Something else…"
ALREADY_ANSWERED = "This question was already answered."
NOT_A_QUESTION = "That card is not a question."
EXPIRED = "This question expired before it was answered: send a message instead."


class AskUserInput(BaseModel):
    question: str = Field(
        description="The one thing you need to know, as a short question.",
        min_length=1,
        max_length=QUESTION_MAX,
    )
    choices: list[str] = Field(
        description=(
            "The likely answers, each a short distinct phrase; the user may also write their own."
        ),
        min_length=CHOICES_MIN,
        max_length=CHOICES_MAX,
    )

    @field_validator("question")
    @classmethod
    def _said(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("The question is empty.")
        return value.strip()

    @field_validator("choices")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        kept = [c.strip() for c in value]
        if any(not c for c in kept):
            raise ValueError("A choice is empty.")
        if any(len(c) > CHOICE_MAX for c in kept):
            raise ValueError(f"A choice is at most {CHOICE_MAX} characters.")
        if len({c.casefold() for c in kept}) != len(kept):
            raise ValueError("Two choices are the same; give distinct choices.")
        return kept


def _refusal(arguments: dict[str, Any]) -> str | None:
    """Why the model's arguments make no question (what the model reads), or None."""
    try:
        AskUserInput.model_validate(arguments)
    except ValidationError as err:
        problem = ValidationFailed.from_pydantic(err, "Invalid arguments for ask_user.")
        return describe_error(problem.message, problem.details)
    return None


def _schema() -> dict[str, Any]:
    properties = without_titles(AskUserInput.model_json_schema()["properties"])
    properties["choices"]["items"] = {"type": "string", "maxLength": CHOICE_MAX}
    return {
        "type": "object",
        "properties": properties,
        "required": ["question", "choices"],
        "additionalProperties": False,
    }


class AskUserTool:
    """The ``ask_user`` tool (``monark.assistant.tools.AssistantTool``)."""

    spec = ToolSpec(
        name=NAME,
        description=(
            "Ask the user one question when their request is ambiguous and a wrong guess "
            "would cost them (which record, which of two meanings). Give 2 to 6 short, "
            "distinct choices; the user may also write another answer. The turn waits for "
            'their answer, which comes back as this tool\'s result ({"answer": ...}). Do '
            "not ask what you can find out with a read."
        ),
        input_schema=_schema(),
        mutates=False,
        validate=_refusal,
        asks_user=True,
    )

    def preview(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"headline": "ask you a question"}

    def precheck(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome | None:
        return None  # ``spec.validate`` refused bad arguments before any card

    def run(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome:
        # Never reached by the loop (the call waits for the user); anything else is refused.
        return invalid("Only the user answers a question, on its card.", [])


# ---- the card's facts and its answer ------------------------------------------------------


def asks_user(call: ToolCall) -> bool:
    """Whether ``call`` is a question to the user (its tool says so; never a write)."""
    if call.mutates:
        return False
    return any(s.asks_user for s in tool_executor().specs() if s.name == call.name)


def question_of(call: ToolCall) -> tuple[str, list[str]]:
    """The question and its choices as stored (checked when the model asked)."""
    arguments = call.input if isinstance(call.input, dict) else {}
    choices = arguments.get("choices")
    return (
        str(arguments.get("question") or ""),
        [str(c) for c in choices] if isinstance(choices, list) else [],
    )


def answer_of(call: ToolCall) -> str | None:
    """The answer the user gave (None until one did)."""
    result = call.result
    if call.status == ToolCallStatus.SUCCEEDED and isinstance(result, dict):
        answer = result.get("answer")
        return str(answer) if answer is not None else None
    return None


def _refused(message: str, field: str = "answer") -> ValidationFailed:
    return ValidationFailed(message, [{"field": field, "message": message}])


def parse_answer(call: ToolCall, choice: str | None, text: str | None) -> str:
    """The answer a click or "Something else…" gave: a choice by its number (``choice``),
    else the text typed; ``ValidationFailed`` naming the field for anything else."""
    _, choices = question_of(call)
    if choice is not None:
        # Its number as the card wrote it: "1", never "01" or "+1".
        written = choice.isascii() and choice.isdigit() and choice == str(int(choice))
        if not written or int(choice) >= len(choices):
            raise _refused("That is not one of the choices.", "choice")
        return choices[int(choice)]
    said = (text or "").strip()
    if not said:
        raise _refused("Pick a choice, or write an answer under Something else.")
    if "\x00" in said:
        raise _refused("An answer cannot contain NUL characters: remove them.")
    if len(said) > ANSWER_MAX:
        raise _refused(
            f"An answer is at most {ANSWER_MAX:,} characters; this one has {len(said):,}."
        )
    return said


def begin_answer(
    principal: Principal, tool_call_id: int, choice: str | None, text: str | None
) -> Turn:
    """Answer one of the user's own questions, exactly once, under a new turn that then
    goes on (``Conflict`` when it was answered, passed over or expired meanwhile)."""
    require_assistant(principal)
    call = own_calls.get_tool_call(principal, tool_call_id)  # someone else's: NotFound
    if not asks_user(call):
        raise NotFound(NOT_A_QUESTION)
    answer = parse_answer(call, choice, text)
    conversation_id = call.conversation_id

    def opening() -> list[Progress]:
        current = own_calls.get_tool_call(principal, tool_call_id)
        if expiry.is_expired(current):
            expiry.expire_overdue(principal, conversation_id)
            raise Conflict(EXPIRED)
        settled = decisions.Settlement(current, ToolCallStatus.SUCCEEDED, result={"answer": answer})
        decisions.settle(principal, [settled], lost=lambda _: Conflict(ALREADY_ANSWERED))
        return []

    def run(hooks: TurnHooks) -> None:
        hooks.on_tool_call(own_calls.get_tool_call(principal, tool_call_id))

    return claimed(principal, conversation_id, opening, run)
