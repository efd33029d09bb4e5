"""Mail: composed in the request, sent by the job queue (SMTP or the outbox), with retries."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from bs4 import BeautifulSoup
from flask import Flask

from monark.core import jobs, mail
from monark.core.settings import MailSettings
from tests import jobs as queued
from tests.smtp_server import USER


def _send_reset(
    app: Flask, to: str = "ann@example.test", account: int | None = None
) -> mail.Letter:
    with app.test_request_context("/"):
        link = mail.link("auth.login", next="/profile")
        return mail.send("reset", to, account, name="Ann", email=to, link=link)


def _outbox(app: Flask) -> list[str]:
    folder = mail.state(app).outbox
    return sorted(p.name for p in folder.glob("*.eml")) if folder.is_dir() else []


def test_mail_waits_for_the_queue_then_lands_in_the_outbox(app):
    _send_reset(app)
    assert _outbox(app) == []  # never sent inside the request
    assert queued.drain() == 1
    (name,) = _outbox(app)
    raw = (mail.state(app).outbox / name).read_text()
    assert "Subject: Reset your Monark password" in raw
    assert "multipart/alternative" in raw
    assert "To: ann@example.test" in raw
    assert "From: Monark <monark@localhost>" in raw
    assert "X-Monark-Kind: reset" in raw  # what the development outbox shows it to


def test_the_message_reaches_a_real_smtp_server_with_its_headers_and_a_working_link(
    app, smtp, browser
):
    _send_reset(app)
    assert smtp.messages == []
    queued.drain()
    (message,) = smtp.messages
    assert smtp.logins == [USER]  # the credentials of MAIL_URL were used
    assert message["From"] == "Monark <monark@localhost>"
    assert message["To"] == "ann@example.test"
    assert message["Subject"] == "Reset your Monark password"
    assert message.get_content_type() == "multipart/alternative"
    text = message.get_body(preferencelist=("plain",)).get_content()
    html = message.get_body(preferencelist=("html",)).get_content()
    href = BeautifulSoup(html, "html.parser").find("a", string="Choose a new password")["href"]
    assert href in text
    parts = urlsplit(href)
    assert browser.get(f"{parts.path}?{parts.query}").status_code == 200
    assert _outbox(app) == []


def test_public_url_makes_the_links(app, monkeypatch):
    from tests.tuning import configure

    configure(monkeypatch, app, PUBLIC_URL="https://monark.example.com")
    with app.test_request_context("/", base_url="http://evil.test"):
        assert mail.link("auth.login") == "https://monark.example.com/login"


def test_a_server_that_says_try_later_gets_the_message_on_a_retry(app, smtp, caplog):
    smtp.answers = ["451 4.3.0 try again later"]
    _send_reset(app)
    jobs.drain_scheduled(app)  # the retry too, without its wait
    assert "mail reset: try 1 failed" in caplog.text
    assert len(smtp.messages) == 1


def test_a_refusal_is_final(app, smtp, caplog):
    smtp.answers = ["550 5.1.1 no such mailbox"]
    _send_reset(app)
    queued.drain()
    assert jobs.drain_scheduled(app) == 0  # nothing left to try
    assert smtp.messages == []
    assert "not sent after 1 tries" in caplog.text
    assert "Choose a new password" not in caplog.text  # a body never reaches the log


def test_a_server_that_is_down_is_tried_again_up_to_the_limit(app, smtp, monkeypatch, caplog):
    from tests.tuning import configure

    configure(monkeypatch, app, MAIL_MAX_ATTEMPTS=3)
    smtp.stop()  # nobody listens on its port now
    _send_reset(app)
    jobs.drain_scheduled(app)
    tries = [r.getMessage() for r in caplog.records if r.name == "monark.core.mail"]
    assert [t.split(" (")[0].split(":")[0] for t in tries[:2]] == ["mail reset", "mail reset"]
    assert "try 2 failed" in tries[1]
    assert tries[2].startswith("mail reset not sent after 3 tries")
    assert len(tries) == 3
    assert smtp.messages == []


@pytest.mark.parametrize(
    ("url", "host", "port", "ssl", "starttls"),
    [
        ("smtp://u:p%40ss@mail.test:587?starttls=1", "mail.test", 587, False, True),
        ("smtps://mail.test", "mail.test", 465, True, False),
        ("smtp://mail.test", "mail.test", 25, False, False),
        ("", "", 25, False, False),
    ],
)
def test_mail_url_is_read(app, url, host, port, ssl, starttls):
    read = MailSettings.from_config({**app.config, "MAIL_URL": url})
    assert (read.host, read.port, read.ssl, read.starttls) == (host, port, ssl, starttls)
    if url.startswith("smtp://u:"):
        assert (read.username, read.password) == ("u", "p@ss")


@pytest.mark.parametrize("url", ["http://mail.test", "smtp://", "smtp://mail.test:port"])
def test_a_bad_mail_url_stops_the_start(app, url):
    with pytest.raises(RuntimeError, match="MAIL_URL"):
        MailSettings.from_config({**app.config, "MAIL_URL": url})


# ---- the development outbox page --------------------------------------------------------


def test_an_admin_reads_the_outbox_and_follows_its_link(app, world, login):
    # To a member of the admin's org: the outbox shows an admin their own org's mail only
    # (``tests/test_sessions.py`` checks another org's stays hidden).
    to = world.a.users["member"].email
    _send_reset(app, to, world.a.users["member"].id)
    queued.drain()
    admin = login(world.a.users["admin"].email)
    page = BeautifulSoup(admin.get("/dev/outbox").get_data(as_text=True), "html.parser")
    row = page.find("a", string="Reset your Monark password").find_parent("tr")
    assert to in row.get_text()
    assert row.find("time") is not None
    shown = admin.get(row.find("a")["href"])
    assert shown.status_code == 200
    message = BeautifulSoup(shown.get_data(as_text=True), "html.parser")
    href = message.find("a", string="Choose a new password")["href"]
    assert urlsplit(href).path == "/login"


def test_the_outbox_is_for_admins(app, world, login):
    _send_reset(app)
    queued.drain()
    (name,) = _outbox(app)
    member = login(world.a.users["member"].email)
    assert member.get("/dev/outbox").status_code == 403
    assert member.get(f"/dev/outbox/{name}").status_code == 403


def test_the_outbox_reads_only_its_own_files(app, world, login):
    admin = login(world.a.users["admin"].email)
    assert admin.get("/dev/outbox/..%2Fsecret_key").status_code == 404
    assert admin.get("/dev/outbox/20260101T000000.000000-00000000.eml").status_code == 404


def test_no_outbox_page_when_mail_is_really_sent(app, world, login, smtp):
    admin = login(world.a.users["admin"].email)
    assert admin.get("/dev/outbox").status_code == 404
