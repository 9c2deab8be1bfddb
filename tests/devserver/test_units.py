"""Plain-data pieces of the devserver: catalogue validation, IDs, cursors, report schema."""

from __future__ import annotations

import datetime as dt

import pytest

from devserver import DevServer, Principal, new_id
from devserver.app import Incoming, QueryInvalid, bearer_token, match_route, parse_delivery_query
from devserver.cursors import CursorKeyring
from devserver.ids import is_valid_id, uuid7
from devserver.reports import ReportInvalid, validate_report
from tests.devserver.helpers import fetch, report_body


@pytest.mark.parametrize(
    "keys",
    [
        pytest.param([{"name": "", "classification": "config", "value": "v"}], id="empty-name"),
        pytest.param(
            [{"name": "K" * 257, "classification": "config", "value": "v"}], id="long-name"
        ),
        pytest.param(
            [{"name": "A", "classification": "public", "value": "v"}], id="classification"
        ),
        pytest.param([{"name": "A", "classification": "config"}], id="set-without-value"),
        pytest.param(
            [{"name": "A", "classification": "config", "presence": "set", "value": None}],
            id="set-with-none",
        ),
        pytest.param(
            [{"name": "A", "classification": "config", "presence": "optional", "value": "v"}],
            id="rule-with-value",
        ),
        pytest.param(
            [{"name": "A", "classification": "config", "presence": "maybe"}], id="presence"
        ),
        pytest.param([{"name": "A", "classification": "config", "value": "v"}] * 2, id="duplicate"),
        pytest.param(
            [{"name": "A", "classification": "config", "value": "v", "extra": 1}],
            id="unknown-member",
        ),
        pytest.param(
            [{"name": "A", "classification": "config", "value": "x" * 65537}], id="value-too-long"
        ),
    ],
)
def test_publish_refuses_catalogues_the_contract_cannot_carry(keys):
    with pytest.raises(ValueError):
        DevServer().publish("o", "p", "e", keys)


def test_credentials_are_validated():
    server = DevServer()
    server.add_credential("hik_a", "o", "p", "e")
    with pytest.raises(ValueError):
        server.add_credential("hik_a", "o", "p", "e")
    with pytest.raises(ValueError):
        server.add_credential("has space", "o", "p", "e")
    with pytest.raises(ValueError):
        server.add_credential("hik_b", "o", "p", "e", grants={"admin"})
    with pytest.raises(ValueError):
        server.add_credential("hik_c", "o", "p", "e", expires_at=dt.datetime(2099, 1, 1))
    with pytest.raises(KeyError):
        server.revoke("hik_unknown")


def test_path_prefix_shape_is_checked():
    for bad in ("hikyo", "/hikyo/", "/a?b"):
        with pytest.raises(ValueError):
            DevServer(path_prefix=bad)


def test_ids_are_prefixed_uuid7():
    value = new_id("org")
    assert is_valid_id(value)
    assert uuid7().version == 7
    with pytest.raises(ValueError):
        new_id("Org")


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        pytest.param(
            "GET",
            "/p/api/v1/orgs/o/projects/r/environments/e/delivery",
            ("delivery", ("o", "r", "e")),
            id="delivery",
        ),
        pytest.param(
            "POST",
            "/p/api/v1/orgs/o/projects/r/environments/e/delivery/status",
            ("status", ("o", "r", "e")),
            id="status",
        ),
        pytest.param(
            "GET",
            "/p/api/v1/orgs/o%20x/projects/r/environments/e/delivery",
            ("delivery", ("o x", "r", "e")),
            id="decoded",
        ),
        pytest.param(
            "GET", "/api/v1/orgs/o/projects/r/environments/e/delivery", None, id="no-prefix"
        ),
        pytest.param(
            "GET", "/p/api/v1/orgs//projects/r/environments/e/delivery", None, id="empty-id"
        ),
        pytest.param(
            "GET", "/p/api/v2/orgs/o/projects/r/environments/e/delivery", None, id="version"
        ),
    ],
)
def test_route_matching(method, path, expected):
    route = match_route(method, path, "/p")

    assert (None if route is None else (route.kind, route.scope)) == expected


def test_query_defaults_and_ignores_unknown_parameters():
    query = parse_delivery_query([("extra", "1")])

    assert (query.cursor, query.projection, query.acknowledged_keys) == (None, "full", ())
    with pytest.raises(QueryInvalid):
        parse_delivery_query([("projection", "full"), ("projection", "full")])


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(["Bearer abc"], "abc", id="bearer"),
        pytest.param(["bearer abc"], "abc", id="scheme-case"),
        pytest.param(["Bearer abc", "Bearer def"], None, id="two-headers"),
        pytest.param(["Bearer a b"], None, id="space"),
        pytest.param([], None, id="absent"),
    ],
)
def test_bearer_parsing(values, expected):
    incoming = Incoming(
        "main",
        "GET",
        "/",
        {"authorization": values[-1]} if values else {},
        authorization_headers=len(values),
    )

    assert bearer_token(incoming) == expected


def test_rotated_keyring_issues_different_cursors_for_the_same_manifest():
    keyring = CursorKeyring()
    before = keyring.change_token([])
    keyring.rotate()

    assert keyring.change_token([]) != before


def test_valid_report_passes_validation():
    assert validate_report(report_body()) == report_body()


def test_integral_floats_are_json_schema_integers():
    assert validate_report(report_body(generation=4.0))["generation"] == 4.0
    with pytest.raises(ReportInvalid):
        validate_report(report_body(generation=4.5))


def test_token_verifier_hook_admits_federated_principals(devserver, http, published):
    """The federation seam (S2.3): tokens the server did not mint go to the verifier."""

    def verifier(token: str) -> Principal | None:
        if token == "broken":
            raise RuntimeError("cannot parse")
        if token != "jwt-for-builder":
            return None
        return Principal("fed_00000000-0000-7000-8000-000000000001", published.args(), {"read"})

    devserver.token_verifier = verifier

    assert fetch(http, devserver, published, token="jwt-for-builder").status_code == 200
    assert fetch(http, devserver, published, token="jwt-other").status_code == 401
    assert fetch(http, devserver, published, token="broken").status_code == 401
    assert devserver.requests[0].credential_id == "fed_00000000-0000-7000-8000-000000000001"
