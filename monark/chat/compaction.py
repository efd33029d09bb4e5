"""Conversations of any length: keeping what the model sees within its context window.

A request is measured by the last reply's prompt tokens plus what came since (or every
character, when no reply measured it as it is now). Past ``stub_at`` of the window, older
tool results become one-line stubs; the boundary only moves forward, in jumps of a tenth
of the window, so the cached prefix changes seldom. Past ``compact_at``, the oldest whole
turns (never the current one, nor one with a call waiting) are replaced by a summary the
model writes. Stored rows never change: the thread still shows everything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from monark.chat import store
from monark.chat.executor import ToolSpec
from monark.chat.hooks import TurnHooks
from monark.chat.host import Charge
from monark.chat.llm.types import (
    Block,
    LlmMessage,
    LlmRequest,
    TextBlock,
    ToolDefinition,
    ToolUseBlock,
)
from monark.chat.models import (
    PENDING_STATUSES,
    Conversation,
    MessageRole,
    MessageStatus,
)
from monark.chat.runtime import runtime
from monark.chat.setup import ContextPolicy, TurnSetup
from monark.chat.streaming import stream_step
from monark.chat.transcript import build_llm_messages, row_turns, shown_rows
from monark.core.rbac import Principal
from monark.extensions import db

CHARS_PER_TOKEN = 4  # a rough count, corrected by the provider's own after each step
# What a block costs beyond its text (type, ids, framing): most of many short messages.
BLOCK_CHARS = 48
STUB_JUMP = 0.1  # the least share of the window one move of the stub boundary saves
MAX_ROUNDS = 3  # summaries one step may write (a history far past the window takes more)
SUMMARY_TOKENS = 2048  # the longest summary asked for
SUMMARIZE = (
    "The conversation above is about to leave your context window. Summarize it (with the "
    "earlier summary, if there is one) so that you can carry on without it: what the user "
    "asked for and decided, the facts and figures found (with record ids and names), the "
    "changes made, confirmed or rejected, and what is still open. Be brief: short "
    "paragraphs or lists, in the conversation's language. Answer with the summary only; "
    "do not call tools."
)

Row = store.TranscriptMessage


def tokens_of(chars: int) -> int:
    """A rough token count of ``chars`` characters."""
    return -(-chars // CHARS_PER_TOKEN)


def _block_chars(block: Block) -> int:
    if isinstance(block, TextBlock):
        return BLOCK_CHARS + len(block.text)
    if isinstance(block, ToolUseBlock):
        return BLOCK_CHARS + len(block.name) + len(json.dumps(block.input, ensure_ascii=False))
    return BLOCK_CHARS + len(block.content)


def fixed_chars(system: str, tools: list[ToolDefinition]) -> int:
    """The characters of what every request carries: the system prompt and the tools."""
    schemas = sum(len(json.dumps(t.input_schema)) for t in tools)
    return len(system) + sum(len(t.name) + len(t.description) for t in tools) + schemas


@dataclass
class Context:
    """A conversation as the model would see it now, measured row by row (in characters)."""

    summary: Row | None
    shown: list[Row]  # the rows after what the summary covers
    specs: Mapping[str, ToolSpec]
    base: int  # system, tools and the summary
    stub_before: int | None
    measured_after: int  # replies after this message id measured the request as it is now
    _sizes: dict[tuple[int, bool], int] = field(default_factory=dict)

    @classmethod
    def of(
        cls, rows: list[Row], conversation: Conversation, specs: Mapping[str, ToolSpec], fixed: int
    ) -> Context:
        """The context of ``rows`` with the conversation's stub boundary."""
        summary, shown = shown_rows(rows)
        return cls(
            summary,
            shown,  # type: ignore[arg-type]
            specs,
            fixed + (len(summary.text) if summary is not None else 0),
            conversation.context_stub_before,
            max(summary.id if summary else 0, conversation.context_stub_moved_at or 0),
        )

    def size(self, i: int, stubbed: bool | None = None) -> int:
        """Characters of shown row ``i``: as sent now, or with its results stubbed or not."""
        row = self.shown[i]
        if stubbed is None:
            stubbed = self.stub_before is not None and row.id < self.stub_before
        if not row.tool_calls:
            stubbed = False
        key = (i, stubbed)
        if key not in self._sizes:
            turns = row_turns(row, self.specs, row.id + 1 if stubbed else None)
            self._sizes[key] = sum(_block_chars(b) for _, blocks in turns for b in blocks)
        return self._sizes[key]

    def chars(self, start: int = 0, end: int | None = None) -> int:
        """Characters of shown rows ``start`` to ``end``, as sent now."""
        return sum(self.size(i) for i in range(start, len(self.shown) if end is None else end))

    def estimate(self) -> int:
        """Tokens of the next request: the last reply's measured prompt and what came since."""
        for i in range(len(self.shown) - 1, -1, -1):
            row = self.shown[i]
            if row.role == MessageRole.ASSISTANT and row.prompt_tokens:
                if row.id <= self.measured_after:
                    break
                return row.prompt_tokens + tokens_of(self.chars(i))
        return tokens_of(self.base + self.chars())


