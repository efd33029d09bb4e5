"""Webhooks as jobs: signed (verified by the ``standardwebhooks`` library at a real loopback
receiver), retried with backoff, logged per try, redelivered by admins; what a run shows.

Retries run without their wait (``jobs.drain_scheduled``) unless a test is about the real
consumer's timing; the session's config tries a webhook once, so each test sets its own.
"""

from __future__ import annotations

import json
import re
import socket
from datetime import timedelta
from typing import Any

import pytest
from bs4 import BeautifulSoup
from flask import Flask
from sqlalchemy import select, update
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from monark.automations import engine, leases, signing, webhook_services, webhooks
from monark.automations.models import Automation, AutomationRun, WebhookAttempt, WebhookDelivery
from monark.core import jobs
from monark.core.models import Event, utcnow
from monark.extensions import db
from monark.records import services as records
from tests import factories
from tests.jobs import drain
from tests.test_automations import CREATED, graph, make_automation, runs_of, step
from tests.test_jobs import backend, consumer, wait_for  # noqa: F401  (fixtures)
from tests.webhook_server import RESET

NOTE_AFTER = ("after", "add_audit_note", {"note": "sent {{record.id}}"})


@pytest.fixture
def acme(world: factories.World) -> factories.OrgWorld:
    drain()  # the world's own events: nothing to do for them
    return world.a


@pytest.fixture
def tries(app: Flask, monkeypatch):
    """``tries(n)``: webhooks are tried up to ``n`` times, 50 ms apart, then doubling."""

    def set_tries(n: int, seconds: float = 0.05) -> None:
        monkeypatch.setitem(app.config, "WEBHOOK_MAX_ATTEMPTS", n)
        monkeypatch.setitem(app.config, "WEBHOOK_RETRY_SECONDS", seconds)

    return set_tries


def _hooked(acme, url: str, name: str = "Hook", **config: Any) -> Automation:
    """An automation sending a webhook to ``url`` for each new task, then a note."""
    raw = graph(
        CREATED,
        ("hook", "send_webhook", {"url": url, **config}),
        NOTE_AFTER,
        edges=[("t", "hook"), ("hook", "after")],
    )
    return make_automation(acme, raw, name=name)


def _save(acme, title: str = "Ship") -> int:
    return records.create_record(acme.principal("member"), acme.model, {"title": title}).id


def _run(automation: Automation) -> AutomationRun:
    [run] = runs_of(automation.id)
    return run


def _delivery(run: AutomationRun) -> WebhookDelivery:
    db.session.expire_all()
    [delivery] = db.session.scalars(
        select(WebhookDelivery).where(WebhookDelivery.run_id == run.id)
    ).all()
    return delivery


def _secret(acme, automation: Automation) -> str:
    return webhook_services.rotate_secret(acme.principal("admin"), automation.id).secret


def _verify(secret: str, received: dict[str, Any]) -> Any:
    return Webhook(secret).verify(received["body"], received["headers"])


# ---- signatures -----------------------------------------------------------------------


def test_a_webhook_is_signed_by_standard_webhooks_with_the_automations_secret(acme, webhook):
    automation = _hooked(acme, webhook.url)
    secret = _secret(acme, automation)
    assert secret.startswith("whsec_")
    task_id = _save(acme)
    drain()
    [received] = webhook.received
    assert _verify(secret, received)["record"]["id"] == task_id
    headers = {k.lower(): v for k, v in received["headers"].items()}
    assert headers["webhook-id"].startswith("msg_") and headers["webhook-timestamp"].isdigit()
    with pytest.raises(WebhookVerificationError):
        _verify(_secret(acme, make_automation(acme, graph(CREATED), name="Other")), received)
    run = _run(automation)
    assert run.status == "succeeded" and step(run, "hook")["output"] == {"status_code": 200}
    assert step(run, "after")["status"] == "succeeded"


def test_the_secret_is_kept_encrypted_and_made_at_the_first_webhook_when_none(acme, webhook):
    automation = _hooked(acme, webhook.url)
    assert automation.webhook_secret is None
    _save(acme)
    drain()
    db.session.expire_all()
    stored = db.session.get(Automation, automation.id).webhook_secret
    assert stored and "whsec_" not in stored  # Fernet, not the secret
    assert "webhook-signature" in {k.lower() for k in webhook.received[0]["headers"]}


