"""The delivery fetch as the devserver serves it (delivery-api.yaml fetchDelivery)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import requests

from devserver import DevServer, new_id
from tests.devserver.helpers import (
    CONFIG_VALUE,
    SECRET_VALUE,
    TOKEN,
    Scope,
    auth,
    client,
    fetch,
    keys_by_name,
)

NOT_FOUND = b'{"error":{"code":"not_found","message":"not found"}}'
ID = re.compile(r"[a-z]{2,8}_[0-9a-fA-F-]{36}")
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")


def test_full_delivery_carries_every_required_member(devserver, http, published):
    response = fetch(http, devserver, published)

    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert body["current"] is False
    assert body["schema_revision"] == 1
    assert body["pin_expired"] is False
    assert body["change_token"].startswith("v1:")
    assert ID.fullmatch(body["credential_id"])
    assert RFC3339.fullmatch(body["issued_at"])
    assert RFC3339.fullmatch(body["snapshot_expires_at"])
    assert body["capabilities"] == ["status-report"]
    assert "credential_expires_at" not in body
    assert "pinned_revision" not in body
    for key in body["keys"]:
        assert key["key_id"].startswith("key_")
        assert ID.fullmatch(key["key_id"])


def test_config_delivered_and_secret_presence_only_without_machine_reveal(
    devserver, http, published
):
    keys = keys_by_name(fetch(http, devserver, published))

    assert keys["APP_MODE"]["value"] == CONFIG_VALUE
    assert keys["DB_PASSWORD"]["presence"] == "set"
    assert "value" not in keys["DB_PASSWORD"]


@pytest.mark.parametrize(
    ("grants", "opt_in", "delivered"),
    [
        pytest.param({"read", "reveal"}, True, True, id="reveal-and-opt-in"),
        pytest.param({"read", "reveal"}, False, False, id="reveal-without-opt-in"),
        pytest.param({"read"}, True, False, id="opt-in-without-reveal"),
        pytest.param({"read", "reveal-history"}, True, False, id="history-is-not-reveal"),
    ],
)
def test_secret_value_needs_reveal_grant_and_project_opt_in(
    devserver, http, published, grants, opt_in, delivered
):
    devserver.set_grants(TOKEN, grants)
    devserver.set_machine_reveal(published.org, published.project, opt_in)

    secret = keys_by_name(fetch(http, devserver, published))["DB_PASSWORD"]

    assert ("value" in secret) is delivered
    if delivered:
        assert secret["value"] == SECRET_VALUE


def test_config_only_projection_omits_secret_keys_entirely(devserver, http, published):
    devserver.set_machine_reveal(published.org, published.project, True)

    keys = keys_by_name(fetch(http, devserver, published, projection="config-only"))

    assert set(keys) == {"APP_MODE"}


def test_catalogue_rules_are_sent_without_value(devserver, http, scope):
    devserver.publish(
        *scope.args(),
        [
            {"name": "EMPTY", "classification": "config", "value": ""},
            {"name": "MUST_HAVE", "classification": "config", "presence": "required"},
            {"name": "NEVER", "classification": "secret", "presence": "forbidden"},
            {"name": "MAYBE", "classification": "config", "presence": "optional"},
        ],
    )
    devserver.add_credential(TOKEN, *scope.args(), grants={"read"})

    keys = keys_by_name(fetch(http, devserver, scope))

    assert keys["EMPTY"]["value"] == ""
    assert {name: key["presence"] for name, key in keys.items() if "value" not in key} == {
        "MUST_HAVE": "required",
        "NEVER": "forbidden",
        "MAYBE": "optional",
    }


def test_each_publish_is_a_new_schema_revision(devserver, http, published):
    devserver.publish(*published.args(), [{"name": "A", "classification": "config", "value": "1"}])

    body = fetch(http, devserver, published).json()

    assert body["schema_revision"] == 2
    assert [key["name"] for key in body["keys"]] == ["A"]


def test_key_ids_are_stable_across_revisions(devserver, http, published):
    before = keys_by_name(fetch(http, devserver, published))["APP_MODE"]["key_id"]
    devserver.publish(
        *published.args(), [{"name": "APP_MODE", "classification": "config", "value": "2"}]
    )

    assert keys_by_name(fetch(http, devserver, published))["APP_MODE"]["key_id"] == before


def test_finite_credential_reports_its_expiry(devserver, http, published):
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    devserver.add_credential("hik_finite", *published.args(), expires_at=expires)

    body = fetch(http, devserver, published, token="hik_finite").json()

    parsed = dt.datetime.fromisoformat(body["credential_expires_at"].replace("Z", "+00:00"))
    assert abs(parsed - expires) < dt.timedelta(seconds=1)


@pytest.mark.parametrize(
    ("capabilities", "expected"),
    [
        pytest.param(None, None, id="absent"),
        pytest.param([], [], id="empty"),
        pytest.param(["status-report", "future"], ["status-report", "future"], id="custom"),
    ],
)
def test_capabilities_member_follows_configuration(
    devserver, http, published, capabilities, expected
):
    devserver.set_capabilities(capabilities)

    body = fetch(http, devserver, published).json()

    assert body.get("capabilities") == expected


def test_acknowledged_keys_are_recorded_not_filtered(devserver, http, published):
    response = fetch(http, devserver, published, acknowledged_keys="APP_MODE,HIKYO_LOADER")

    assert set(keys_by_name(response)) == {"APP_MODE", "DB_PASSWORD"}
    assert devserver.requests[-1].acknowledged_keys == ("APP_MODE", "HIKYO_LOADER")


def test_percent_encoded_comma_in_acknowledged_keys(devserver, http, published):
    url = devserver.delivery_url(*published.args()) + "?acknowledged_keys=A%2CB"

    response = http.get(url, headers=auth(), timeout=10)

    assert response.status_code == 200
    assert devserver.requests[-1].acknowledged_keys == ("A", "B")


def test_path_prefix_is_part_of_the_base_url(scope):
    with DevServer(path_prefix="/hikyo") as server, client(server) as session:
        server.publish(*scope.args(), [{"name": "A", "classification": "config", "value": "1"}])
        server.add_credential(TOKEN, *scope.args())
        assert server.url.endswith("/hikyo")

        served = fetch(session, server, scope)
        unprefixed = session.get(served.url.replace("/hikyo/", "/", 1), headers=auth(), timeout=10)

    assert served.status_code == 200
    assert unprefixed.status_code == 404
    assert unprefixed.content == NOT_FOUND


# -- 401 -----------------------------------------------------------------------------------


def _unauthenticated(response: requests.Response) -> None:
    assert response.status_code == 401
    assert response.json() == {"error": {"code": "unauthenticated", "message": "unauthenticated"}}


def test_missing_authorization_is_unauthenticated(devserver, http, published):
    _unauthenticated(fetch(http, devserver, published, token=None))


def test_unknown_token_is_unauthenticated(devserver, http, published):
    _unauthenticated(fetch(http, devserver, published, token="hik_unknown"))


def test_revoked_token_is_unauthenticated(devserver, http, published):
    devserver.revoke(TOKEN)

    _unauthenticated(fetch(http, devserver, published))


def test_expired_token_is_unauthenticated(devserver, http, published):
    past = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    devserver.add_credential("hik_expired", *published.args(), expires_at=past)

    _unauthenticated(fetch(http, devserver, published, token="hik_expired"))


@pytest.mark.parametrize(
    "header",
    [
        pytest.param("Basic dXNlcjpwYXNz", id="basic"),
        pytest.param("Bearer", id="empty-bearer"),
        pytest.param(f"Bearer {TOKEN} extra", id="trailing-garbage"),
    ],
)
def test_malformed_authorization_is_unauthenticated(devserver, http, published, header):
    response = http.get(
        devserver.delivery_url(*published.args()), headers={"Authorization": header}, timeout=10
    )

    _unauthenticated(response)


# -- uniform 404 ---------------------------------------------------------------------------


def test_credential_without_read_gets_the_uniform_404(devserver, http, published):
    devserver.set_grants(TOKEN, {"reveal", "report-delivery-status"})

    response = fetch(http, devserver, published)

    assert response.status_code == 404
    assert response.content == NOT_FOUND


def test_credential_for_another_environment_gets_the_uniform_404(devserver, http, published):
    other = Scope(published.org, published.project, new_id("env"))
    devserver.publish(*other.args(), [{"name": "A", "classification": "config", "value": "1"}])

    response = fetch(http, devserver, other)

    assert response.status_code == 404
    assert response.content == NOT_FOUND


@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        pytest.param("POST", "", id="post-delivery"),
        pytest.param("PUT", "", id="put-delivery"),
        pytest.param("DELETE", "", id="delete-delivery"),
        pytest.param("GET", "/status", id="get-status"),
        pytest.param("GET", "/", id="trailing-slash"),
        pytest.param("GET", "x", id="unknown-route"),
        pytest.param("PROPFIND", "", id="unknown-method"),
    ],
)
def test_unknown_routes_and_methods_get_the_uniform_404(devserver, http, published, method, suffix):
    url = devserver.delivery_url(*published.args()) + suffix

    response = http.request(method, url, headers=auth(), timeout=10)

    assert response.status_code == 404
    assert response.content == NOT_FOUND


def test_unknown_api_path_gets_the_uniform_404(devserver, http):
    response = http.get(devserver.url + "/api/v1/meta", timeout=10)

    assert response.status_code == 404
    assert response.content == NOT_FOUND


# -- 409 -----------------------------------------------------------------------------------


def test_never_published_environment_is_a_conflict(devserver, http, scope):
    devserver.add_credential(TOKEN, *scope.args())

    response = fetch(http, devserver, scope)

    assert response.status_code == 409
    assert response.json() == {"error": {"code": "conflict", "message": "conflict"}}


def test_unpublished_environment_is_a_conflict_until_published_again(devserver, http, published):
    devserver.unpublish(*published.args())
    assert fetch(http, devserver, published).status_code == 409

    devserver.publish(*published.args(), [{"name": "A", "classification": "config", "value": "1"}])

    assert fetch(http, devserver, published).status_code == 200


# -- 400 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        pytest.param({"cursor": "c" * 129}, "cursor", id="cursor-too-long"),
        pytest.param({"projection": "secrets-only"}, "projection", id="bad-projection"),
        pytest.param({"projection": ""}, "projection", id="empty-projection"),
        pytest.param({"acknowledged_keys": ""}, "acknowledged_keys", id="empty-ack"),
        pytest.param({"acknowledged_keys": "lower"}, "acknowledged_keys", id="bad-ack-name"),
        pytest.param({"acknowledged_keys": "A,,B"}, "acknowledged_keys", id="empty-ack-item"),
        pytest.param({"acknowledged_keys": "9LIVES"}, "acknowledged_keys", id="leading-digit"),
        pytest.param({"acknowledged_keys": "K" * 129}, "acknowledged_keys", id="ack-too-long"),
        pytest.param(
            {"acknowledged_keys": ",".join(f"K{i}" for i in range(65))},
            "acknowledged_keys",
            id="more-than-64",
        ),
    ],
)
def test_bad_query_is_bad_request_before_authentication(devserver, http, published, params, detail):
    response = fetch(http, devserver, published, token=None, **params)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "bad_request"
    assert error["message"] == "bad request"
    assert error["detail"].startswith(detail)


def test_boundary_query_values_are_accepted(devserver, http, published):
    response = fetch(
        http,
        devserver,
        published,
        cursor="c" * 128,
        acknowledged_keys=",".join(f"K{i}" for i in range(64)),
    )

    assert response.status_code == 200
    assert response.json()["current"] is False


def test_duplicate_cursor_parameter_is_bad_request(devserver, http, published):
    url = devserver.delivery_url(*published.args()) + "?cursor=a&cursor=b"

    response = http.get(url, headers=auth(), timeout=10)

    assert response.status_code == 400


def test_strict_ids_refuse_malformed_path_ids(scope):
    with DevServer(strict_ids=True) as server, client(server) as session:
        bad = session.get(server.delivery_url("acme", scope.project, scope.environment), timeout=10)
        good = session.get(server.delivery_url(*scope.args()), timeout=10)

    assert bad.status_code == 400
    assert bad.json()["error"]["detail"] == "path: malformed org ID"
    assert good.status_code == 401


def test_percent_encoded_path_ids_are_decoded(devserver, http):
    odd = Scope("acme corp", "web/app", "prod")
    devserver.publish(*odd.args(), [{"name": "A", "classification": "config", "value": "1"}])
    devserver.add_credential(TOKEN, *odd.args())

    assert fetch(http, devserver, odd).status_code == 200
