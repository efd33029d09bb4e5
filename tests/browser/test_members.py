"""Inviting someone, clicked through: the admin makes a link, the newcomer joins with it."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.conftest import ARTIFACTS


def test_an_admin_invites_and_the_newcomer_joins_from_the_link(world, browse, chromium):
    admin = browse("admin@acme.test", permissions=["clipboard-read", "clipboard-write"])
    admin.goto("/settings")
    invites = admin.page.locator("#invites")
    invites.get_by_label("Email").fill("nia@example.com")
    invites.get_by_label("Role").select_option("viewer")
    invites.get_by_role("button", name="Create invitation link").click()
    link = admin.page.locator("#invite-link")
    expect(link).to_contain_text("/invite/inv_")
    url = link.inner_text()
    copy = invites.locator("button[data-copy]")
    expect(copy).to_have_text("Copy")
    copy.click()
    expect(copy).to_have_text("Copied")
    assert admin.page.evaluate("navigator.clipboard.readText()") == url
    expect(invites.locator("table")).to_contain_text("nia@example.com")
    admin.shot("members-01-invitation-link")
    # A reload shows the settings page again, without the link.
    admin.page.reload()
    expect(admin.page.locator("h1")).to_contain_text("settings")
    expect(admin.page.locator("#invite-link")).to_have_count(0)

    context = chromium.new_context()  # the newcomer's own browser, signed out
    try:
        page = context.new_page()
        page.set_default_timeout(10_000)
        page.goto(url)
        expect(page.locator("h1")).to_have_text("Join Acme")
        assert page.url.endswith("/invite")  # the token left the address bar (and history)
        page.get_by_role("button", name="Create account and join").click()
        expect(page.locator("#name-error")).to_contain_text("Give your name")
        # The page focuses the first invalid field once it is drawn: wait for that, or it
        # may move the focus while the password is being typed.
        expect(page.get_by_label("Your name")).to_be_focused()
        page.get_by_label("Your name").fill("Nia Newcomer")
        page.get_by_label("Password").fill("a long enough secret")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "members-02-join.png"))
        page.get_by_role("button", name="Create account and join").click()
        expect(page.locator(".flash")).to_contain_text("Welcome to Acme.")
        expect(page.get_by_role("link", name="Nia Newcomer")).to_be_visible()
        # A viewer: the records are there, creating one is not offered.
        page.goto(url.split("/invite/")[0] + "/models/tasks/records")
        expect(page.locator("main")).to_contain_text("Acme public task")
        expect(page.get_by_role("link", name="New record")).to_have_count(0)
        # The link is spent.
        page.goto(url)
        expect(page.locator("main")).to_contain_text("not valid any more")
    finally:
        context.close()
    assert not admin.errors