def test_a_rotated_secret_signs_beside_the_old_one_for_24_hours(acme, webhook):
    automation = _hooked(acme, webhook.url)
    old = _secret(acme, automation)
    new = _secret(acme, automation)
    _save(acme, "During")
    drain()
    during = webhook.received[-1]
    assert len(during["headers"]["webhook-signature"].split(" ")) == 2
    assert _verify(old, during) and _verify(new, during)
    # A day later the old secret signs no more.
    db.session.execute(
        update(Automation)
        .where(Automation.id == automation.id)
        .values(webhook_secret_previous_until=utcnow() - timedelta(seconds=1))
    )
    db.session.commit()
    _save(acme, "After")
    drain()
    after = webhook.received[-1]
    assert _verify(new, after)
    with pytest.raises(WebhookVerificationError):
        _verify(old, after)


def test_the_secret_is_shown_once_to_the_admin_who_made_it(acme, webhook, login):
    automation = _hooked(acme, webhook.url)
    admin = login("admin@acme.test")
    page = f"/automations/{automation.id}"
    made = admin.post(f"{page}/signing-secret")
    assert made.status_code == 200 and made.headers["Cache-Control"] == "no-store"
    shown = BeautifulSoup(made.get_data(as_text=True), "html.parser").select_one(
        ".secret-once code"
    )
    secret = shown.get_text()
    assert secret.startswith("whsec_")
    again = admin.get(page).get_data(as_text=True)
    assert secret not in again and "Rotate signing secret" in again
    # Members may not make one; a form without its CSRF token is refused.
    assert login("member@acme.test").post(f"{page}/signing-secret").status_code == 403
    admin.csrf = ""
    assert admin.post(f"{page}/signing-secret").status_code == 400
    kinds = db.session.scalars(
        select(Event.type).where(Event.type.like("automation.webhook_secret%"))
    ).all()
    assert kinds == ["automation.webhook_secret_created"]


def _signatures(received: dict[str, Any]) -> list[str]:
    return received["headers"]["webhook-signature"].split(" ")


def test_every_secret_rotated_out_in_the_last_24_hours_still_signs(acme, webhook):
    """A→B→C within a day: a receiver still holding A (or B) goes on verifying."""
    automation = _hooked(acme, webhook.url)
    a, b, c = _secret(acme, automation), _secret(acme, automation), _secret(acme, automation)
    _save(acme)
    drain()
    during = webhook.received[-1]
    assert len(_signatures(during)) == 3
    assert _verify(a, during) and _verify(b, during) and _verify(c, during)


def test_each_rotated_out_secret_signs_for_24_hours_from_its_own_rotation(acme, app):
    automation = make_automation(acme, graph(CREATED), name="Clock")
    t0 = utcnow()
    a = signing.rotate(automation, now=t0)  # created
    b = signing.rotate(automation, now=t0 + timedelta(hours=1))  # A signs until t0+25h
    c = signing.rotate(automation, now=t0 + timedelta(hours=21))  # B until t0+45h
    at = t0 + timedelta(hours=24)
    assert signing.signing_secrets(automation, at) == [c, b, a]
    assert signing.signing_secrets(automation, at + timedelta(hours=2)) == [c, b]
    assert signing.signing_secrets(automation, t0 + timedelta(hours=46)) == [c]


def test_the_secrets_that_still_sign_are_a_bounded_list(acme, app):
    automation = make_automation(acme, graph(CREATED), name="Many")
    made = [signing.rotate(automation) for _ in range(signing.MAX_RETIRED + 4)]
    assert signing.signing_secrets(automation) == made[::-1][: signing.MAX_RETIRED + 1]


def test_a_secret_kept_the_old_way_still_signs_until_its_time(acme, app):
    """One previous secret stored whole (before several were kept) reads as that one."""
    from monark.core import crypto

    automation = make_automation(acme, graph(CREATED), name="Old")
    current, old = signing.new_secret(), signing.new_secret()
    automation.webhook_secret, automation.webhook_secret_previous = (
        crypto.encrypt(current),
        crypto.encrypt(old),
    )
    automation.webhook_secret_previous_until = utcnow() + timedelta(hours=3)
    assert signing.signing_secrets(automation) == [current, old]
    fresh = signing.rotate(automation)
    assert signing.signing_secrets(automation) == [fresh, current, old]


def _secret_shown(answer) -> str:
    soup = BeautifulSoup(answer.get_data(as_text=True), "html.parser")
    return soup.select_one(".secret-once code").get_text()


def _rotation_token(admin, page: str) -> str:
    soup = BeautifulSoup(admin.get(page).get_data(as_text=True), "html.parser")
    return soup.select_one("#signing input[name=rotation_token]")["value"]


