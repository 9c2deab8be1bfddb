"""Issue 35 item 8: failed logins on /admin/login/ are throttled per client address (and
username), and without DJANGO_SECRET_KEY the dashboard answers loopback clients only, saying
why in one line. Django test client over the test database and the settings' MIDDLEWARE."""

from __future__ import annotations

import logging

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from controlplane.observations import login_throttle
from controlplane.observations.security import NO_SECRET_KEY

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/"
PASSWORD = "a-long-password-for-tests"
HERE, THERE = "127.0.0.1", "127.0.0.2"


@pytest.fixture(autouse=True)
def _fresh_counts(settings):
    # A fast hasher: these tests check passwords dozens of times.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def admin_user() -> User:
    return User.objects.create_user("alice", password=PASSWORD, is_staff=True)


def _login(username: str, password: str, address: str = HERE) -> int:
    client = Client(REMOTE_ADDR=address)
    return client.post(LOGIN, {"username": username, "password": password}).status_code


def test_failed_logins_lock_out_that_address_and_username(admin_user):
    for _ in range(login_throttle.FAILURES_PER_USERNAME):
        assert _login("alice", "wrong") == 200  # the form again, with its error
    assert _login("alice", PASSWORD) == 429  # the right password no longer gets checked
    refused = Client(REMOTE_ADDR=HERE).post(LOGIN, {"username": "alice", "password": PASSWORD})
    assert "5 failed logins for this username from your address" in refused.content.decode()
    assert _login("alice", PASSWORD, address=THERE) == 302  # another client is not locked out


def test_a_successful_login_clears_its_count(admin_user):
    for _ in range(2):
        for _ in range(login_throttle.FAILURES_PER_USERNAME - 1):
            assert _login("alice", "wrong") == 200
        assert _login("alice", PASSWORD) == 302


def test_many_usernames_from_one_address_lock_it_out(admin_user):
    for attempt in range(login_throttle.FAILURES_PER_ADDRESS):
        assert _login(f"guess-{attempt}", "wrong") == 200
    response = Client(REMOTE_ADDR=HERE).post(LOGIN, {"username": "alice", "password": PASSWORD})
    assert response.status_code == 429
    assert response["Retry-After"] == str(login_throttle.WINDOW_SECONDS)
    page = response.content.decode()
    assert "20 failed logins from your address, for any usernames" in page
    assert "15 minutes" in page and 'href="/admin/login/"' in page


def test_without_a_secret_key_only_loopback_clients_get_the_dashboard(settings, caplog):
    settings.SECRET_KEY_FROM_ENVIRONMENT = False
    with caplog.at_level(logging.WARNING, logger="controlplane.observations.security"):
        remote = Client(REMOTE_ADDR="192.0.2.7")
        refused = remote.get(LOGIN)
    assert refused.status_code == 403
    assert refused.content.decode() == NO_SECRET_KEY + "\n"
    said = [r.getMessage() for r in caplog.records if r.name.endswith("observations.security")]
    assert said == [NO_SECRET_KEY]  # once, at start
    assert remote.get("/healthz").status_code == 200  # the probes answer any client
    for loopback in ("127.0.0.1", "::1"):
        assert Client(REMOTE_ADDR=loopback).get(LOGIN).status_code == 200, loopback


def test_with_a_secret_key_the_dashboard_answers_any_client(settings):
    settings.SECRET_KEY_FROM_ENVIRONMENT = True
    assert Client(REMOTE_ADDR="192.0.2.7").get(LOGIN).status_code == 200