def stub_boundary(context: Context, policy: ContextPolicy, force: bool = False) -> int | None:
    """Where the stub boundary moves, keeping ``policy.keep`` whole; None unless it saves
    ``STUB_JUMP`` of the window (any saving, forced)."""
    shown = context.shown
    with_calls = [i for i, row in enumerate(shown) if row.tool_calls]
    if not with_calls:
        return None
    keep = 0 if force else policy.keep * CHARS_PER_TOKEN
    kept, cut = 0, 0
    for i in reversed(with_calls):
        kept += context.size(i, stubbed=False) - context.size(i, stubbed=True)
        if kept > keep:
            cut = i + 1
            break
    cut = min(cut, with_calls[-1])
    current = context.stub_before or 0
    saved = sum(
        context.size(i, stubbed=False) - context.size(i, stubbed=True)
        for i in range(cut)
        if shown[i].id >= current
    )
    least = 1 if force else policy.tokens(STUB_JUMP) * CHARS_PER_TOKEN
    if cut == 0 or shown[cut].id <= current or saved < least:
        return None
    return shown[cut].id


def compaction_point(context: Context, policy: ContextPolicy, force: bool = False) -> int | None:
    """The first kept turn's index (whole turns before it, and before any waiting call, are
    summarized: the fewest that leave ``policy.keep``, or forced, all one request holds)."""
    shown = context.shown
    waiting = next(
        (i for i, r in enumerate(shown) if any(c.status in PENDING_STATUSES for c in r.tool_calls)),
        len(shown),
    )
    room = policy.tokens(policy.compact_at) * CHARS_PER_TOKEN - context.base - len(SUMMARIZE)
    starts = [
        i
        for i, row in enumerate(shown)
        if 0 < i <= waiting and row.role == MessageRole.USER and context.chars(0, i) <= room
    ]
    if not starts:
        return None
    if force:
        return starts[-1]
    keep = policy.keep * CHARS_PER_TOKEN
    return next((i for i in starts if context.chars(i) <= keep), starts[-1])


class _Quiet(TurnHooks):
    """A summary's hooks: nothing of it streams to the user; Stop still stops it."""

    def __init__(self, inner: TurnHooks):
        self.inner = inner

    def should_stop(self) -> bool:
        return self.inner.should_stop()


def summary_request(setup: TurnSetup, context: Context, start: int) -> LlmRequest:
    """The request for a summary of the rows before ``start``, on the steps' cached prefix."""
    prior = [context.summary] if context.summary is not None else []
    messages = build_llm_messages(
        [*prior, *context.shown[:start]], setup.specs, context.stub_before
    )
    ask = TextBlock(SUMMARIZE)
    if messages and messages[-1].role == "user":
        messages[-1] = LlmMessage("user", (*messages[-1].content, ask))
    else:
        messages.append(LlmMessage("user", (ask,)))
    return setup.request(messages, max_tokens=SUMMARY_TOKENS)


def _compact(
    setup: TurnSetup,
    principal: Principal,
    conversation: Conversation,
    context: Context,
    start: int,
    hooks: TurnHooks,
) -> bool:
    """Store the model's summary of the rows before ``start``; False when none came."""
    request = summary_request(setup, context, start)
    step = stream_step(setup.provider, request, _Quiet(hooks), setup.silence)
    text = "".join(step.text).strip()
    if step.error or step.stopped or not text:
        return False
    summary = store.add_message(
        conversation,
        principal.via_assistant(conversation.id),
        author_kind="agent",
        role=MessageRole.SUMMARY,
        text=text,
        content=[{"type": "summary", "through": context.shown[start - 1].id}],
        status=MessageStatus.COMPLETE,
        provider=setup.provider_name,
        model=setup.model,
        stop_reason=step.stop_reason,
    )
    # Counted, not checked: the step that follows checks the spend.
    runtime().meter.charge(Charge(summary, step.usage, principal, setup.price))
    db.session.commit()
    hooks.on_message_saved(summary)
    return True


def _move_stubs(conversation: Conversation, context: Context, boundary: int) -> None:
    conversation.context_stub_before = boundary
    conversation.context_stub_moved_at = max(
        [context.measured_after, *(r.id for r in context.shown)]
    )
    db.session.commit()


@dataclass
class Fitted:
    rows: list[Row]
    changed: bool  # the model's view changed (stubs moved, or turns summarized)


def fit(
    setup: TurnSetup,
    principal: Principal,
    conversation: Conversation,
    rows: list[Row],
    hooks: TurnHooks,
    force: bool = False,
) -> Fitted:
    """The rows to send, fitted to the window (``force``, after a too long: all it can)."""
    policy, fixed = setup.context, fixed_chars(setup.system, setup.tools)
    if force:  # what was sent did not fit: the model holds less than that, whatever it says
        sent = Context.of(rows, conversation, setup.specs, fixed).estimate()
        policy = replace(policy, window=min(policy.window, sent))
    changed = False
    for _ in range(1 if force else MAX_ROUNDS):
        context = Context.of(rows, conversation, setup.specs, fixed)
        if not force and context.estimate() <= policy.tokens(policy.stub_at):
            break
        boundary = stub_boundary(context, policy, force)
        if boundary is not None:
            _move_stubs(conversation, context, boundary)
            changed = True
            context = Context.of(rows, conversation, setup.specs, fixed)
        if not force and context.estimate() <= policy.tokens(policy.compact_at):
            break
        start = compaction_point(context, policy, force)
        if start is None or not _compact(setup, principal, conversation, context, start, hooks):
            break
        rows, changed = store.load_transcript(conversation.id, conversation.head_id), True
    return Fitted(rows, changed)
