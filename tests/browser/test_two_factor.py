"""Two-factor sign-in, clicked through in Chromium: set it up from the profile by reading the
secret under the QR code, sign out, sign in again with the password and then a code."""

from __future__ import annotations

import time

import pyotp
from playwright.sync_api import expect

from tests.factories import PASSWORD


def test_a_member_enrols_from_the_qr_page_and_signs_in_with_a_code(app, world, browse):
    session = browse("member@acme.test")
    page = session.page
    session.goto("/profile")
    page.get_by_role("link", name="Set up two-factor sign-in").click()
    expect(page.get_by_role("img", name="QR code to scan")).to_be_visible()
    session.shot("two-factor-00-scan")
    secret = page.get_by_label("Secret").inner_text().replace(" ", "")
    page.get_by_role("textbox", name="Code").fill(pyotp.TOTP(secret).now())
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Turn on two-factor sign-in").click()
    codes = page.get_by_role("list", name="Recovery codes").get_by_role("listitem")
    expect(codes).to_have_count(10)
    session.shot("two-factor-01-recovery-codes")

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(session.base + "/login")
    page.get_by_label("Email").fill("member@acme.test")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(session.base + "/login/code")
    # The code of the next time step: the one just typed to confirm cannot sign in again.
    page.get_by_role("textbox", name="Code").fill(pyotp.TOTP(secret).at(time.time() + 30))
    page.get_by_role("button", name="Verify").click()
    page.wait_for_url(session.base + "/models")

    session.goto("/profile")
    expect(page.locator("#sessions")).to_contain_text("(this session)")
    expect(page.locator("#two-factor")).to_contain_text("10 recovery codes left")
    assert session.foreign_requests() == []
    assert session.errors == []  # no CSP violation: the QR code is inline SVG