def test_the_same_rotate_form_sent_twice_rotates_once_and_shows_the_same_secret(
    acme, webhook, login
):
    """A double click (or a resubmitted page) sends the form twice: one rotation."""
    automation = _hooked(acme, webhook.url)
    admin = login("admin@acme.test")
    page = f"/automations/{automation.id}"
    first = _secret(acme, automation)
    token = _rotation_token(admin, page)
    once = admin.post(f"{page}/signing-secret", data={"rotation_token": token})
    twice = admin.post(f"{page}/signing-secret", data={"rotation_token": token})
    assert once.status_code == twice.status_code == 200
    second = _secret_shown(once)
    assert _secret_shown(twice) == second != first
    _save(acme)
    drain()
    received = webhook.received[-1]
    assert len(_signatures(received)) == 2  # the second and the first: nothing dropped
    assert _verify(first, received) and _verify(second, received)
    kinds = db.session.scalars(
        select(Event.type).where(Event.type.like("automation.webhook_secret%")).order_by(Event.id)
    ).all()
    assert kinds == ["automation.webhook_secret_created", "automation.webhook_secret_rotated"]
    # The next form (a new token) rotates again.
    third = admin.post(
        f"{page}/signing-secret", data={"rotation_token": _rotation_token(admin, page)}
    )
    assert _secret_shown(third) not in (first, second)


def test_after_rotating_the_address_bar_shows_the_automations_page(acme, webhook, login):
    """No POST-only address is left to reload (it answered 405); the secret is in no URL."""
    automation = _hooked(acme, webhook.url)
    admin = login("admin@acme.test")
    page = f"/automations/{automation.id}"
    boosted = {"HX-Request": "true", "HX-Boosted": "true"}
    made = admin.post(f"{page}/signing-secret", headers=boosted)
    assert made.status_code == 200 and made.headers["HX-Push-Url"] == page
    assert _secret_shown(made) not in made.headers["HX-Push-Url"]
    reloaded = admin.get(f"{page}/signing-secret")
    assert reloaded.status_code == 303 and reloaded.headers["Location"].endswith(f"{page}#signing")
    assert login("member@acme.test").get(f"{page}/signing-secret").status_code == 303
    assert login("admin@globex.test").get(f"{page}/signing-secret").status_code == 404


# ---- retries and endings --------------------------------------------------------------


def test_a_5xx_is_retried_until_a_2xx_ends_it_with_each_try_logged(acme, webhook, tries):
    tries(6)
    webhook.answers = [500, 503]
    automation = _hooked(acme, webhook.url)
    _save(acme)
    drain()
    run = _run(automation)
    assert run.status == "retrying"
    state = webhook_services.run_states([run])[run.id]
    assert (state.attempt, state.max_attempts) == (2, 6) and state.next_try_at is not None
    assert step(run, "after")["status"] == "waiting"
    jobs.drain_scheduled(_app())
    run = _run(automation)
    assert run.status == "succeeded" and step(run, "after")["status"] == "succeeded"
    delivery = _delivery(run)
    assert (delivery.status, delivery.attempts) == ("delivered", 3)
    assert [(t.number, t.status_code, t.outcome) for t in delivery.tries] == [
        (1, 500, "retry"),
        (2, 503, "retry"),
        (3, 200, "delivered"),
    ]
    assert delivery.tries[0].response_excerpt == '{"error": "nope"}'
    assert all(t.duration_ms > 0 for t in delivery.tries)
    # One message: the same webhook-id on every try.
    assert len({r["headers"]["webhook-id"] for r in webhook.received}) == 1


def _app() -> Flask:
    from flask import current_app

    return current_app._get_current_object()  # type: ignore[attr-defined]


def test_retries_stop_at_the_configured_number_and_the_step_fails(acme, webhook, tries):
    tries(3)
    webhook.status = 500
    automation = _hooked(acme, webhook.url)
    _save(acme)
    jobs.drain_scheduled(_app())
    run = _run(automation)
    assert run.status == "failed" and run.error == "Failed at hook."
    assert "answered HTTP 500" in step(run, "hook")["error"]
    assert step(run, "after")["reason"] == "An earlier step failed."
    assert len(webhook.received) == 3
    assert [t.outcome for t in _delivery(run).tries] == ["retry", "retry", "failed"]


@pytest.mark.parametrize(("code", "sent"), [(404, 1), (410, 1), (408, 2), (429, 2)])
def test_a_4xx_ends_at_once_but_408_and_429_are_retried(acme, webhook, tries, code, sent):
    tries(2)
    webhook.status = code
    automation = _hooked(acme, webhook.url)
    _save(acme)
    jobs.drain_scheduled(_app())
    assert len(webhook.received) == sent
    assert _delivery(_run(automation)).status == "failed"


