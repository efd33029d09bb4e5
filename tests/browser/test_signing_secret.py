"""The signing secret in a real browser: made once, shown once, and the address bar left
on the automation's page (a reload there is the page, never a 405)."""

from __future__ import annotations

from playwright.sync_api import expect
from sqlalchemy import func, select

from monark.automations import services as automations
from monark.core.models import Event
from monark.extensions import db
from tests.test_automations import CREATED, graph

HOOK = graph(
    CREATED,
    ("hook", "send_webhook", {"url": "https://hooks.example.com/in"}),
    edges=[("t", "hook")],
)


def _rotations() -> int:
    db.session.expire_all()
    stmt = select(func.count(Event.id)).where(Event.type.like("automation.webhook_secret%"))
    return int(db.session.scalar(stmt) or 0)


def test_after_create_and_a_double_clicked_rotate_a_reload_shows_the_page(world, browse):
    automation = automations.create_automation(world.a.principal("owner"), "Hook", HOOK)
    s = browse("owner@acme.test")
    page_url = f"{s.base}/automations/{automation.id}"
    s.goto(f"/automations/{automation.id}")
    s.page.get_by_role("button", name="Create signing secret").click()
    secret = s.page.locator(".secret-once code")
    expect(secret).to_contain_text("whsec_")
    made = secret.inner_text()
    expect(s.page).to_have_url(page_url)
    s.page.get_by_role("button", name="Rotate signing secret").dblclick()
    expect(secret).not_to_have_text(made)
    rotated = secret.inner_text()
    expect(s.page).to_have_url(page_url)
    assert _rotations() == 2  # created, then rotated once: the second click repeated it
    answer = s.page.reload()
    assert answer.status == 200
    expect(s.page.get_by_role("button", name="Rotate signing secret")).to_be_visible()
    expect(s.page.locator(".secret-once")).to_have_count(0)
    assert rotated not in s.page.content() and made not in s.page.content()
