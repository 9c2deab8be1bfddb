"""Injected faults: statuses, 429, proxy 404s, malformed bodies, slowness, redirects."""

from __future__ import annotations

import pytest
import requests

from devserver import MALFORMED_KINDS, TOLERATED_KINDS, Fault
from tests.devserver import s3_4
from tests.devserver.helpers import (
    TOKEN,
    auth,
    fetch,
    report_body,
    start_fetch,
    still_open,
)
from tests.support.waiting import wait_for

NOT_FOUND = b'{"error":{"code":"not_found","message":"not found"}}'


@pytest.mark.parametrize(
    ("status", "code"),
    [
        pytest.param(400, "bad_request", id="400"),
        pytest.param(403, "forbidden", id="403"),
        pytest.param(409, "conflict", id="409"),
        pytest.param(500, "internal", id="500"),
        pytest.param(502, "internal", id="502"),
        pytest.param(503, "internal", id="503"),
    ],
)
def test_status_fault_answers_with_a_hikyo_error_body(devserver, http, published, status, code):
    devserver.set_fault(TOKEN, Fault.status(status))

    response = fetch(http, devserver, published)

    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_status_fault_code_can_be_overridden_for_other_409s(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.status(409, code="limit_exceeded"))

    assert fetch(http, devserver, published).json()["error"]["code"] == "limit_exceeded"


def test_fault_with_times_applies_that_many_requests(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.status(503), times=2)

    statuses = [fetch(http, devserver, published).status_code for _ in range(3)]

    assert statuses == [503, 503, 200]


def test_fault_without_times_lasts_until_cleared(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.status(503))
    assert [fetch(http, devserver, published).status_code for _ in range(3)] == [503] * 3

    devserver.clear_fault(TOKEN)

    assert fetch(http, devserver, published).status_code == 200


def test_fault_applies_only_to_its_token(devserver, http, published):
    devserver.add_credential("hik_other", *published.args())
    devserver.set_fault(TOKEN, Fault.status(503))

    assert fetch(http, devserver, published, token="hik_other").status_code == 200


def test_global_fault_applies_to_every_request_and_token_faults_win(devserver, http, published):
    devserver.add_credential("hik_other", *published.args())
    devserver.set_fault(None, Fault.status(502))
    devserver.set_fault(TOKEN, Fault.status(503))

    assert fetch(http, devserver, published, token="hik_other").status_code == 502
    assert fetch(http, devserver, published, token=None).status_code == 502
    assert fetch(http, devserver, published).status_code == 503


def test_route_limited_fault_spares_the_other_endpoint(devserver, http, published):
    devserver.set_grants(TOKEN, {"read", "report-delivery-status"})
    devserver.set_fault(TOKEN, Fault.status(503), route="status")

    assert fetch(http, devserver, published).status_code == 200
    report = http.post(
        devserver.status_url(*published.args()), json=report_body(), headers=auth(), timeout=10
    )
    assert report.status_code == 503


@pytest.mark.parametrize("retry_after", ["2", "120"])
def test_rate_limited_carries_retry_after(devserver, http, published, retry_after):
    devserver.set_fault(TOKEN, Fault.rate_limited(retry_after=retry_after))

    response = fetch(http, devserver, published)

    assert response.status_code == 429
    assert response.headers["Retry-After"] == retry_after
    assert response.json()["error"]["code"] == "too_many_requests"


def test_rate_limited_without_retry_after(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.rate_limited(retry_after=None))

    assert "Retry-After" not in fetch(http, devserver, published).headers


def test_unauthorized_fault(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.unauthorized())

    response = fetch(http, devserver, published)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


def test_not_found_fault_with_hikyo_body_is_authoritative(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.not_found())

    response = fetch(http, devserver, published)

    assert response.status_code == 404
    assert response.content == NOT_FOUND


def test_not_found_fault_without_hikyo_body_looks_like_a_proxy(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.not_found(hikyo_body=False))

    response = fetch(http, devserver, published)

    assert response.status_code == 404
    assert response.headers["Content-Type"] == "text/html"
    assert b"<html>" in response.content


def test_slow_fault_delays_only_its_own_requests(devserver, http, published):
    devserver.add_credential("hik_other", *published.args())
    devserver.set_fault(TOKEN, Fault.slow(600), times=1)

    held = start_fetch(devserver, published)
    try:
        wait_for(lambda: devserver.requests, what="the slow request to reach the server")
        assert fetch(http, devserver, published, token="hik_other").status_code == 200
        assert still_open(held.sock)  # the other token was answered while this one is held
    finally:
        held.close()


def test_slow_fault_still_answers(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.slow(3))

    held = start_fetch(devserver, published)
    try:
        wait_for(lambda: devserver.requests, what="the slow request to reach the server")
        assert still_open(held.sock)  # received, not yet answered: the fault holds it
        response = held.getresponse()  # then the normal answer
        assert response.status == 200
        assert b"DB_PASSWORD" in response.read()  # the delivery, keys and all
    finally:
        held.close()


def test_disconnect_fault_is_a_transport_error(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.disconnect(), times=1)

    with pytest.raises(requests.ConnectionError):
        fetch(http, devserver, published)
    assert fetch(http, devserver, published).status_code == 200


@pytest.mark.parametrize("status", [302, 307])
def test_redirect_points_at_the_second_origin_with_path_and_query(
    devserver, http, published, status
):
    devserver.set_fault(TOKEN, Fault.redirect(status=status))

    response = fetch(http, devserver, published, projection="full", cursor="c1.abc")

    assert response.status_code == status
    location = response.headers["Location"]
    assert location.startswith(devserver.second_origin_url + "/api/v1/orgs/")
    assert location.endswith("/delivery?projection=full&cursor=c1.abc")