def test_a_redirect_is_not_followed_and_fails_the_webhook(acme, webhook, tries):
    tries(3)
    webhook.status = 302
    automation = _hooked(acme, webhook.url)
    _save(acme)
    jobs.drain_scheduled(_app())
    assert [r["path"] for r in webhook.received] == ["/hook"]  # never /elsewhere
    hook = step(_run(automation), "hook")
    assert hook["status"] == "failed" and "redirect: not followed" in hook["error"]


def test_an_endpoint_that_hangs_times_out_and_is_retried(acme, webhook, tries):
    tries(2)
    webhook.delay = 1.0
    automation = _hooked(acme, webhook.url, timeout_seconds=0.2)
    _save(acme)
    jobs.drain_scheduled(_app())
    delivery = _delivery(_run(automation))
    assert delivery.status == "failed"
    assert [("ReadTimeout" in (t.error or ""), t.outcome) for t in delivery.tries] == [
        (True, "retry"),
        (True, "failed"),
    ]


def test_a_reset_connection_is_retried_and_the_next_try_delivers(acme, webhook, tries):
    tries(3)
    webhook.answers = [RESET]
    automation = _hooked(acme, webhook.url)
    _save(acme)
    jobs.drain_scheduled(_app())
    delivery = _delivery(_run(automation))
    assert delivery.status == "delivered"
    first, second = delivery.tries
    assert (
        first.outcome == "retry" and first.status_code is None and "request failed" in first.error
    )
    assert second.status_code == 200


def test_a_closed_port_is_retried(acme, app, monkeypatch, tries):
    monkeypatch.setitem(app.config, "AUTOMATION_WEBHOOK_ALLOW_PRIVATE", True)
    tries(2)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    automation = _hooked(acme, f"http://127.0.0.1:{port}/x")
    _save(acme)
    jobs.drain_scheduled(_app())
    assert [t.outcome for t in _delivery(_run(automation)).tries] == ["retry", "failed"]


