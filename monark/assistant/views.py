"""The assistant panel's endpoints under /chat: screens, the SSE turn endpoints, settings."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from flask import Blueprint, Response, jsonify, render_template, request
from werkzeug.datastructures import MultiDict

from monark.approvals import expiry, handover, own_calls
from monark.approvals import service as approvals
from monark.approvals.decision import ProposalChanged
from monark.approvals.expiry import expired_message
from monark.assistant import ask_user, conversation_list, suggestions
from monark.assistant.card_view import call_view, panel_card
from monark.assistant.gates import assistant_name, check_gates
from monark.assistant.panel import MAX_WIDTH, MIN_WIDTH
from monark.assistant.prompt import PageContext
from monark.assistant.stream import (
    follow_slot,
    partial,
    render_fragment,
    turn_preface,
    watch_turn,
)
from monark.assistant.thread import ThreadView, thread_view
from monark.assistant.verdict import PanelDecision
from monark.chat import store
from monark.chat.models import ToolCallStatus
from monark.chat.runtime import provider_problem
from monark.chat.turn import lease, run
from monark.chat.turn.start import begin_retry, begin_send, parse_send_input, require_assistant
from monark.core import ratelimit
from monark.core.auth import guard, require_principal
from monark.core.errors import AppError, Conflict, NotFound, ValidationFailed
from monark.core.htmx import targets
from monark.core.ids import form_id, parse_id
from monark.core.models import Org, User
from monark.core.rbac import Principal
from monark.core.settings import chat_settings
from monark.core.web import page_principal
from monark.extensions import db
from monark.records import queries
from monark.records import services as records

bp = Blueprint("assistant", __name__, url_prefix="/chat")


@bp.app_context_processor
def _assistant_context() -> dict[str, Any]:
    """Every signed-in page shows the assistant's button and panel: its name, and its gates."""
    principal = page_principal()
    if principal is None:
        return {}
    org = db.session.get(Org, principal.org_id)
    return {
        "assistant_name": assistant_name(org),
        "assistant_gate": check_gates(principal),
    }


# How long Stop waits for the turn to let go before answering "stopping".
STOP_WAIT_SECONDS = 3.0


def _notice(message: str, status: int, kind: str = "error"):
    # Drawn without the page's context (it needs none): a notice must not ask the database
    # who is signed in, which may be what failed.
    return render_fragment("assistant/_notice.html", message=message, kind=kind), status


def _refused(err: AppError):
    """An error as a notice in the panel, with its headers (a limit's ``Retry-After``)."""
    body, status = _notice(err.message, err.status)
    return body, status, getattr(err, "headers", None) or {}


View = Callable[..., Any]


def _counted_post(check: Callable[[int], None]) -> Callable[[str], Callable[[View], View]]:
    """``bp.post`` for a panel action that needs ``chat.use`` and is counted by ``check``
    (one of ``ratelimit``'s per-user counts, read once the guard has let the user in): over
    the limit, a notice saying when to try again, and nothing is stored."""

    def route(rule: str) -> Callable[[View], View]:
        def decorate(view: View) -> View:
            @functools.wraps(view)
            def counted(*args: Any, **kwargs: Any) -> Any:
                try:
                    check(require_principal().user_id or 0)
                except (ratelimit.RateLimited, ratelimit.LimiterDown) as err:
                    return _refused(err)
                return view(*args, **kwargs)

            return bp.post(rule)(guard("chat.use")(counted))

        return decorate

    return route


# A message or a Retry: messages per minute (the composer keeps the refused text).
turn_post = _counted_post(ratelimit.check_messages)
# A decision on a card (Confirm, Reject, Allow, Confirm selected): counted apart, so that a
# user confirming a run of cards can still send a message.
decision_post = _counted_post(ratelimit.check_decisions)


def _gate_or_none(principal: Principal) -> str | None:
    gate = check_gates(principal)
    return None if gate.open else gate.reason


