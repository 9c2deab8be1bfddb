"""S8.7 served-CRD check: the pure comparison over CRD dicts, and the leader's check loop."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest

from k8s.crd_manifests import load_crd_manifests
from k8s.errors import Forbidden
from workers.engine.crd_check import (
    HIKYOINSTANCES_CRD,
    HIKYOSECRETS_CRD,
    crd_problems,
    missing_protected_names,
    served_crd_problems,
)
from workers.engine.loader_control import PROTECTED_NAMES
from workers.leader.crd_check import CRD_UNCHECKED, ServedCrdCheck

VERSION = "v1alpha1"


def _shipped() -> dict[str, dict[str, Any]]:
    return {crd["metadata"]["name"]: crd for crd in load_crd_manifests()}


def _spec_schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _acknowledgement_rule(crd: dict[str, Any]) -> dict[str, Any]:
    items = _spec_schema(crd)["properties"]["acknowledgedLoaderKeys"]["items"]
    (validation,) = items["x-kubernetes-validations"]
    return validation


def test_the_shipped_crds_pass():
    assert served_crd_problems(_shipped(), VERSION) == []


def test_a_crd_without_spec_all_keys_names_the_field_and_the_crd():
    crds = _shipped()
    del _spec_schema(crds[HIKYOSECRETS_CRD])["properties"]["allKeys"]
    assert served_crd_problems(crds, VERSION) == [
        "served CRD hikyosecrets.hikyo.dev (v1alpha1) lacks spec.allKeys"
    ]


def test_a_crd_without_spec_target_type_names_the_field():
    crds = _shipped()
    del _spec_schema(crds[HIKYOSECRETS_CRD])["properties"]["target"]["properties"]["type"]
    assert served_crd_problems(crds, VERSION) == [
        "served CRD hikyosecrets.hikyo.dev (v1alpha1) lacks spec.target.type"
    ]


def test_a_crd_from_before_s11_names_the_fields_it_would_prune():
    crds = _shipped()
    target = _spec_schema(crds[HIKYOSECRETS_CRD])["properties"]["target"]["properties"]
    for name in ("template", "format", "formatKey"):
        del target[name]
    assert served_crd_problems(crds, VERSION) == [
        f"served CRD hikyosecrets.hikyo.dev (v1alpha1) lacks spec.target.{name}"
        for name in ("template", "format", "formatKey")
    ]


def test_a_crd_whose_conditions_lack_facts_names_the_field_it_would_prune():
    """Without it the apiserver prunes the facts, and S4.17 (which compares them) would write
    the status again on every run."""
    crds = _shipped()
    status = crds[HIKYOSECRETS_CRD]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    del status["properties"]["status"]["properties"]["conditions"]["items"]["properties"]["facts"]
    assert served_crd_problems(crds, VERSION) == [
        "served CRD hikyosecrets.hikyo.dev (v1alpha1) lacks status.conditions[].facts"
    ]


def test_both_missing_fields_are_reported():
    crds = _shipped()
    spec = _spec_schema(crds[HIKYOSECRETS_CRD])["properties"]
    del spec["allKeys"], spec["target"]
    problems = crd_problems(HIKYOSECRETS_CRD, crds[HIKYOSECRETS_CRD], VERSION)
    target_fields = ["type", "template", "format", "formatKey"]  # all went with spec.target
    assert [p.rsplit(" ", 1)[1] for p in problems] == [
        "spec.allKeys",
        *(f"spec.target.{name}" for name in target_fields),
    ]


def test_a_cel_rule_missing_a_protected_name_is_reported():
    crds = _shipped()
    rule = _acknowledgement_rule(crds[HIKYOSECRETS_CRD])
    rule["rule"] = rule["rule"].replace("'NODE_EXTRA_CA_CERTS'", "'NODE_EXTRA_CA'")
    (problem,) = served_crd_problems(crds, VERSION)
    assert "acknowledgedLoaderKeys misses protected names NODE_EXTRA_CA_CERTS" in problem
    assert HIKYOSECRETS_CRD in problem


def test_a_cel_rule_missing_a_prefix_is_reported():
    crds = _shipped()
    rule = _acknowledgement_rule(crds[HIKYOSECRETS_CRD])
    rule["rule"] = rule["rule"].replace(" || self.startsWith('GIT_')", "")
    (problem,) = served_crd_problems(crds, VERSION)
    assert problem.endswith("misses protected names GIT_*")


def test_a_missing_acknowledgement_field_is_reported():
    crds = _shipped()
    del _spec_schema(crds[HIKYOSECRETS_CRD])["properties"]["acknowledgedLoaderKeys"]
    assert served_crd_problems(crds, VERSION) == [
        "served CRD hikyosecrets.hikyo.dev (v1alpha1) lacks spec.acknowledgedLoaderKeys"
    ]


def test_a_rule_on_the_list_itself_counts_too():
    """A restructured CRD may hold the S1.3.7 rule on the array (``self.all(x, ...)``)."""
    names = ", ".join(f'"{n}"' for n in sorted(PROTECTED_NAMES))
    rule = f'self.all(x, x in [{names}] || x.startsWith("LD_") || x.startsWith("GIT_"))'
    assert missing_protected_names([rule]) == []
    assert missing_protected_names(["self.startsWith('PATH')"]) == sorted(
        [n for n in PROTECTED_NAMES if n != "PATH"] + ["GIT_*", "LD_*"]
    )


def test_a_prefix_quoted_as_a_plain_name_does_not_count_as_a_prefix():
    rule = "self in ['LD_', 'GIT_']"
    assert {"LD_*", "GIT_*"} <= set(missing_protected_names([rule]))


def test_missing_crds_and_unserved_versions_are_reported():
    crds = _shipped()
    unserved = copy.deepcopy(crds[HIKYOINSTANCES_CRD])
    unserved["spec"]["versions"][0]["served"] = False
    assert served_crd_problems({HIKYOSECRETS_CRD: None, HIKYOINSTANCES_CRD: unserved}, VERSION) == [
        "CRD hikyosecrets.hikyo.dev is not installed",
        "CRD hikyoinstances.hikyo.dev does not serve version v1alpha1",
    ]
    assert served_crd_problems({}, "v1beta1") == [
        f"CRD {HIKYOSECRETS_CRD} is not installed",
        f"CRD {HIKYOINSTANCES_CRD} is not installed",
    ]


# --- the leader's check (workers/leader/crd_check.py) ---------------------------------------------


class _Reads:
    """Answers the check's reads from a script: a CRD map or an exception per call."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)

    def __call__(self) -> dict[str, Any]:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _broken() -> dict[str, dict[str, Any]]:
    crds = _shipped()
    del _spec_schema(crds[HIKYOSECRETS_CRD])["properties"]["allKeys"]
    return crds