def test_the_address_is_checked_again_at_every_try(acme, monkeypatch, tries):
    """A host public at the first try that resolves to loopback at the next is refused."""
    import httpx2

    from monark.automations import actions

    tries(3)
    answers = iter(["93.184.216.34", "127.0.0.1"])
    sent: list[str] = []

    def dns(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    def far_end(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.url.host)
        return httpx2.Response(503)

    monkeypatch.setattr(socket, "getaddrinfo", dns)
    monkeypatch.setattr(
        actions,
        "webhook_client",
        lambda timeout: httpx2.Client(transport=httpx2.MockTransport(far_end), timeout=timeout),
    )
    automation = _hooked(acme, "https://hooks.example.com/in")
    _save(acme)
    jobs.drain_scheduled(_app())
    delivery = _delivery(_run(automation))
    assert sent == ["93.184.216.34"]  # the second try never left
    assert delivery.status == "failed" and "non-public address (127.0.0.1)" in delivery.error
    assert [t.outcome for t in delivery.tries] == ["retry", "failed"]


def test_the_real_consumer_retries_a_webhook_after_its_delay(
    acme,
    app,
    webhook,
    tries,
    consumer,  # noqa: F811  (the fixture of test_jobs)
):
    tries(3, seconds=0.2)
    webhook.answers = [500]
    automation = _hooked(acme, webhook.url)
    _save(acme)
    first, second = webhook.wait_for(2)
    assert second["at"] - first["at"] >= 0.2
    run = wait_for(lambda: [r for r in runs_of(automation.id) if r.finished_at])[0]
    assert run.status == "succeeded" and _delivery(run).attempts == 2


# ---- what people see ------------------------------------------------------------------


def _retrying_run(acme, webhook):
    """An automation whose webhook answered 500 to its first try, and its run (retrying)."""
    webhook.status = 500
    automation = _hooked(acme, webhook.url)
    _save(acme)
    drain()
    return automation, _run(automation)


def test_the_run_page_shows_the_state_and_the_delivery_log(acme, webhook, tries, login):
    tries(4)
    automation, run = _retrying_run(acme, webhook)
    page = login("member@acme.test").get(f"/automations/{automation.id}/runs/{run.id}")
    soup = BeautifulSoup(page.get_data(as_text=True), "html.parser")
    assert soup.h1.select_one(".status").get_text().startswith("retrying (attempt 2 of 4, next")
    assert "HTTP 500" in soup.select_one(".delivery table").get_text()
    assert (
        soup.select_one(".delivery form") is None
    )  # no Redeliver while it retries, nor for members
    listing = login("member@acme.test").get(f"/automations/{automation.id}/runs")
    assert "retrying (attempt 2 of 4" in listing.get_data(as_text=True)


def test_automation_get_run_reports_the_state_and_deliveries(acme, webhook, tries, login):
    tries(4)
    webhook.status = 503
    automation = _hooked(acme, webhook.url)
    _save(acme)
    drain()
    run = _run(automation)
    body = login("admin@acme.test").api("GET", f"/internal/automations/runs/{run.id}").get_json()
    assert body["status"] == "retrying" and body["state"].startswith("retrying (attempt 2 of 4")
    assert (body["attempt"], body["max_attempts"]) == (2, 4) and body["next_try_at"]
    [delivery] = body["deliveries"]
    assert delivery["status"] == "retrying" and delivery["tries"][0]["status_code"] == 503


def test_admins_see_the_orgs_queue_health_on_the_automations_page(acme, webhook, login):
    webhook.status = 500
    _hooked(acme, webhook.url)
    _save(acme)
    drain()
    page = login("admin@acme.test").get("/automations").get_data(as_text=True)
    health = BeautifulSoup(page, "html.parser").select_one(".queue-health").get_text(" ")
    assert "Failing in the last 24 hours: 1 run and 1 webhook" in " ".join(health.split())
    member = login("member@acme.test").get("/automations").get_data(as_text=True)
    assert "Queue health" not in member


def test_queue_health_counts_committed_changes_no_worker_took_up_yet(acme, app, login, monkeypatch):
    """The queue's storage refused the job: the change waits for the sweep, and says so."""
    make_automation(acme, NOTE_ONLY)
    monkeypatch.setattr(engine, "SWEEP_GRACE_SECONDS", 0.0)
    engine.sweep.func()  # the world's own changes, settled
    drain()
    assert webhooks.queue_health(acme.org.id).events_waiting == 0
    tasks = jobs.queue(app).tasks
    kept = tasks["automations.run_events"]
    monkeypatch.setitem(tasks, "automations.run_events", _refused)
    _save(acme)
    assert webhooks.queue_health(acme.org.id).events_waiting == 1
    page = login("admin@acme.test").get("/automations").get_data(as_text=True)
    health = BeautifulSoup(page, "html.parser").select_one(".queue-health").get_text(" ")
    assert "Waiting: 1 change not yet taken up, 0 runs" in " ".join(health.split())
    assert webhooks.queue_health(acme.org.id + 1000).events_waiting == 0  # this org's only
    tasks["automations.run_events"] = kept  # the storage is back
    engine.sweep.func()
    drain()
    assert webhooks.queue_health(acme.org.id).events_waiting == 0 and _notes() == 1


# ---- redeliver ------------------------------------------------------------------------


def _failed_once(acme, webhook, name: str = "Hook") -> tuple[Automation, AutomationRun]:
    webhook.answers = [500]
    automation = _hooked(acme, webhook.url, name=name)
    _save(acme)
    drain()
    return automation, _run(automation)


def test_an_admin_redelivers_an_ended_webhook_audited(acme, webhook, login):
    automation, run = _failed_once(acme, webhook)
    delivery = _delivery(run)
    url = f"/automations/{automation.id}/runs/{run.id}"
    admin = login("admin@acme.test")
    assert "Redeliver" in admin.get(url).get_data(as_text=True)
    answer = admin.post(f"{url}/deliveries/{delivery.id}/redeliver")
    assert answer.status_code == 303
    drain()
    delivery = _delivery(run)
    assert delivery.status == "delivered"
    assert [(t.outcome, t.redelivered_by_id is not None) for t in delivery.tries] == [
        ("failed", False),
        ("delivered", True),
    ]
    assert (
        webhook.received[0]["headers"]["webhook-id"] == webhook.received[1]["headers"]["webhook-id"]
    )
    [audit] = db.session.scalars(
        select(Event).where(Event.type == "automation.webhook_redelivered")
    ).all()
    assert audit.actor_id == acme.users["admin"].id
    assert audit.payload["delivery_id"] == delivery.id


def _delivery_line(page) -> str:
    soup = BeautifulSoup(page.get_data(as_text=True), "html.parser")
    return " ".join(soup.select_one(".delivery .step-head").get_text(" ").split())


def test_a_redelivery_counts_its_own_tries_against_the_maximum(acme, webhook, tries, login):
    """Ended at try 2 of 4 (a 404 after a 500), then redelivered: never "tried 3 of 3"."""
    tries(4)
    webhook.answers = [500, 404, 503]
    automation = _hooked(acme, webhook.url)
    _save(acme)
    jobs.drain_scheduled(_app())
    run = _run(automation)
    admin = login("admin@acme.test")
    url = f"/automations/{automation.id}/runs/{run.id}"
    assert "tried 2 of 4 times" in _delivery_line(admin.get(url))
    admin.post(f"{url}/deliveries/{_delivery(run).id}/redeliver")
    drain()  # its first try: a 503, so it is tried again, as any delivery is
    delivery = _delivery(run)
    assert (delivery.status, delivery.attempts, delivery.max_attempts) == ("retrying", 1, 4)
    assert "redelivered: tried 1 of 4 times · next try at" in _delivery_line(admin.get(url))
    jobs.drain_scheduled(_app())
    delivery = _delivery(run)
    assert (delivery.status, delivery.attempts) == ("delivered", 2)
    assert [(t.number, t.outcome, t.redelivered_by_id is not None) for t in delivery.tries] == [
        (1, "retry", False),
        (2, "failed", False),
        (1, "retry", True),
        (2, "delivered", True),
    ]
    assert "redelivered: tried 2 of 4 times" in _delivery_line(admin.get(url))


def test_the_run_page_shows_times_to_the_second_like_the_runs_list(acme, webhook, tries, login):
    tries(3)
    automation, run = _retrying_run(acme, webhook)
    member = login("member@acme.test")
    page = member.get(f"/automations/{automation.id}/runs/{run.id}")
    soup = BeautifulSoup(page.get_data(as_text=True), "html.parser")
    seconds = re.compile(r"\d\d:\d\d:\d\d UTC")
    assert seconds.search(soup.h1.select_one(".status").get_text())  # next try at
    assert seconds.search(_delivery_line(page).split("next try at", 1)[1])
    [when] = [row.select("td")[1].get_text() for row in soup.select(".delivery tbody tr")]
    assert seconds.fullmatch(when.split(" ", 1)[1])
    listing = member.get(f"/automations/{automation.id}/runs").get_data(as_text=True)
    assert seconds.search(listing)


def test_redeliver_needs_an_admin_a_csrf_token_and_the_orgs_run(acme, world, webhook, login):
    automation, run = _failed_once(acme, webhook)
    delivery = _delivery(run)
    url = f"/automations/{automation.id}/runs/{run.id}/deliveries/{delivery.id}/redeliver"
    member = login("member@acme.test")
    assert "Redeliver" not in member.get(url.rsplit("/deliveries", 1)[0]).get_data(as_text=True)
    assert member.post(url).status_code == 403
    assert login("admin@globex.test").post(url).status_code == 404
    admin = login("admin@acme.test")
    admin.csrf = ""
    assert admin.post(url).status_code == 400
    # A delivery of another run, under this run's address: no such delivery here.
    _, other_run = _failed_once(acme, webhook, name="Other")
    other = _delivery(other_run)
    wrong = url.replace(f"/deliveries/{delivery.id}/", f"/deliveries/{other.id}/")
    assert login("admin@acme.test").post(wrong).status_code == 404
    drain()
    assert len(_delivery(run).tries) == 1 and len(_delivery(other_run).tries) == 1


def test_a_webhook_still_being_delivered_is_not_redelivered(acme, webhook, tries):
    tries(3)
    webhook.status = 500
    automation = _hooked(acme, webhook.url)
    _save(acme)
    drain()
    run = _run(automation)
    from monark.core.errors import Conflict

    with pytest.raises(Conflict):
        webhook_services.redeliver(
            acme.principal("admin"), automation.id, run.id, _delivery(run).id
        )


# ---- faults ---------------------------------------------------------------------------


def _cut_off(run_id: int, steps: list[dict[str, Any]] | None = None) -> None:
    """The worker running ``run_id`` died: its lease is past, its steps as stored then."""
    values: dict[str, Any] = {"status": "running", "lease_until": utcnow() - timedelta(seconds=1)}
    if steps is not None:
        values["steps"] = steps
    db.session.execute(update(AutomationRun).where(AutomationRun.id == run_id).values(**values))
    db.session.commit()


NOTE_ONLY = graph(CREATED, NOTE_AFTER, edges=[("t", "after")])


def _notes() -> int:
    return len(db.session.scalars(select(Event.id).where(Event.type == "automation.note")).all())


def test_a_run_cut_off_before_any_action_is_taken_up_once_and_finishes(acme, app):
    automation = make_automation(acme, NOTE_ONLY)
    _save(acme)
    # The worker stopped right after its claim: no step stored, no action begun.
    with app.app_context():
        triggers = [
            engine._trigger_of(e)
            for e in db.session.scalars(select(Event).where(Event.pending.is_(True)))
        ]
    jobs.queue(app).huey.flush()
    run_id = _claim_only(automation, triggers)
    _cut_off(run_id)
    assert leases.settle_cut_off.func() == 1
    drain()
    run = _run(automation)
    assert (run.status, run.attempt) == ("succeeded", 2) and _notes() == 1
    assert leases.settle_cut_off.func() == 0


def _claim_only(automation: Automation, triggers) -> int:
    """What a worker did before it died: the run's claim, nothing more."""
    trigger = next(t for t in triggers if t.type == "record.created")
    from dataclasses import replace

    trigger = replace(trigger, model_key="tasks")
    run = engine._new_run(automation, trigger)
    return run.id


def test_a_run_cut_off_during_an_action_is_failed_never_run_twice(acme, app):
    automation = make_automation(acme, NOTE_ONLY)
    _save(acme)
    drain()
    run = _run(automation)
    notes = _notes()
    in_flight = [run.steps[0], {**run.steps[1], "status": "running", "output": None}]
    _cut_off(run.id, in_flight)
    assert leases.settle_cut_off.func() == 1
    drain()
    run = _run(automation)
    assert run.status == "failed" and "during step after" in run.error
    assert step(run, "after")["status"] == "failed" and _notes() == notes


def test_a_run_cut_off_twice_is_failed(acme, app):
    automation = make_automation(acme, NOTE_ONLY)
    _save(acme)
    drain()
    run = _run(automation)
    db.session.execute(update(AutomationRun).where(AutomationRun.id == run.id).values(attempt=2))
    _cut_off(run.id, run.steps[:1])
    assert leases.settle_cut_off.func() == 1
    assert _run(automation).status == "failed" and "twice" in _run(automation).error


def test_a_delivery_whose_job_was_lost_is_queued_again_by_the_sweep(
    acme, app, webhook, monkeypatch
):
    automation = _hooked(acme, webhook.url)
    # The queue's storage is down when the run queues its delivery.
    tasks = jobs.queue(app).tasks
    kept = tasks["automations.deliver_webhook"]
    monkeypatch.setitem(tasks, "automations.deliver_webhook", _refused)
    _save(acme)
    drain()
    tasks["automations.deliver_webhook"] = kept  # the storage is back
    run = _run(automation)
    assert run.status == "queued" and webhook.received == []
    monkeypatch.setattr(webhooks, "STALE_GRACE_SECONDS", 0.0)
    assert webhooks.sweep_deliveries.func() == 1
    drain()
    assert len(webhook.received) == 1 and _run(automation).status == "succeeded"
    assert webhooks.sweep_deliveries.func() == 0


def test_an_event_whose_work_keeps_failing_is_given_up_after_the_cap(acme, app, monkeypatch):
    make_automation(acme, NOTE_ONLY)
    monkeypatch.setitem(app.config, "AUTOMATION_SWEEP_ATTEMPTS", 2)
    monkeypatch.setattr(engine, "SWEEP_GRACE_SECONDS", 0.0)
    monkeypatch.setitem(jobs.queue(app).tasks, "automations.run_events", _refused)
    monkeypatch.setattr(engine, "run_triggered", _broken)
    task_id = _save(acme)

    def pending() -> bool:
        db.session.expire_all()
        event = db.session.scalars(
            select(Event).where(Event.type == "record.created", Event.subject_id == task_id)
        ).one()
        return event.pending

    for _ in (1, 2):
        engine.sweep.func()
        assert pending()
    engine.sweep.func()  # the third: given up
    assert not pending()


def _refused(*args: Any) -> None:
    raise RuntimeError("queue down")


def _broken(trigger: Any) -> list[int]:
    raise RuntimeError("this event's work always fails")


def test_signed_body_is_exactly_the_bytes_sent(acme, webhook):
    automation = _hooked(acme, webhook.url, payload={"title": "{{record.title}}", "n": 1})
    _save(acme, "Ünïcode")
    drain()
    [received] = webhook.received
    assert json.loads(received["body"]) == {"title": "Ünïcode", "n": 1}
    assert received["body"] == _delivery(_run(automation)).body
    assert db.session.scalars(select(WebhookAttempt)).all()


def test_a_run_whose_automation_changed_while_it_waited_is_not_continued(acme, webhook, tries):
    tries(2)
    webhook.answers = [500]
    automation = _hooked(acme, webhook.url)
    _save(acme)
    drain()
    from monark.automations import services

    services.update_automation(
        acme.principal("owner"), automation.id, graph=automation.graph, name="Changed"
    )
    jobs.drain_scheduled(_app())
    run = _run(automation)
    assert run.status == "failed" and "changed while this run waited" in run.error
    assert _notes() == 0  # the step after the webhook never ran


def test_a_run_whose_webhook_ended_but_never_went_on_is_taken_up(acme, webhook, monkeypatch):
    automation = _hooked(acme, webhook.url)
    # The worker died after the delivery ended, before the run went on.
    monkeypatch.setattr(webhooks, "_resume_run", [])
    _save(acme)
    drain()
    run = _run(automation)
    assert run.status == "queued" and _delivery(run).status == "delivered"
    monkeypatch.setattr(leases, "STALLED_GRACE_SECONDS", -1.0)  # its time has come
    assert leases.settle_cut_off.func() == 1
    drain()
    run = _run(automation)
    assert run.status == "succeeded" and step(run, "after")["status"] == "succeeded"
    assert leases.settle_cut_off.func() == 0


# ---- faults nobody foresaw: every try logged, no delivery left open -------------------

LONG_LABEL_URL = "http://" + "a" * 300 + ".example.com/"


def test_a_step_saved_before_a_rule_it_breaks_fails_at_once_with_the_reason(acme, webhook):
    """A host name DNS cannot carry, saved before Save checked host names: no delivery."""
    automation = _hooked(acme, webhook.url)
    stored = json.loads(json.dumps(automation.graph))
    next(n for n in stored["nodes"] if n["id"] == "hook")["config"]["url"] = LONG_LABEL_URL
    db.session.execute(
        update(Automation).where(Automation.id == automation.id).values(graph=stored)
    )
    db.session.commit()
    _save(acme)
    drain()
    run = _run(automation)
    assert run.status == "failed" and step(run, "hook")["error"] == engine.STALE_CONFIG
    assert webhooks.deliveries_of(run.id) == []


def test_an_unexpected_error_in_a_try_is_a_logged_failed_try_never_an_open_delivery(
    acme, webhook, tries, monkeypatch
):
    """The walkthrough's fault: ``UnicodeError`` (the IDNA codec) from deep in the HTTP
    library, no ``HTTPError``. Each try is logged, retried, then the delivery ends."""
    import httpx2

    from monark.automations import actions

    def far_end(request: httpx2.Request) -> httpx2.Response:
        raise UnicodeError("encoding with 'idna' codec failed (label empty or too long)")

    monkeypatch.setattr(
        actions,
        "webhook_client",
        lambda timeout: httpx2.Client(transport=httpx2.MockTransport(far_end), timeout=timeout),
    )
    tries(2)
    automation = _hooked(acme, webhook.url)
    _save(acme)
    jobs.drain_scheduled(_app())
    run = _run(automation)
    delivery = _delivery(run)
    assert (delivery.status, delivery.attempts, delivery.max_attempts) == ("failed", 2, 2)
    assert [t.outcome for t in delivery.tries] == ["retry", "failed"]
    assert all("Unexpected error: UnicodeError" in t.error for t in delivery.tries)
    assert run.status == "failed" and "UnicodeError" in step(run, "hook")["error"]
    health = webhooks.queue_health(acme.org.id)
    assert health.deliveries_waiting == 0 and health.deliveries_failed_24h == 1


def test_a_last_try_cut_off_ends_the_delivery_and_tries_never_pass_the_maximum(
    acme, webhook, tries, monkeypatch
):
    tries(2)
    webhook.status = 500
    automation = _hooked(acme, webhook.url)
    _save(acme)
    drain()
    delivery = _delivery(_run(automation))
    # The worker making the last try died: the delivery says "sending", its lease is past.
    db.session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery.id)
        .values(status="sending", attempts=2, lease_until=utcnow() - timedelta(seconds=1))
    )
    db.session.commit()
    for _ in range(3):  # each lease expiry used to take it up again: "tried 3 of 2 times"
        webhooks.sweep_deliveries.func()
        drain()
    delivery = _delivery(_run(automation))
    assert (delivery.status, delivery.attempts, delivery.max_attempts) == ("failed", 2, 2)
    assert [t.outcome for t in delivery.tries] == ["retry", "failed"]
    assert "cut off" in delivery.tries[-1].error and len(webhook.received) == 1
    run = _run(automation)
    assert run.status == "failed" and step(run, "after")["reason"] == "An earlier step failed."
    assert webhooks.sweep_deliveries.func() == 0
