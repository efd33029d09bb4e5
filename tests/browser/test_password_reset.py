"""A forgotten password, clicked through: ask on the sign-in page, read the mail in the
development outbox, open its link, choose a new password, sign in with it."""

from __future__ import annotations

from playwright.sync_api import expect

from monark.core import jobs

NEW_PASSWORD = "a much better passphrase"


def test_a_member_resets_a_forgotten_password_through_the_outbox(app, world, browse, chromium):
    elsewhere = browse("member@acme.test")  # a session the reset must end

    context = chromium.new_context()  # the member's other browser, signed out
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(elsewhere.base + "/login")
        page.get_by_role("link", name="Forgot password?").click()
        page.get_by_label("Email").fill("member@acme.test")
        page.get_by_role("button", name="Send the link").click()
        expect(page.get_by_role("status")).to_contain_text("is on its way")
        jobs.drain(app)  # what the consumer does: look the account up, send the mail

        admin = browse("admin@acme.test")
        admin.page.get_by_role("navigation", name="Main").get_by_role("link", name="Outbox").click()
        row = admin.page.get_by_role("row").filter(has_text="member@acme.test")
        row.get_by_role("link", name="Reset your Monark password").click()
        link = admin.page.get_by_role("link", name="Choose a new password")
        expect(link).to_be_visible()
        href = link.get_attribute("href")
        assert href and href.startswith(elsewhere.base + "/reset/")
        admin.shot("password-reset-01-outbox")

        page.goto(href)
        assert page.url == elsewhere.base + "/reset"  # the token left the address bar
        page.get_by_label("New password").fill("short")
        page.get_by_role("button", name="Save the new password").click()
        expect(page.locator("#password-error")).to_have_text("Use at least 10 characters.")
        page.get_by_label("New password").fill(NEW_PASSWORD)
        page.get_by_role("button", name="Save the new password").click()
        page.wait_for_url(elsewhere.base + "/login")
        expect(page.get_by_role("status")).to_contain_text("Your password was changed")
        page.get_by_label("Email").fill("member@acme.test")
        page.get_by_label("Password").fill(NEW_PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(elsewhere.base + "/models")

        page.goto(href)  # the link works once
        expect(page.get_by_role("alert")).to_contain_text("used already")
        expect(page.get_by_role("link", name="Ask for a new reset link")).to_be_visible()
    finally:
        context.close()

    elsewhere.goto("/profile")
    assert "/login" in elsewhere.page.url  # the session from before the reset is over