def test_the_check_fails_until_a_first_check_passes():
    check = ServedCrdCheck(_Reads(_shipped()), threading.Event())
    assert check.problem == CRD_UNCHECKED  # nothing may be dispatched before the first check
    assert check.check_once() is None
    assert check.problem is None


def test_a_failing_check_names_the_field_and_clears_once_the_crd_is_fixed():
    check = ServedCrdCheck(_Reads(_broken(), _shipped()), threading.Event())
    problem = check.check_once()
    assert problem == (
        "served-CRD check failed (S8.7): served CRD hikyosecrets.hikyo.dev (v1alpha1) lacks "
        "spec.allKeys"
    )
    assert check.check_once() is None


@pytest.mark.parametrize(
    "before, expected",
    [
        (None, None),  # passed before: a failed read proves nothing, keep passing
        ("broken", "broken"),  # failed before: keep failing
    ],
)
def test_an_unreadable_crd_keeps_the_last_verdict(before, expected):
    check = ServedCrdCheck(
        _Reads(Forbidden("get customresourcedefinitions", 403, "")), threading.Event()
    )
    check.problem = before
    assert check.check_once() == expected


def test_an_unreadable_crd_before_any_check_fails_readiness_with_the_reason():
    error = Forbidden("get customresourcedefinitions hikyosecrets.hikyo.dev", 403, "Forbidden")
    check = ServedCrdCheck(_Reads(error), threading.Event())
    problem = check.check_once()
    assert problem is not None and problem.startswith("served CRDs unreadable (S8.7): ")