@bp.get("/conversations")
@guard("chat.use")
def conversations():
    """The conversation list screen, (``after=``) the next page of it, or (``q=``, into the
    list's body) the conversations matching a search, the whole list when it is cleared."""
    principal = require_principal()
    reason = _gate_or_none(principal)
    if reason and not check_gates(principal).chat_open:
        return _notice(reason, 403, "gate")
    query = request.args.get("q", "")
    if query.strip():
        return _found(principal, query)
    after = conversation_list.parse_cursor(request.args.get("after"))
    page = conversation_list.conversation_page(principal, after=after)
    if after:
        template = "assistant/_list_page.html"
    elif targets(LIST_BODY):  # the search box cleared: the list again, under the box
        template = "assistant/_list_body.html"
    else:
        template = "assistant/_list.html"
    return render_template(template, page=page, gate=reason)


LIST_BODY = "chat-list-body"  # what the list's search box redraws


def _found(principal: Principal, query: str):
    """The list's search results: into the list's body, or the list screen around them."""
    try:
        found, error = conversation_list.search_conversations(principal, query), None
    except ValidationFailed as err:
        found, error = None, err.message
    template = "assistant/_list_found.html" if targets(LIST_BODY) else "assistant/_list.html"
    gate = _gate_or_none(principal)
    context = {"found": found, "query": query, "search_error": error, "gate": gate}
    return render_template(template, **context), 422 if error else 200


@bp.get("/new")
@guard("chat.use")
def new_conversation():
    """An empty thread screen; the conversation is created by its first message."""
    principal = require_principal()
    return _new_thread(principal)


def _new_thread(principal: Principal) -> str:
    return render_template(
        "assistant/_thread.html",
        thread=ThreadView(None, "", []),
        gate=_gate_or_none(principal),
        setup=provider_problem(principal.org_id),
        suggested=_suggested(principal),
    )


def _suggested(principal: Principal) -> suggestions.Suggestions:
    """What to suggest on the page the browser says it is on (``page_route``, and whether
    its list is filtered: ``page_query``); a hint, looked up as this person."""
    route = request.args.get("page_route", "")[:300]
    query = MultiDict(parse_qsl(request.args.get("page_query", "")[:2000].lstrip("?")))
    filtered = bool(query.get("q") or query.getlist("filter"))
    return suggestions.suggestions(principal, route, filtered)


@bp.get("/suggestions")
@guard("chat.use")
def suggested():
    """The suggestions of a new conversation, for the page the browser is on now."""
    return render_template("assistant/_suggestions.html", suggested=_suggested(require_principal()))


@bp.get("/first")
@guard("chat.use")
def first_screen():
    """The screen the panel opens on, ready to type: the conversation this browser had open
    (``remembered=``), else the person's most recently active one, else a new one."""
    principal = require_principal()
    if not check_gates(principal).chat_open:
        return _notice(_gate_or_none(principal) or "", 403, "gate")
    # What a browser remembered is a hint: one that is not an id is no conversation.
    try:
        remembered = parse_id(request.args.get("remembered"), "remembered", "query")
    except ValidationFailed:
        remembered = None
    found = conversation_list.resume_target(principal, remembered)
    if found is None:
        return _new_thread(principal)
    return conversation(found)


@bp.get("/conversations/<int:conversation_id>")
@guard("chat.use")
def conversation(conversation_id: int):
    """One conversation's thread screen, from the database (the list if it is gone)."""
    principal = require_principal()
    try:
        # A write another member decided meanwhile: the model hears of it now, live.
        continuation = handover.begin_continuation(principal, conversation_id)
        if continuation is not None:
            run.start_turn(continuation)
        thread = thread_view(principal, conversation_id)
    except NotFound:
        return render_template(
            "assistant/_list.html",
            page=conversation_list.conversation_page(principal),
            gate=_gate_or_none(principal),
            missing=True,
        ), 404
    return render_template(
        "assistant/_thread.html",
        thread=thread,
        gate=_gate_or_none(principal),
        setup=provider_problem(principal.org_id),
    )


@bp.errorhandler(AppError)
def _panel_error(err: AppError):
    """Errors in the panel's fragments show as a notice inside the panel, not a page."""
    db.session.rollback()
    return _refused(err)


