"""Where a message of the thread stands among its versions: the thread's "1/2"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from monark.chat.branches import Row, children_of


@dataclass(frozen=True)
class Spot:
    """A message's place among its versions: ``index`` of ``count`` (from 1), and the
    versions before and after it (to switch to)."""

    index: int
    count: int
    previous_id: int | None
    next_id: int | None


def spots(rows: Sequence[Row], path: Sequence[Row], branched: bool) -> dict[int, Spot]:
    """The path's messages that have other versions, with where each stands among them."""
    if not branched:
        return {}
    children = children_of(rows)
    found: dict[int, Spot] = {}
    for row in path:
        versions = children[row.parent_id]
        if len(versions) < 2:
            continue
        at = next(i for i, v in enumerate(versions) if v.id == row.id)
        before = versions[at - 1].id if at > 0 else None
        after = versions[at + 1].id if at + 1 < len(versions) else None
        found[row.id] = Spot(at + 1, len(versions), before, after)
    return found
