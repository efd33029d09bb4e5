"""Signing in: no timing hint about which emails exist, and limits on failed attempts
(Flask-Limiter's storage, ``monark.core.ratelimit``)."""

from __future__ import annotations

import re
import types

import pytest
from flask import g
from limits.storage import memory
from limits.storage.memory import MemoryStorage
from werkzeug import security

from monark.config import load_config
from monark.core import auth, ratelimit
from monark.core.ratelimit import FailureCounts
from monark.core.settings import Settings
from tests import factories

# The deployment's defaults (monark/config.py), which the README states.
_DEFAULTS = Settings.from_config({**load_config("/tmp"), "SECRET_KEY": "x"}).limits
LIMIT = _DEFAULTS.signin_failures
IP_LIMIT = _DEFAULTS.signin_ip_failures
ACCOUNT_LIMIT = _DEFAULTS.signin_account_failures
WINDOW = _DEFAULTS.signin_window

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def sign_in(app):
    """``sign_in(email, password, ip=...)`` posts the login form from a fresh client."""

    def _post(email: str, password: str = factories.PASSWORD, ip: str = "10.0.0.1"):
        for key in list(g):  # the test's app context keeps the CSRF token and user on g
            g.pop(key, None)
        client = app.test_client()
        env = {"REMOTE_ADDR": ip}
        token = CSRF_RE.search(client.get("/login", environ_base=env).get_data(as_text=True))
        data = {"email": email, "password": password, "csrf_token": token.group(1)}
        return client.post("/login", data=data, environ_base=env)

    return _post


@pytest.fixture
def hash_checks(monkeypatch):
    """The stored hashes ``check_password_hash`` was asked about, in order."""
    seen: list[str] = []

    def spy(pwhash: str, password: str) -> bool:
        seen.append(pwhash)
        return security.check_password_hash(pwhash, password)

    monkeypatch.setattr(auth, "check_password_hash", spy)
    return seen


@pytest.fixture
def clock(monkeypatch):
    """The limiter's clock (its in-memory storage's), moved by hand: ``clock[0] += seconds``."""
    now = [1000.0]
    monkeypatch.setattr(memory, "time", types.SimpleNamespace(time=lambda: now[0]))
    monkeypatch.setattr(ratelimit, "clock", lambda: now[0])
    return now


def _counts(limit: int, window: int, limits: dict[str, int] | None = None) -> FailureCounts:
    """Failure counts of their own, on a fresh in-memory storage."""
    return FailureCounts(MemoryStorage(), limit, window, limits or {})


def test_the_readme_states_the_defaults():
    assert (LIMIT, IP_LIMIT, ACCOUNT_LIMIT, WINDOW) == (10, 50, 100, 15 * 60)


def test_an_unknown_email_still_costs_a_hash_check(app, world, sign_in, hash_checks):
    response = sign_in("nobody@acme.test", "whatever")
    assert response.status_code == 401
    assert "Wrong email or password." in response.get_data(as_text=True)
    # One check, against a dummy hash made with the configured method (as for a real user).
    assert len(hash_checks) == 1
    assert hash_checks[0].startswith(app.config["PASSWORD_HASH_METHOD"] + "$")
    hash_checks.clear()
    assert sign_in("member@acme.test", "wrong").status_code == 401
    assert hash_checks == [world.a.users["member"].password_hash]


def test_ten_failures_for_one_email_from_one_address_throttle_that_pair(
    world, sign_in, hash_checks, clock
):
    for _ in range(LIMIT):
        assert sign_in("member@acme.test", "guess", ip="10.0.1.1").status_code == 401
    hash_checks.clear()
    # Even the right password waits now, from that address, without a password check.
    response = sign_in("member@acme.test", ip="10.0.1.1")
    assert response.status_code == 429
    html = response.get_data(as_text=True)
    assert "Too many sign-in attempts; try again in 15 minutes." in html
    assert response.headers["Retry-After"] == str(WINDOW)
    assert hash_checks == []
    # The wait shrinks as time passes, then ends.
    clock[0] += WINDOW - 30
    late = sign_in("member@acme.test", ip="10.0.1.1")
    assert "try again in 1 minute." in late.get_data(as_text=True)
    clock[0] += 30
    assert sign_in("member@acme.test", ip="10.0.1.1").status_code == 302