@bp.post("/conversations/<int:conversation_id>/rename")
@guard("chat.use")
def rename(conversation_id: int):
    """Rename a conversation; answers the list screen."""
    principal = require_principal()
    error = None
    try:
        conversation_list.rename_conversation(
            principal, conversation_id, request.form.get("title", "")
        )
    except ValidationFailed as err:
        error = err.field_errors().get("title")
    status = 422 if error else 200
    return render_template(
        "assistant/_list.html",
        page=conversation_list.conversation_page(principal),
        gate=_gate_or_none(principal),
        rename_error=error,
        rename_id=conversation_id if error else None,
    ), status


@bp.post("/conversations/<int:conversation_id>/delete")
@guard("chat.use")
def delete(conversation_id: int):
    """Remove a conversation from the list (kept for the audit trail)."""
    principal = require_principal()
    conversation_list.archive_conversation(principal, conversation_id)
    return render_template(
        "assistant/_list.html",
        page=conversation_list.conversation_page(principal),
        gate=_gate_or_none(principal),
    )


@bp.post("/conversations/<int:conversation_id>/stop")
@guard("chat.use")
def stop(conversation_id: int):
    """Stop the conversation's running turn, on whichever instance it runs; says whether
    it stopped (the reply so far is kept), is still stopping, or nothing was running."""
    store.get_conversation(require_principal(), conversation_id)
    # The turn the page is watching, when it says: a Stop that arrives after that turn
    # ended never stops the next one (another tab's).
    wanted = request.form.get("turn", "").strip() or None
    turn_id = run.request_stop(conversation_id, wanted)
    if turn_id is None:
        return jsonify(status="idle", message="Nothing was running in this conversation."), 409
    deadline = time.monotonic() + STOP_WAIT_SECONDS
    while time.monotonic() < deadline:
        holder = lease.live_turn(conversation_id)
        db.session.rollback()
        if holder != turn_id:
            return jsonify(status="stopped", message="Stopped. The reply so far is kept.")
        time.sleep(0.1)
    return jsonify(status="stopping", message="Stopping: the reply ends in a moment."), 202


@bp.get("/conversations/<int:conversation_id>/follow")
@guard("chat.use")
def follow(conversation_id: int):
    """Follow the conversation's running turn as SSE (the thread as stored, then live);
    with ``Last-Event-ID`` from this turn, resume right after it. Ends when the turn does."""
    principal = require_principal()
    conversation = store.get_conversation(principal, conversation_id)
    return watch_turn(
        principal,
        conversation.id,
        lease.live_turn_id(conversation),
        snapshot=True,
        last_event_id=request.headers.get("Last-Event-ID", "")[:200],
    )


@bp.get("/conversations/<int:conversation_id>/await")
@guard("chat.use")
def await_decision(conversation_id: int):
    """Wait, at most ``CHAT_AWAIT_SECONDS``, for another member to decide one of ``calls``
    (what the thread shows waiting for them); once one is decided and its turn has ended,
    begin the model's answer and follow it on its progress log (or draw the thread as it
    is now, when there is nothing to answer); none by then: the stream ends without
    ``done``, and the panel connects again."""
    principal = require_principal()
    store.get_conversation(principal, conversation_id)
    awaited = _awaited_ids()
    deadline = time.monotonic() + chat_settings().await_seconds
    while awaited:
        conversation = store.get_conversation(principal, conversation_id)
        turn_id = lease.live_turn_id(conversation)
        # A turn under way (the decision's own, as it settles the call) is waited out.
        if turn_id is None and own_calls.settled_any(conversation_id, awaited):
            break
        db.session.rollback()  # no connection held while it waits; the next look is fresh
        if time.monotonic() >= deadline:
            return Response(": still waiting\n\n", mimetype="text/event-stream")
        time.sleep(AWAIT_POLL_SECONDS)
    # Decided: the model hears of it now, and this open panel follows its answer (as a
    # panel opening the conversation would).
    continuation = handover.begin_continuation(principal, conversation_id)
    if continuation is not None:
        run.start_turn(continuation)
        return watch_turn(principal, conversation_id, continuation.turn_id, snapshot=True)
    # Another tab began the answer first: followed while it runs.
    live = lease.live_turn_id(store.get_conversation(principal, conversation_id))
    return watch_turn(principal, conversation_id, live, snapshot=True)


