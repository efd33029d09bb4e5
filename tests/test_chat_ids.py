"""The panel's ids (conversation, decision, page record) go through monark.core.ids."""

from __future__ import annotations

import pytest

from monark.core.ids import id_or_none as _id
from tests.llm_script import Say


def post(browser, url: str, data: dict) -> tuple[int, str]:
    response = browser.post(url, data, headers={"HX-Request": "true"})
    body = response.get_data(as_text=True)
    response.close()
    return response.status_code, body


@pytest.mark.parametrize("raw", ["²", "99999999999"])
def test_bad_chat_ids_are_named_refusals_not_crashes(world, login, raw):
    member = login("member@acme.test")
    status, body = post(member, "/chat/stream", {"text": "Hi", "conversation_id": raw})
    assert status == 422 and "from 1 to 2147483647" in body
    status, body = post(member, "/chat/retry", {"conversation_id": raw})
    assert status == 400 and "conversation_id" in body
    status, body = post(member, "/chat/decide", {"decision": f"confirm:{raw}"})
    assert status == 400 and "Choose Confirm or Reject" in body


def test_a_bad_page_record_id_drops_only_the_record(world, login, scripted):
    scripted.script.add([Say("Noted.")])
    context = {"page_route": "/models/tasks/records", "page_model": "tasks"}
    status, _ = post(
        login("member@acme.test"), "/chat/stream", {"text": "Hi", **context, "page_record_id": "²"}
    )
    assert status == 200
    assert 'looking at the "tasks" model' in scripted.requests[-1].messages[-1].content[0].text


def test_tool_preview_ids_take_ascii_digits_only():
    assert _id("12") == 12
    assert _id("\u0661") is None and _id("99999999999") is None
