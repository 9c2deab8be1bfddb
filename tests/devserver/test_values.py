"""The devserver-only ``GET .../delivery/values`` route: one scope's values as a flat JSON
object, for External Secrets Operator's webhook provider (bench/eso_side_by_side.py). It
follows the delivery's authentication, grant and reveal rules (fetchDelivery)."""

from __future__ import annotations

import logging

import pytest

from devserver import Fault, new_id
from tests.devserver.helpers import CONFIG_VALUE, SECRET_VALUE, TOKEN, auth

NOT_FOUND = b'{"error":{"code":"not_found","message":"not found"}}'


def get_values(http, devserver, scope, headers=None):
    return http.get(
        devserver.values_url(*scope.args()),
        headers=auth() if headers is None else headers,
        allow_redirects=False,
        timeout=10,
    )


def test_values_are_a_flat_object_of_what_the_delivery_carries(devserver, http, published):
    devserver.set_machine_reveal(published.org, published.project, True)

    response = get_values(http, devserver, published)

    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Cache-Control"] == "no-store"
    assert response.json() == {"APP_MODE": CONFIG_VALUE, "DB_PASSWORD": SECRET_VALUE}


def test_secret_without_machine_reveal_is_left_out(devserver, http, published):
    assert get_values(http, devserver, published).json() == {"APP_MODE": CONFIG_VALUE}


def test_catalogue_rules_have_no_value_and_are_left_out(devserver, http, scope):
    devserver.publish(
        *scope.args(),
        [
            {"name": "EMPTY", "classification": "config", "value": ""},
            {"name": "MUST_HAVE", "classification": "config", "presence": "required"},
        ],
    )
    devserver.add_credential(TOKEN, *scope.args(), grants={"read"})

    assert get_values(http, devserver, scope).json() == {"EMPTY": ""}


def test_missing_or_unknown_bearer_is_unauthenticated(devserver, http, published):
    assert get_values(http, devserver, published, headers={}).status_code == 401
    assert get_values(http, devserver, published, headers=auth("hik_nobody")).status_code == 401


def test_credential_without_read_gets_the_uniform_404(devserver, http, published):
    devserver.set_grants(TOKEN, {"reveal"})

    response = get_values(http, devserver, published)

    assert response.status_code == 404
    assert response.content == NOT_FOUND


def test_credential_for_another_scope_gets_the_uniform_404(devserver, http, published):
    other = type(published)(published.org, published.project, new_id("env"))
    devserver.publish(*other.args(), [{"name": "A", "classification": "config", "value": "x"}])

    response = get_values(http, devserver, other)

    assert response.status_code == 404
    assert response.content == NOT_FOUND


def test_unpublished_scope_is_a_conflict(devserver, http, published):
    devserver.unpublish(*published.args())

    assert get_values(http, devserver, published).status_code == 409


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_only_get_is_routed(devserver, http, published, method):
    url = devserver.values_url(*published.args())

    response = http.request(method, url, headers=auth(), timeout=10)

    assert response.status_code == 404
    assert response.content == NOT_FOUND


def test_requests_are_recorded_by_path_and_logs_hold_no_value_or_token(
    devserver, http, published, caplog
):
    devserver.set_machine_reveal(published.org, published.project, True)
    caplog.set_level(logging.DEBUG, logger="devserver")
    get_values(http, devserver, published)
    devserver.set_fault(TOKEN, Fault.status(500), times=1)
    assert get_values(http, devserver, published).status_code == 500

    recorded = [(r.path, r.status) for r in devserver.requests]
    path = devserver.values_url(*published.args()).removeprefix(devserver.url.split("/api/")[0])
    assert recorded == [(path, 200), (path, 500)]
    assert "values" in caplog.text  # requests are logged, by path
    for secret in (TOKEN, CONFIG_VALUE, SECRET_VALUE):
        assert secret not in caplog.text