AWAIT_POLL_SECONDS = 0.25


def _awaited_ids() -> list[int]:
    """The calls a waiting panel names (``calls=1,2``); what is not an id is left out."""
    ids = []
    for raw in request.args.get("calls", "").split(",")[:50]:
        try:
            found = parse_id(raw, "calls")
        except ValidationFailed:
            continue
        if found is not None:
            ids.append(found)
    return ids


def _start(
    principal: Principal,
    turn: run.Turn,
    redraw: str = "",
    drawn: tuple[int, ...] = (),
    whole_at_end: bool = False,
) -> Response:
    """Run a claimed turn on its own and answer with a watcher of it (``redraw``: frames
    that draw anew what the opening changed, sent first, with the messages they drew in
    ``drawn``; ``whole_at_end``: the whole thread drawn again when it ends)."""
    run.start_turn(turn)
    preface = redraw + turn_preface(turn.conversation_id, turn.turn_id)
    return watch_turn(
        principal,
        turn.conversation_id,
        turn.turn_id,
        snapshot=False,
        preface=preface,
        drawn=drawn,
        whole_at_end=whole_at_end,
    )


def _page_context(principal: Principal) -> PageContext | None:
    form = request.form
    try:
        record_id = form_id("page_record_id")
    except ValidationFailed:
        record_id = None  # a page context is a hint: a bad id is dropped, not an error
    try:
        context = PageContext(
            route=form.get("page_route", "")[:300],
            model=form.get("page_model") or None,
            record_id=record_id,
        )
    except ValueError:
        return None  # a page context is a hint; a bad one is dropped, not an error
    if context.model and context.record_id:
        # The title of the record in focus, as this user may see it (or none).
        try:
            model = records.get_model(principal, context.model)
            title = records.get_record(principal, model, context.record_id).title
        except AppError:  # not there, or not for this user: no record in focus
            return context.model_copy(update={"record_id": None})
        finally:
            db.session.rollback()  # a read: leave nothing open before the stream starts
        return context.model_copy(update={"record_title": title or None})
    if context.model and context.route == f"/models/{context.model}/records":
        return _with_list(principal, context, form.get("page_query", "")[:2000])
    return context


def _with_list(principal: Principal, context: PageContext, query: str) -> PageContext:
    """A list page's context with its filters and sort read as the list tool's arguments
    (checked like the list's own, as this user: an unreadable query adds nothing)."""
    args = MultiDict(parse_qsl(query.lstrip("?"), keep_blank_values=False))
    if any("\x00" in v for v in args.values()):
        return context  # no database holds it (the page's own request was refused too)
    q, filters, sort = args.get("q"), args.getlist("filter"), args.get("sort")
    if not (q or filters or sort):
        return context
    try:
        model = records.get_model(principal, context.model or "")
        params = queries.ListParams.parse(model, q, filters, sort)
        total, lower_bound = queries.capped_total(principal, model, params)
    except AppError:
        return context
    finally:
        db.session.rollback()  # a read: leave nothing open before the stream starts
    arguments = {"model": model.key, **params.arguments()}
    update = {"list_arguments": arguments, "list_total": total}
    return context.model_copy(update=update | {"list_total_is_lower_bound": lower_bound})


def _conversation_id() -> int | None:
    return form_id("conversation_id")  # ValidationFailed names the field


@turn_post("/stream")
def stream():
    """Send a message and stream the turn as Server-Sent Events."""
    principal = require_principal()
    try:
        data = parse_send_input(
            {
                "text": request.form.get("text", ""),
                "conversation_id": _conversation_id(),
                "page_context": _page_context(principal),
            }
        )
        turn = begin_send(principal, data)
    except ValidationFailed as err:
        return _notice(err.detail_text(), 422)
    except Conflict as err:
        return _busy(data.conversation_id, err.message)
    except AppError as err:
        return _refused(err)
    return _start(principal, turn)


