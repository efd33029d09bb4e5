"""What a decision button sends: ``confirm`` or ``reject``, and on the panel the id it is
about (``confirm:12``: a card's call, or a step's message on a group card)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from monark.core.ids import parse_id


class Verdict(StrEnum):
    CONFIRM = "confirm"
    REJECT = "reject"

    @classmethod
    def of(cls, raw: str | None) -> Verdict | None:
        """The verdict ``raw`` names (None for anything else)."""
        try:
            return cls((raw or "").strip())
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class PanelDecision:
    """A panel button's value: the verdict and the id of what it decides."""

    verdict: Verdict
    target_id: int

    @property
    def confirm(self) -> bool:
        return self.verdict == Verdict.CONFIRM

    def __str__(self) -> str:
        return f"{self.verdict}:{self.target_id}"

    @classmethod
    def parse(cls, raw: str | None) -> PanelDecision | None:
        """The decision in ``raw`` (None when it names no verdict or no id);
        ``ValidationFailed`` naming ``decision`` for an id that is not one."""
        verdict, _, raw_id = (raw or "").partition(":")
        target_id = parse_id(raw_id, "decision")
        found = Verdict.of(verdict)
        return cls(found, target_id) if found is not None and target_id is not None else None
