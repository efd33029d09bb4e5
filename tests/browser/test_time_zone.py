"""The browser's own time zone (``static/js/timezone.js``): kept at first sign-in, never
over a zone someone chose, and offered on the profile."""

from __future__ import annotations

import re

from playwright.sync_api import expect
from sqlalchemy import update

from monark.core.models import User
from monark.extensions import db


def _zone_of(user_id: int) -> str | None:
    db.session.rollback()
    db.session.expire_all()
    return db.session.get(User, user_id).time_zone


def test_the_browsers_zone_is_kept_at_first_sign_in_and_offered_on_the_profile(world, browse):
    member = world.a.users["member"]
    tokyo = browse("member@acme.test", timezone_id="Asia/Tokyo")
    # The first page after signing in sent the browser's zone, which was kept.
    expect(tokyo.page.locator("body")).to_have_attribute("data-time-zone-kept", "true")
    tokyo.goto("/profile")
    field = tokyo.page.locator("#time-zone").get_by_label("Time zone")
    expect(field).to_have_value("Asia/Tokyo")
    assert _zone_of(member.id) == "Asia/Tokyo"
    expect(tokyo.page.locator("body")).not_to_have_attribute("data-time-zone-url", re.compile(".*"))

    # Chosen on the profile, a zone stays whatever browser signs in next.
    field.fill("Europe/Paris")
    tokyo.page.get_by_role("button", name="Save time zone").click()
    expect(tokyo.page.locator("#time-zone")).to_contain_text("Time zone saved")
    paris_time = tokyo.page.locator("#time-zone .hint")
    expect(paris_time).to_contain_text("Europe/Paris (CE")
    la = browse("member@acme.test", timezone_id="America/Los_Angeles")
    la.goto("/profile")
    button = la.page.get_by_role(
        "button", name="Use this browser's time zone (America/Los_Angeles)"
    )
    expect(button).to_be_visible()
    assert _zone_of(member.id) == "Europe/Paris"
    button.click()
    expect(la.page.locator("#time-zone").get_by_label("Time zone")).to_have_value(
        "America/Los_Angeles"
    )
    assert not tokyo.errors and not la.errors


def test_a_member_with_a_zone_is_not_asked_again(world, browse):
    db.session.execute(
        update(User).where(User.id == world.a.users["viewer"].id).values(time_zone="Asia/Tokyo")
    )
    db.session.commit()
    session = browse("viewer@acme.test", timezone_id="America/Los_Angeles")
    session.goto("/profile")
    expect(session.page.locator("#time-zone").get_by_label("Time zone")).to_have_value("Asia/Tokyo")
    assert not any("/profile/time-zone/browser" in u for u in session.requests)
    assert _zone_of(world.a.users["viewer"].id) == "Asia/Tokyo"
