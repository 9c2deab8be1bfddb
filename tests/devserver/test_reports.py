"""The proposed status report endpoint (S7.3; delivery-api.yaml reportDeliveryStatus)."""

from __future__ import annotations

import json

import pytest

from devserver import Fault
from tests.devserver.helpers import TOKEN, Scope, auth, report_body

NOT_FOUND = b'{"error":{"code":"not_found","message":"not found"}}'


@pytest.fixture
def reporter(devserver, published):
    devserver.set_grants(TOKEN, {"read", "report-delivery-status"})
    return published


def _post(http, devserver, scope, body, token: str | None = TOKEN, **kwargs):
    headers = auth(token) if token is not None else {}
    headers.update(kwargs.pop("headers", {}))
    return http.post(
        devserver.status_url(*scope.args()),
        json=body,
        headers=headers,
        allow_redirects=False,
        timeout=10,
        **kwargs,
    )


def test_valid_report_is_accepted_and_kept(devserver, http, reporter):
    response = _post(http, devserver, reporter, report_body())

    assert response.status_code == 204
    assert response.content == b""
    assert devserver.status_reports == [report_body()]


def test_report_needs_the_report_grant(devserver, http, published):
    response = _post(http, devserver, published, report_body())

    assert response.status_code == 404
    assert response.content == NOT_FOUND
    assert devserver.status_reports == []


def test_report_for_another_environment_is_the_uniform_404(devserver, http, reporter):
    other = Scope(reporter.org, reporter.project, "env_other")

    assert _post(http, devserver, other, report_body()).content == NOT_FOUND


@pytest.mark.parametrize("token", [None, "hik_unknown"])
def test_report_without_a_live_credential_is_unauthenticated(devserver, http, reporter, token):
    assert _post(http, devserver, reporter, report_body(), token=token).status_code == 401


def test_report_route_is_absent_without_the_capability(devserver, http, reporter):
    devserver.set_capabilities(None)

    assert _post(http, devserver, reporter, report_body()).content == NOT_FOUND


def test_faults_apply_to_reports(devserver, http, reporter):
    devserver.set_fault(TOKEN, Fault.rate_limited(retry_after="30"), times=1)

    limited = _post(http, devserver, reporter, report_body())
    accepted = _post(http, devserver, reporter, report_body())

    assert (limited.status_code, limited.headers["Retry-After"]) == (429, "30")
    assert accepted.status_code == 204


def _condition(**overrides):
    return {"type": "Ready", "status": "True", "reason": "Reconciled", **overrides}


INVALID = [
    pytest.param({"message": "hi"}, "body", id="extra-member"),
    pytest.param({"cluster_id": None}, "cluster_id", id="null-cluster-id"),
    pytest.param({"cluster_id": "kube-system"}, "cluster_id", id="cluster-id-pattern"),
    pytest.param({"namespace": ""}, "namespace", id="empty-namespace"),
    pytest.param({"namespace": "Payments"}, "namespace", id="namespace-uppercase"),
    pytest.param({"namespace": "a" * 64}, "namespace", id="namespace-too-long"),
    pytest.param({"name": "a." * 127 + "ab"}, "name", id="name-too-long"),
    pytest.param({"name": "-bad"}, "name", id="name-pattern"),
    pytest.param({"uid": "1234"}, "uid", id="uid-pattern"),
    pytest.param({"target": "a.b"}, "target", id="target-is-a-label"),
    pytest.param({"generation": -1}, "generation", id="negative-generation"),
    pytest.param({"generation": "4"}, "generation", id="string-generation"),
    pytest.param({"generation": True}, "generation", id="bool-generation"),
    pytest.param({"observed_generation": 1.5}, "observed_generation", id="fractional"),
    pytest.param({"observed_generation": 2**63}, "observed_generation", id="over-int64"),
    pytest.param({"lifecycle": "Deleted"}, "lifecycle", id="lifecycle-enum"),
    pytest.param({"conditions": {}}, "conditions", id="conditions-object"),
    pytest.param(
        {"conditions": [_condition(type=f"T{'a' * i}") for i in range(17)]},
        "conditions",
        id="more-than-16",
    ),
    pytest.param({"conditions": [_condition(message="x")]}, "conditions[0]", id="cond-extra"),
    pytest.param(
        {"conditions": [{"type": "Ready", "status": "True"}]},
        "conditions[0].reason",
        id="cond-missing-reason",
    ),
    pytest.param(
        {"conditions": [_condition(status="true")]}, "conditions[0].status", id="cond-status-enum"
    ),
    pytest.param(
        {"conditions": [_condition(type="ready")]}, "conditions[0].type", id="cond-type-pattern"
    ),
    pytest.param(
        {"conditions": [_condition(reason="A" * 65)]},
        "conditions[0].reason",
        id="cond-reason-too-long",
    ),
    pytest.param(
        {"conditions": [_condition(), _condition()]}, "conditions[1].type", id="duplicate-types"
    ),
    pytest.param({"conditions": ["Ready"]}, "conditions[0]", id="cond-not-object"),
]


@pytest.mark.parametrize(("overrides", "member"), INVALID)
def test_report_outside_the_closed_schema_is_a_bad_request(
    devserver, http, reporter, overrides, member
):
    response = _post(http, devserver, reporter, report_body(**overrides))

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "bad_request"
    assert error["detail"].startswith(member)
    assert devserver.status_reports == []


@pytest.mark.parametrize(
    "member",
    [
        "cluster_id",
        "namespace",
        "name",
        "uid",
        "target",
        "generation",
        "observed_generation",
        "lifecycle",
        "conditions",
    ],
)
def test_report_missing_a_required_member_is_a_bad_request(devserver, http, reporter, member):
    body = report_body()
    del body[member]

    response = _post(http, devserver, reporter, body)

    assert response.status_code == 400
    assert response.json()["error"]["detail"] == f"body.{member}: required"


@pytest.mark.parametrize(
    ("payload", "content_type"),
    [
        pytest.param(b"not json", "application/json", id="not-json"),
        pytest.param(b"[]", "application/json", id="array"),
        pytest.param(b'{"a":1,"a":2}', "application/json", id="duplicate-members"),
        pytest.param(b'{"generation":NaN}', "application/json", id="nan"),
        pytest.param(json.dumps(report_body()).encode(), "text/plain", id="content-type"),
        pytest.param(b"x" * (64 * 1024 + 1), "application/json", id="too-large"),
    ],
)
def test_unparsable_report_is_a_bad_request(devserver, http, reporter, payload, content_type):
    response = http.post(
        devserver.status_url(*reporter.args()),
        data=payload,
        headers={**auth(), "Content-Type": content_type},
        timeout=10,
    )

    assert response.status_code == 400


def test_bad_report_detail_never_echoes_values(devserver, http, reporter):
    response = _post(http, devserver, reporter, report_body(DB_PASSWORD="canary-secret-9b7e"))

    assert response.status_code == 400
    assert b"DB_PASSWORD" not in response.content
    assert b"canary" not in response.content


def test_boundary_reports_are_accepted(devserver, http, reporter):
    body = report_body(
        name="a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 61,
        namespace="n" * 63,
        generation=2**63 - 1,
        observed_generation=0,
        conditions=[_condition(type=f"T{'a' * i}") for i in range(16)],
    )

    assert _post(http, devserver, reporter, body).status_code == 204