def _busy(conversation_id: int | None, message: str):
    """Refused because a turn runs here (started in another tab): say so, and hand the page a
    follower of that turn, which the panel wakes to draw the thread and follow it live."""
    notice, status = _notice(message, 409)
    turn_id = lease.live_turn(conversation_id) if conversation_id else None
    if turn_id is None:
        return notice, status
    slot = follow_slot(conversation_id, turn_id, "chat:resume")
    return notice + partial("#chat-follow-slot", "innerHTML", slot), status


@decision_post("/decide")
def decide():
    """Confirm or reject a proposed write, then stream the continuation."""
    principal = require_principal()
    try:
        chosen = PanelDecision.parse(request.form.get("decision"))
    except ValidationFailed:
        chosen = None
    if chosen is None:
        return _notice("Choose Confirm or Reject on a card.", 400)
    call_id = chosen.target_id
    reason = request.form.get(f"reason_{call_id}", "")
    shown = request.form.get(f"shown_{call_id}")
    return decide_call(
        principal,
        call_id,
        lambda: approvals.begin_decision(principal, call_id, chosen.confirm, reason, shown=shown),
    )


@decision_post("/answer")
def answer():
    """Answer a question card (a choice, or "Something else…"), then stream the turn on."""
    principal = require_principal()
    call_id, choice, text = _answer_fields()
    if call_id is None:
        return _notice("Choose an answer on a question card.", 400)
    _, refused = _waiting_call(principal, call_id, _already_answered)
    if refused is not None:
        return refused
    try:
        turn = ask_user.begin_answer(principal, call_id, choice, text)
    except ValidationFailed as err:
        db.session.rollback()
        return _notice(err.message, 422)
    except Conflict as err:
        return _lost_race(principal, call_id, _already_answered, err.message)
    except AppError as err:
        return _notice(err.message, err.status)
    return _start(principal, turn)


def _waiting_call(principal: Principal, call_id: int, settled: Callable[[Any], Any]):
    """The principal's own call still waiting (PROPOSED) and None; or None and the answer
    that says why not: the gates, another's call, or ``settled(call)`` when it is settled."""
    try:
        require_assistant(principal)
        call = own_calls.get_tool_call(principal, call_id)
    except AppError as err:
        return None, _notice(err.message, err.status)
    if call.status != ToolCallStatus.PROPOSED:
        return None, settled(call)
    return call, None


def _answer_fields() -> tuple[int | None, str | None, str | None]:
    """What a question's button sent: ``choice=12:1`` (call 12's second choice), or
    ``call_id=12`` with the text typed in ``answer_12``; None for a call id that is none."""
    raw, _, index = (request.form.get("choice") or "").partition(":")
    try:
        call_id = parse_id(raw, "choice") if raw else form_id("call_id")
    except ValidationFailed:
        return None, None, None
    if raw:
        return call_id, index, None
    return call_id, None, request.form.get(f"answer_{call_id}") if call_id else None


def _already_answered(call):
    """Answered elsewhere (another tab): say so, redraw its card as it is now, and follow
    the turn the answer started, if it still runs. A settled call that asked nothing is
    no question at all: 404, as for one still waiting."""
    if not ask_user.asks_user(call):
        return _notice(ask_user.NOT_A_QUESTION, 404)
    view = call_view(call)
    if view.answer is not None:
        text = f"{ask_user.ALREADY_ANSWERED[:-1]}: {view.answer}"
    elif view.expired:
        text = ask_user.EXPIRED
    else:
        text = "This question was passed over: a new message was sent instead."
    return _with_card(_busy(call.conversation_id, text), call)


def decide_call(
    principal: Principal,
    call_id: int,
    begin: Callable[[], run.Turn],
    redraw: Callable[[run.Turn], str] | None = None,
):
    """A decision on one card (``begin`` takes it and returns its turn), streamed; or why
    not: gates, another's call, decided already, expired, drawn again, busy. ``redraw``:
    frames for what the decision changed besides the card."""
    _, refused = _waiting_call(principal, call_id, _already_decided)
    if refused is not None:
        return refused
    try:
        turn = begin()
    except (expiry.ProposalExpired, ProposalChanged) as err:
        # Nothing ran: the card as it is now (expired, or drawn again to be decided again).
        # No turn started: the page must not wake a follower left from an earlier one (it
        # would redraw the thread over this answer).
        db.session.rollback()
        notice, status = _notice(err.message, 409)
        idle = notice + partial("#chat-follow-slot", "innerHTML", "")
        return _with_card((idle, status), own_calls.get_tool_call(principal, call_id))
    except Conflict as err:
        return _lost_race(principal, call_id, _already_decided, err.message)
    except AppError as err:
        return _refused(err)
    return _start(principal, turn, redraw(turn) if redraw is not None else "")