def test_a_stranger_cannot_lock_someone_out_with_a_few_wrong_passwords(world, sign_in, clock):
    for _ in range(LIMIT):
        assert sign_in("member@acme.test", "guess", ip="203.0.113.9").status_code == 401
    assert sign_in("member@acme.test", "guess", ip="203.0.113.9").status_code == 429
    # The member, from their own address, signs in as usual.
    assert sign_in("member@acme.test", ip="10.0.2.1").status_code == 302


def test_guessing_one_email_from_many_addresses_is_capped(world, sign_in, hash_checks, clock):
    for i in range(ACCOUNT_LIMIT):
        ip = f"10.1.{i // 200}.{i % 200}"
        assert sign_in("member@acme.test", "guess", ip=ip).status_code == 401
    hash_checks.clear()
    assert sign_in("member@acme.test", ip="10.9.9.9").status_code == 429
    assert hash_checks == []
    # Other emails are not affected.
    assert sign_in("admin@acme.test", ip="10.9.9.9").status_code == 302


def test_many_failures_from_one_address_throttle_it(world, sign_in, clock):
    for i in range(IP_LIMIT):
        assert sign_in(f"guess{i}@acme.test", "guess", ip="10.0.3.1").status_code == 401
    assert sign_in("member@acme.test", ip="10.0.3.1").status_code == 429
    assert sign_in("member@acme.test", ip="10.0.3.2").status_code == 302


def test_a_success_clears_the_emails_count(world, sign_in, clock):
    for _ in range(LIMIT - 1):
        assert sign_in("member@acme.test", "guess", ip="10.0.4.1").status_code == 401
    assert sign_in("member@acme.test", ip="10.0.4.1").status_code == 302
    for _ in range(LIMIT - 1):
        assert sign_in("member@acme.test", "guess", ip="10.0.4.1").status_code == 401
    assert sign_in("member@acme.test", ip="10.0.4.1").status_code == 302


def test_limits_per_key_prefix(clock):
    throttle = _counts(limit=2, window=60, limits={"email:": 3})
    for _ in range(2):
        throttle.failed("ip:x", "email:a")
    assert throttle.retry_after("ip:x") == 60
    assert throttle.retry_after("email:a") == 0
    throttle.failed("email:a")
    assert throttle.retry_after("email:a") == 60


def test_old_failures_leave_the_window(clock):
    now = clock
    now[0] = 0.0
    throttle = _counts(limit=3, window=60)
    for _ in range(3):
        throttle.failed("email:a")
        now[0] += 10
    assert throttle.retry_after("email:a", "ip:x") == 30  # the first failure ends at 60
    now[0] = 60
    assert throttle.retry_after("email:a") == 0
    throttle.failed("email:a")
    assert throttle.retry_after("email:a") == 10
    throttle.clear("email:a")
    assert throttle.retry_after("email:a") == 0


def test_behind_trusted_proxies_the_limit_counts_the_clients_address(world, tmp_path):
    from monark import create_app
    from monark.extensions import db as _db

    app = create_app(
        {
            "SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path}/proxied.db",
            "SECRET_KEY": "proxied",
            "WTF_CSRF_ENABLED": False,
            "TRUSTED_PROXIES": 1,
        }
    )
    with app.app_context():
        _db.create_all()
        client = app.test_client()

        def attempt(client_ip: str) -> int:
            return client.post(
                "/login",
                data={"email": "someone@example.test", "password": "guess"},
                headers={"X-Forwarded-For": client_ip},
                environ_base={"REMOTE_ADDR": "10.0.0.1"},  # the proxy
            ).status_code

        for _ in range(LIMIT):
            assert attempt("198.51.100.7") == 401
        assert attempt("198.51.100.7") == 429  # that client waits ...
        assert attempt("198.51.100.8") == 401  # ... the next one, behind the same proxy, not
        _db.session.remove()
        _db.engine.dispose()
