"""Durable pins: pinned_revision, pin_expired, collected and refused pins (delivery-api.yaml)."""

from __future__ import annotations

import pytest

from tests.devserver.helpers import SECRET_VALUE, TOKEN, fetch, keys_by_name


@pytest.fixture
def two_revisions(devserver, published):
    devserver.set_machine_reveal(published.org, published.project, True)
    devserver.publish(
        *published.args(),
        [
            {"name": "APP_MODE", "classification": "config", "value": "v2"},
            {"name": "DB_PASSWORD", "classification": "secret", "value": "secret-v2"},
        ],
    )
    return published


def test_pin_serves_that_revision_and_names_it(devserver, http, two_revisions):
    devserver.pin(TOKEN, 1)

    response = fetch(http, devserver, two_revisions)

    body = response.json()
    assert body["pinned_revision"] == 1
    assert body["pin_expired"] is False
    assert body["schema_revision"] == 1
    assert keys_by_name(response)["APP_MODE"]["value"] == "canary-config-4f1c"


def test_expired_pin_is_reported_and_delivery_is_unchanged(devserver, http, two_revisions):
    devserver.pin(TOKEN, 1, expired=True)

    response = fetch(http, devserver, two_revisions)

    assert response.json()["pin_expired"] is True
    assert keys_by_name(response)["APP_MODE"]["value"] == "canary-config-4f1c"


def test_historical_secret_needs_reveal_history(devserver, http, two_revisions):
    devserver.pin(TOKEN, 1)
    assert "value" not in keys_by_name(fetch(http, devserver, two_revisions))["DB_PASSWORD"]

    devserver.set_grants(TOKEN, {"read", "reveal-history"})

    secret = keys_by_name(fetch(http, devserver, two_revisions))["DB_PASSWORD"]
    assert secret["value"] == SECRET_VALUE


def test_pin_on_the_current_revision_uses_reveal(devserver, http, two_revisions):
    devserver.pin(TOKEN, 2)

    secret = keys_by_name(fetch(http, devserver, two_revisions))["DB_PASSWORD"]
    assert secret["value"] == "secret-v2"


def test_collected_pin_is_a_conflict_with_detail(devserver, http, two_revisions):
    devserver.pin(TOKEN, 1, collected=True)

    response = fetch(http, devserver, two_revisions)

    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "conflict"
    assert "collected" in error["detail"]


def test_refused_pin_is_a_bad_request_after_authentication(devserver, http, two_revisions):
    devserver.pin(TOKEN, 1, refused=True)

    response = fetch(http, devserver, two_revisions)

    assert response.status_code == 400
    assert response.json()["error"]["detail"].startswith("pinned delivery refused")


def test_unpin_returns_to_the_current_revision(devserver, http, two_revisions):
    devserver.pin(TOKEN, 1)
    devserver.unpin(TOKEN)

    body = fetch(http, devserver, two_revisions).json()

    assert "pinned_revision" not in body
    assert body["schema_revision"] == 2


def test_pin_to_an_unknown_revision_is_refused(devserver, published):
    with pytest.raises(ValueError):
        devserver.pin(TOKEN, 7)