def test_client_that_follows_a_redirect_reaches_the_second_origin_without_its_bearer(
    devserver, http, published
):
    devserver.set_fault(TOKEN, Fault.redirect(status=307))

    response = http.get(devserver.delivery_url(*published.args()), headers=auth(), timeout=10)

    assert response.status_code == 401  # requests drops Authorization across origins
    main, second = devserver.requests
    assert (main.origin, main.authorization_present) == ("main", True)
    assert (second.origin, second.authorization_present) == ("second", False)
    assert second.path == main.path


def test_second_origin_serves_the_same_api(devserver, http, published):
    url = (
        devserver.second_origin_url
        + devserver.delivery_url(*published.args())[len(devserver.url) :]
    )

    response = http.get(url, headers=auth(), timeout=10)

    assert response.status_code == 200
    assert devserver.requests[-1].origin == "second"


def test_faults_apply_on_the_main_origin_only(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.status(503))
    url = (
        devserver.second_origin_url
        + devserver.delivery_url(*published.args())[len(devserver.url) :]
    )

    assert http.get(url, headers=auth(), timeout=10).status_code == 200


# -- S3.4 bodies ---------------------------------------------------------------------------


def test_normal_delivery_passes_the_reference_decoder(devserver, http, published):
    devserver.pin(TOKEN, 1)
    devserver.set_expiry(TOKEN, None)

    body = s3_4.decode(fetch(http, devserver, published).content)

    assert body["capabilities_set"] == {"status-report"}


@pytest.mark.parametrize("kind", MALFORMED_KINDS)
def test_every_malformed_kind_breaks_s3_4(devserver, http, published, kind):
    devserver.set_fault(TOKEN, Fault.malformed(kind))

    response = fetch(http, devserver, published, cursor="c1.whatever")

    assert response.status_code == 200
    with pytest.raises(s3_4.Invalid):
        s3_4.decode(response.content)


@pytest.mark.parametrize("kind", MALFORMED_KINDS)
def test_malformed_kinds_work_without_a_usable_credential(devserver, http, scope, kind):
    devserver.set_fault(None, Fault.malformed(kind))

    response = fetch(http, devserver, scope, token=None)

    with pytest.raises(s3_4.Invalid):
        s3_4.decode(response.content)


def test_malformed_kinds_cover_each_required_member():
    for member in ("current", "cursor", "change_token", "schema_revision", "pin_expired", "keys"):
        for prefix in ("missing_", "null_", "wrong_type_"):
            assert prefix + member in MALFORMED_KINDS


def test_oversize_is_just_over_eight_mebibytes(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.malformed("oversize"))

    response = fetch(http, devserver, published)

    assert int(response.headers["Content-Length"]) == 8 * 1024 * 1024 + 1
    assert isinstance(response.json(), dict)  # well-formed: only the size is wrong


def test_chunked_oversize_has_no_content_length(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.malformed("oversize_chunked"))

    response = fetch(http, devserver, published)

    assert "Content-Length" not in response.headers
    assert len(response.content) == 8 * 1024 * 1024 + 1


@pytest.mark.parametrize("kind", TOLERATED_KINDS)
def test_every_tolerated_kind_passes_s3_4(devserver, http, published, kind):
    devserver.set_fault(TOKEN, Fault.tolerated(kind))

    body = s3_4.decode(fetch(http, devserver, published).content)

    assert body["keys"]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        pytest.param("capabilities_not_array", None, id="not-array"),
        pytest.param("capabilities_with_non_strings", None, id="non-strings"),
        pytest.param("capabilities_absent", None, id="absent"),
        pytest.param(
            "capabilities_duplicates_and_unknown",
            {"status-report", "future-capability"},
            id="duplicates",
        ),
    ],
)
def test_tolerated_capability_shapes(devserver, http, published, kind, expected):
    devserver.set_fault(TOKEN, Fault.tolerated(kind))

    assert s3_4.decode(fetch(http, devserver, published).content)["capabilities_set"] == expected


def test_claim_current_answers_current_to_a_cursorless_fetch(devserver, http, published):
    devserver.set_fault(TOKEN, Fault.claim_current())

    body = s3_4.decode(fetch(http, devserver, published).content)

    assert body["current"] is True
    assert body["keys"] == []


def test_unknown_fault_variants_are_refused():
    with pytest.raises(ValueError):
        Fault.malformed("nonsense")
    with pytest.raises(ValueError):
        Fault.tolerated("nonsense")
    with pytest.raises(ValueError):
        Fault.redirect(status=200)


def test_faults_round_trip_through_dicts():
    for fault in (
        Fault.status(503),
        Fault.rate_limited("5"),
        Fault.malformed("value_null"),
        Fault.slow(0.5),
        Fault.redirect(307),
        Fault.not_found(hikyo_body=False),
    ):
        assert Fault.from_dict(fault.to_dict()) == fault


def test_malformed_kinds_include_the_documented_names():
    documented = {
        "not_json", "json_array", "truncated_json", "oversize", "cursor_too_long",
        "negative_schema_revision", "current_true_with_keys", "value_on_unset_presence",
        "value_null", "duplicate_key_names", "empty_key_name", "key_name_too_long",
        "bad_classification", "bad_presence", "bad_credential_expires_at",
        "pinned_revision_zero",
    }  # fmt: skip

    assert documented <= set(MALFORMED_KINDS)
    assert len(set(MALFORMED_KINDS)) == len(MALFORMED_KINDS)
