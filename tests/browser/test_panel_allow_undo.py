"""Allow and Undo in Chromium: allow a tool on a card, a later call
of it runs at once as a small done card, Undo puts the record back; the allowance is listed
and revoked, after which the tool asks again."""

from __future__ import annotations

from playwright.sync_api import expect

from monark.extensions import db
from monark.records.models import Record
from tests.browser.test_panel import new_conversation, send, wait_turn
from tests.llm_script import Call, Say


def status_of(record_id: int) -> str:
    db.session.rollback()
    return db.session.get(Record, record_id).values.get("status")


def update(record_id: int, status: str) -> Call:
    return Call(
        "records_update", {"model": "tasks", "record_id": record_id, "values": {"status": status}}
    )


def test_allow_then_a_later_call_runs_at_once_and_undo_puts_it_back(world, browse, fake_anthropic):
    record_id = world.a.public.id
    fake_anthropic.script.add(
        [update(record_id, "doing")],
        [Say("Started it.")],
        [update(record_id, "done")],
        [Say("Finished it.")],
    )
    s = browse("member@acme.test")
    s.goto(f"/models/tasks/records/{record_id}")
    panel = new_conversation(s)
    send(panel, "Start the public task")
    card = panel.locator(".call-write").last
    card.get_by_role("button", name="Allow updates to Tasks records for this conversation").click()
    wait_turn(panel)
    expect(card).to_contain_text("Confirmed by")
    assert status_of(record_id) == "doing"
    allowed = panel.get_by_role("region", name="Allowed tools")
    expect(allowed).to_contain_text("updates to Tasks records (records_update)")

    # The next call of the tool runs at once: a small done card with Undo, no Confirm.
    send(panel, "Now finish it")
    wait_turn(panel)
    small = panel.locator(".call-small").last
    expect(small).to_contain_text("Allowed:")
    expect(small).to_contain_text("done")
    expect(small.get_by_role("button", name="Confirm")).to_have_count(0)
    expect(panel.locator(".msg-assistant").last).to_contain_text("Finished it.")
    assert status_of(record_id) == "done"
    expect(s.page.locator("#main")).to_contain_text("done")  # the page behind refreshed

    small.get_by_role("button", name="Undo").click()
    expect(panel.locator(".chat-notice")).to_contain_text("Undone.")
    expect(panel.locator(".call-small").last).to_contain_text("Undo:")
    expect(panel.locator(".call-undone")).to_have_count(1)
    assert status_of(record_id) == "doing"
    expect(s.page.locator("#main")).to_contain_text("doing")
    expect(s.page.locator("#main")).not_to_contain_text("done")

    # Revoked, the tool asks again.
    allowed.get_by_role("button", name="Revoke updates to Tasks records").click()
    expect(allowed).to_be_hidden()
    fake_anthropic.script.add([update(record_id, "done")])
    send(panel, "Finish it again")
    wait_turn(panel)
    expect(panel.locator(".call-write").last.get_by_role("button", name="Confirm")).to_be_visible()
    assert status_of(record_id) == "doing"
    assert s.errors == []
