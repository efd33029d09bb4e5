"""Regenerate, Edit and switching versions, each under a claim of its conversation.

None runs while a turn runs (the claim refuses) or a card waits for the user (refused
here): what waits belongs to the path it was asked on, and a branch never re-runs a write.
"""

from __future__ import annotations

from monark.chat import branches, store
from monark.chat.models import MessageRole
from monark.chat.runtime import runtime
from monark.chat.turn import lease
from monark.chat.turn.progress import MessageSaved, Progress
from monark.chat.turn.run import Turn
from monark.chat.turn.start import claimed, parse_send_input, require_assistant
from monark.core.errors import Conflict, NotFound
from monark.core.events import record_event
from monark.core.rbac import Principal
from monark.extensions import db

_WAITS = "{} waits for the card above: confirm or reject it (or answer its question) first."
REGENERATE_WAITS = _WAITS.format("Regenerate")
EDIT_WAITS = _WAITS.format("Editing")
SWITCH_WAITS = _WAITS.format("Switching versions")
NOTHING_TO_REGENERATE = "Nothing to regenerate: your last message has no reply yet."
NOT_LAST = "Only your last message can be edited, and this one is no longer it."
NO_SUCH_MESSAGE = "No such message in this conversation."


def _quiet(principal: Principal, conversation_id: int, refusal: str) -> None:
    """Refuse (``Conflict``) while a card waits: proposals past their time expire first."""
    runtime().gate.expire_overdue(principal, conversation_id)
    if store.pending_calls(conversation_id):
        raise Conflict(refusal)


def _path(conversation_id: int, head_id: int | None) -> list[branches.Node]:
    return branches.active_path(branches.load_nodes(conversation_id), head_id)


def _last_user(path: list[branches.Node]) -> branches.Node | None:
    return next((n for n in reversed(path) if n.role == MessageRole.USER), None)


def _event(principal: Principal, conversation_id: int, kind: str, payload: dict) -> None:
    payload = {"conversation_id": conversation_id, **payload}
    record_event(principal, f"chat.conversation.{kind}", "conversation", conversation_id, payload)


def begin_regenerate(principal: Principal, conversation_id: int) -> Turn:
    """A new reply to the path's last user message under a new turn, the old one kept."""
    require_assistant(principal)
    store.get_conversation(principal, conversation_id)

    def opening() -> list[Progress]:
        _quiet(principal, conversation_id, REGENERATE_WAITS)
        conversation = store.get_conversation(principal, conversation_id)
        branches.ensure_tree(conversation)
        path = _path(conversation_id, conversation.head_id)
        asked = _last_user(path)
        answered = asked is not None and any(
            n.role == MessageRole.ASSISTANT for n in path[path.index(asked) + 1 :]
        )
        if asked is None or not answered:
            raise Conflict(NOTHING_TO_REGENERATE)
        # The path ends at the question again: the turn's reply follows it, beside the old.
        conversation.head_id = asked.id
        _event(
            principal, conversation_id, "branched", {"message_id": asked.id, "how": "regenerate"}
        )
        db.session.commit()
        return []

    return claimed(principal, conversation_id, opening)


def begin_edit(principal: Principal, message_id: int, text: str) -> Turn:
    """A new version of the path's last user message (its page context kept), under a new turn."""
    require_assistant(principal)
    text = parse_send_input({"text": text}).text
    conversation_id = store.conversation_of_message(principal, message_id)

    def opening() -> list[Progress]:
        _quiet(principal, conversation_id, EDIT_WAITS)
        conversation = store.get_conversation(principal, conversation_id)
        branches.ensure_tree(conversation)
        old = _last_user(_path(conversation_id, conversation.head_id))
        if old is None or old.id != message_id:
            raise Conflict(NOT_LAST)
        message = store.add_message(
            conversation,
            principal,
            author_kind="user",
            role=MessageRole.USER,
            text=text,
            content=old.content,
            parent_id=old.parent_id,
        )
        _event(principal, conversation_id, "branched", {"message_id": message.id, "how": "edit"})
        db.session.commit()
        return [MessageSaved(message.id)]

    return claimed(principal, conversation_id, opening)


def switch_branch(principal: Principal, conversation_id: int, message_id: int) -> bool:
    """Make the version holding ``message_id`` the active path; whether the path changed."""
    conversation = store.get_conversation(principal, conversation_id)
    nodes = branches.load_nodes(conversation_id)
    if all(n.id != message_id for n in nodes):
        raise NotFound(NO_SUCH_MESSAGE)
    if conversation.head_id is None:
        return False  # it never branched: there is no other version
    turn_id = lease.claim(conversation_id)  # one thing at a time in a conversation
    try:
        _quiet(principal, conversation_id, SWITCH_WAITS)
        conversation = store.get_conversation(principal, conversation_id)
        nodes = branches.load_nodes(conversation_id)
        if any(n.id == message_id for n in branches.active_path(nodes, conversation.head_id)):
            return False  # shown already (a second click, another tab)
        conversation.head_id = branches.newest_leaf(nodes, message_id)
        # The stub boundary was measured on the path left (here it could stub the newest).
        conversation.context_stub_before = conversation.context_stub_moved_at = None
        _event(principal, conversation_id, "branch_switched", {"message_id": message_id})
        db.session.commit()
        return True
    finally:
        lease.give_back(conversation_id, turn_id)
