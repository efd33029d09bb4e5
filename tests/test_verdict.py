"""The values decision buttons send, parsed into types (never split by hand)."""

from __future__ import annotations

import pytest

from monark.assistant.verdict import PanelDecision, Verdict
from monark.chat.models import CallEvent
from monark.core.errors import ValidationFailed


def test_a_panel_button_reads_as_its_verdict_and_id_and_writes_back_the_same():
    chosen = PanelDecision.parse("confirm:12")
    assert chosen == PanelDecision(Verdict.CONFIRM, 12) and chosen.confirm
    assert str(chosen) == "confirm:12"
    assert not PanelDecision.parse("reject:7").confirm


@pytest.mark.parametrize("raw", ["", "confirm", "confirm:", "allow:12", "CONFIRM:12", None])
def test_a_value_naming_no_verdict_or_no_id_is_none(raw):
    assert PanelDecision.parse(raw) is None


@pytest.mark.parametrize(
    "raw", ["confirm:x", "confirm:-1", "reject:1.5", "confirm:99999999999999999"]
)
def test_an_id_that_is_not_one_is_refused_naming_the_field(raw):
    with pytest.raises(ValidationFailed) as err:
        PanelDecision.parse(raw)
    assert err.value.field_errors().keys() == {"decision"}


def test_the_inbox_verdict_is_one_of_two_words():
    assert Verdict.of(" reject ") is Verdict.REJECT
    assert Verdict.of("maybe") is None and Verdict.of(None) is None


def test_a_tool_calls_audit_event_is_named_from_its_enum():
    assert CallEvent.UNDO_STARTED.event_type == "chat.tool_call.undo_started"
    with pytest.raises(ValueError):
        CallEvent("deleted")