def _lost_race(principal: Principal, call_id: int, settled: Callable[[Any], Any], message: str):
    """A card's answer refused as busy: ``settled(call)`` when another answer won (once it
    is stored), else the busy notice (``message``) with a follower of the running turn."""
    call = _settled(principal, call_id)
    if call.status != ToolCallStatus.PROPOSED:
        return settled(call)
    return _busy(call.conversation_id, message)


def _settled(principal: Principal, call_id: int):
    """The call once a decision that holds its conversation has been stored (it claims the
    conversation a moment before it decides): a loser then hears what won, not "busy"."""
    deadline = time.monotonic() + STOP_WAIT_SECONDS
    while True:
        db.session.rollback()
        call = own_calls.get_tool_call(principal, call_id)
        if call.status != ToolCallStatus.PROPOSED or time.monotonic() > deadline:
            return call
        if lease.live_turn(call.conversation_id) is None:
            return call  # nothing holds it: a busy answer is the truth
        time.sleep(0.05)


def _decided_text(card) -> str:
    """A second decision's answer: what the call is now, and who decided it."""
    by = f" by {card.decided_by}" if card.decided_by else ""
    if card.expired:
        return expired_message()
    if card.status == ToolCallStatus.REJECTED:
        return f"This action was already rejected{by}."
    if card.refused_before_asking:
        return "This action was refused before it asked anyone: there is nothing to decide."
    return f"This action was already confirmed{by} ({card.status_text})."


def _with_card(answer: tuple[str, int], call) -> tuple[str, int]:
    """An answer with the call's card redrawn as it is now."""
    body, status = answer
    card = render_template("assistant/_call.html", card=panel_card(call))
    return body + partial(f"#call-{call.id}", "outerHTML", card), status


def _already_decided(call):
    """Decided elsewhere (another tab, window or instance): say what it is now, show its
    card so, and follow the turn the decision started, if it still runs, so the card
    reaches its end."""
    return _with_card(_busy(call.conversation_id, _decided_text(call_view(call))), call)


@turn_post("/retry")
def retry():
    """Run the turn again after an error, a stop or the step limit."""
    return _start_on_conversation(
        require_principal(),
        begin_retry,
        nothing="Nothing to retry yet.",
        invalid=lambda err: "; ".join(f"{d['field']}: {d['message']}" for d in err.details),
    )


def _start_on_conversation(
    principal: Principal,
    begin: Callable[[Principal, int], run.Turn],
    *,
    nothing: str,
    invalid: Callable[[ValidationFailed], str],
    start: Callable[[Principal, run.Turn], Response] = _start,
):
    """A turn begun on the form's ``conversation_id`` (``begin``) and streamed (``start``);
    or a notice: no conversation yet (``nothing``), an id that is none (``invalid`` says
    it), a turn running there already (followed), or refused."""
    try:
        conversation_id = _conversation_id()
        if conversation_id is None:
            return _notice(nothing, 400)
        turn = begin(principal, conversation_id)
    except ValidationFailed as err:
        return _notice(invalid(err), 400)
    except Conflict as err:
        return _busy(conversation_id, err.message)
    except AppError as err:
        return _refused(err)
    return start(principal, turn)


@bp.post("/panel/width")
@guard("chat.use")
def panel_width():
    """Remember the panel's width for this user."""
    principal = require_principal()
    try:
        width = int(request.form.get("width", ""))
    except ValueError:
        return _notice("Width must be a number of pixels.", 400)
    user = db.session.get(User, principal.user_id)
    user.assistant_panel_width = max(MIN_WIDTH, min(MAX_WIDTH, width))
    db.session.commit()
    return Response(status=204)
