"""The kinds of notification, how each goes by mail unless a person chose otherwise, and
how each is drawn for its reader.

A kind's drawing (``Shown``) is registered by the feature that notifies of it
(``register``), so this package knows no feature above it: approvals draw a handed-over
write, the automations a failing automation, settings a budget or a new member. A drawing
reads what it names with the reader's rights at the time it is read (a private record is
named only to someone who may read it), so nothing stored can say more than that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from monark.core.rbac import Principal

if TYPE_CHECKING:
    from monark.notifications.models import Notification


class Kind(StrEnum):
    HANDED_TO_YOU = "approval.handed_to_you"
    REQUEST_DECIDED = "approval.request_decided"
    KEY_WRITE_WAITING = "approval.key_write_waiting"
    AUTOMATION_FAILING = "automation.failing"
    BUDGET_REACHED = "budget.reached"
    MEMBER_JOINED = "member.joined"


class Delivery(StrEnum):
    """How a kind goes by mail: at once, in the daily digest, or not at all."""

    NOW = "now"
    DIGEST = "digest"
    NEVER = "never"


DELIVERY_LABELS = {
    Delivery.NOW: "At once",
    Delivery.DIGEST: "Daily digest",
    Delivery.NEVER: "Never",
}

# What each kind is called on the preferences form, and its mail unless one chooses:
# a write waiting for you is mailed at once (someone waits on you); the rest can wait for
# the morning's digest, and a new member is seen in the app alone.
LABELS: dict[Kind, str] = {
    Kind.HANDED_TO_YOU: "A write handed to you to approve",
    Kind.REQUEST_DECIDED: "Your handed-over request decided",
    Kind.KEY_WRITE_WAITING: "An API key's write waiting for approval",
    Kind.AUTOMATION_FAILING: "An automation of yours failing repeatedly",
    Kind.BUDGET_REACHED: "The AI budget at 80% or 100% (admins)",
    Kind.MEMBER_JOINED: "An invitation accepted (admins)",
}
DEFAULTS: dict[Kind, Delivery] = {
    Kind.HANDED_TO_YOU: Delivery.NOW,
    Kind.REQUEST_DECIDED: Delivery.DIGEST,
    Kind.KEY_WRITE_WAITING: Delivery.DIGEST,
    Kind.AUTOMATION_FAILING: Delivery.DIGEST,
    Kind.BUDGET_REACHED: Delivery.DIGEST,
    Kind.MEMBER_JOINED: Delivery.NEVER,
}


@dataclass(frozen=True)
class Shown:
    """A notification as its reader may read it: one line of plain text (escaped where
    drawn), and where opening it leads (a path in the app; None: nowhere)."""

    title: str
    link: str | None = None


Drawing = Callable[[Principal, "Notification"], Shown]
_DRAWINGS: dict[str, Drawing] = {}
GONE = Shown("Something you were notified of is no longer there.")


def register(kind: Kind, drawing: Drawing) -> None:
    """Say how notifications of ``kind`` are drawn (by the feature that makes them)."""
    _DRAWINGS[kind] = drawing


def draw(reader: Principal, notification: Notification) -> Shown:
    """``notification`` as ``reader`` may read it now (``GONE`` when what it named went)."""
    drawing = _DRAWINGS.get(notification.kind)
    if drawing is None:
        return GONE
    return drawing(reader, notification)
