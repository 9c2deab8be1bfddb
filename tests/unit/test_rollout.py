"""S6: the opt-in annotation, patch decisions and stall detection, as pure functions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from k8s.workloads import workload_from
from workers.engine.ports import (
    DAEMON_SET,
    DEPLOYMENT,
    STATEFUL_SET,
    Workload,
    opted_in_targets,
    stamp_annotation,
)
from workers.engine.rollout import (
    STALL_HOLD_SECONDS,
    patches_needed,
    recheck_after,
    rollout_condition,
    stalled,
    unlisted_condition,
)

TARGET = "app-env"
STAMP = "v1:00000000000000000000000000000001"
OTHER = "v1:00000000000000000000000000000002"
T0 = 1_000_000.0


def settled(kind: str = DEPLOYMENT, name: str = "web", **changes) -> Workload:
    """An opted-in workload that carries STAMP and has fully progressed."""
    base = Workload(
        kind=kind,
        name=name,
        uid=f"uid-{name}",
        generation=3,
        targets=frozenset({TARGET}),
        stamps={TARGET: STAMP},
        replicas=2,
        observed_generation=3,
        updated_replicas=2,
        ready_replicas=2,
        desired_number_scheduled=2,
        updated_number_scheduled=2,
    )
    return replace(base, **changes)


# --- S6.1 opt-in ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("app-env", {"app-env"}, id="one"),
        pytest.param(" app-env , db ", {"app-env", "db"}, id="trimmed"),
        pytest.param("app-env,,db,", {"app-env", "db"}, id="empties-ignored"),
        pytest.param(" , ,", set(), id="only-empties"),
        pytest.param("", set(), id="empty"),
        pytest.param("App-Env", {"App-Env"}, id="case-kept"),
    ],
)
def test_opt_in_annotation_is_a_trimmed_comma_list(raw, expected):
    assert opted_in_targets({"hikyo.dev/secrets": raw}) == expected


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param(None, id="no-annotations"),
        pytest.param({"other": "app-env"}, id="other-annotation"),
        pytest.param({"hikyo.dev/secret": "app-env"}, id="near-miss-name"),
    ],
)
def test_without_the_annotation_nothing_is_opted_in(annotations):
    assert opted_in_targets(annotations) == frozenset()


def test_target_names_match_exactly():
    """S6.1: no prefix, case-folding or glob matching."""
    targets = opted_in_targets({"hikyo.dev/secrets": "app-env-2, APP-ENV, app-*"})
    assert TARGET not in targets


def test_stamp_annotation_is_keyed_by_target():
    assert stamp_annotation(TARGET) == "stamp.hikyo.dev/app-env"


# --- workload_from: what a cache may keep (S4.1.1) -----------------------------------------


def test_workload_from_a_deployment_keeps_only_the_allowed_fields():
    obj = {
        "metadata": {
            "name": "web",
            "uid": "u1",
            "generation": 4,
            "annotations": {"hikyo.dev/secrets": "app-env, db", "team": "x"},
        },
        "spec": {
            "replicas": 3,
            "paused": True,
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {
                    "annotations": {
                        "stamp.hikyo.dev/app-env": STAMP,
                        "stamp.hikyo.dev/db": OTHER,
                        "prometheus.io/scrape": "true",
                    }
                },
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
        "status": {
            "observedGeneration": 3,
            "updatedReplicas": 1,
            "unavailableReplicas": 2,
            "conditions": [
                {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"},
            ],
        },
    }
    workload = workload_from(DEPLOYMENT, obj)
    assert workload == Workload(
        kind=DEPLOYMENT,
        name="web",
        uid="u1",
        generation=4,
        targets=frozenset({"app-env", "db"}),
        stamps={"app-env": STAMP, "db": OTHER},
        paused=True,
        replicas=3,
        strategy="Recreate",
        observed_generation=3,
        updated_replicas=1,
        unavailable_replicas=2,
        progress_deadline_exceeded=True,
    )
    assert workload.ref == "Deployment/web"


def test_workload_from_defaults_replicas_to_one_and_reads_update_strategy():
    obj = {
        "metadata": {"name": "db", "annotations": {"hikyo.dev/secrets": TARGET}},
        "spec": {"updateStrategy": {"type": "OnDelete"}},
    }
    workload = workload_from(STATEFUL_SET, obj)
    assert workload is not None
    assert workload.replicas == 1 and workload.strategy == "OnDelete"
    assert workload.stamps == {} and workload.observed_generation == 0


def test_workload_from_reads_daemonset_status():
    obj = {
        "metadata": {"name": "agent", "annotations": {"hikyo.dev/secrets": TARGET}},
        "status": {
            "desiredNumberScheduled": 5,
            "updatedNumberScheduled": 4,
            "numberUnavailable": 1,
        },
    }
    workload = workload_from(DAEMON_SET, obj)
    assert workload is not None
    assert (
        workload.desired_number_scheduled,
        workload.updated_number_scheduled,
        workload.number_unavailable,
    ) == (5, 4, 1)


@pytest.mark.parametrize(
    "annotations",
    [pytest.param(None, id="none"), pytest.param({"hikyo.dev/secrets": " , "}, id="empty-list")],
)
def test_workload_from_drops_workloads_that_did_not_opt_in(annotations):
    obj = {"metadata": {"name": "web", "annotations": annotations}}
    assert workload_from(DEPLOYMENT, obj) is None


def test_a_progress_deadline_that_is_only_progressing_does_not_count():
    obj = {
        "metadata": {"name": "web", "annotations": {"hikyo.dev/secrets": TARGET}},
        "status": {
            "conditions": [
                {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"},
            ]
        },
    }
    workload = workload_from(DEPLOYMENT, obj)
    assert workload is not None and workload.progress_deadline_exceeded is False


# --- S6.4 patch decisions -------------------------------------------------------------------


def test_patch_needed_when_the_stamp_differs_or_is_absent():
    differs = settled(name="a", stamps={TARGET: OTHER})
    absent = settled(name="b", stamps={})
    assert patches_needed([differs, absent], TARGET, STAMP) == [differs, absent]


def test_equal_stamp_needs_no_patch():
    """S6.4: unchanged content (forced full fetch, crash redo) restarts nothing."""
    assert patches_needed([settled()], TARGET, STAMP) == []


def test_workloads_opted_in_for_another_target_are_never_patched():
    other = settled(targets=frozenset({"db"}), stamps={})
    assert patches_needed([other], TARGET, STAMP) == []


def test_a_stamp_for_another_target_does_not_count():
    only_other = settled(stamps={"db": STAMP})
    assert patches_needed([only_other], TARGET, STAMP) == [only_other]


# --- S6.5 stall detection -------------------------------------------------------------------


def test_settled_workloads_are_not_stalled():
    workloads = [settled(kind) for kind in (DEPLOYMENT, STATEFUL_SET, DAEMON_SET)]
    assert stalled(workloads, TARGET, STAMP, {}, T0) == ([], {})


@pytest.mark.parametrize(
    "workload",
    [
        pytest.param(settled(paused=True), id="paused"),
        pytest.param(settled(progress_deadline_exceeded=True), id="progress-deadline-exceeded"),
    ],
)
def test_deployment_paused_or_past_its_deadline_stalls_at_once(workload):
    found, first_seen = stalled([workload], TARGET, STAMP, {}, T0)
    assert found == ["Deployment/web"]
    assert first_seen == {}


HELD = [
    pytest.param(settled(DEPLOYMENT, observed_generation=2), id="deployment-observed-generation"),
    pytest.param(settled(DEPLOYMENT, updated_replicas=1), id="deployment-updated-replicas"),
    pytest.param(settled(DEPLOYMENT, unavailable_replicas=1), id="deployment-unavailable"),
    pytest.param(
        settled(STATEFUL_SET, observed_generation=2), id="statefulset-observed-generation"
    ),
    pytest.param(settled(STATEFUL_SET, updated_replicas=1), id="statefulset-updated-replicas"),
    pytest.param(settled(STATEFUL_SET, ready_replicas=1), id="statefulset-ready-replicas"),
    pytest.param(settled(DAEMON_SET, observed_generation=2), id="daemonset-observed-generation"),
    pytest.param(settled(DAEMON_SET, updated_number_scheduled=1), id="daemonset-updated-number"),
    pytest.param(settled(DAEMON_SET, number_unavailable=1), id="daemonset-unavailable"),
]


@pytest.mark.parametrize("workload", HELD)
def test_held_tests_count_only_after_five_minutes(workload):
    """S6.5: two evaluations at least 5 min apart; the first only records when it was seen."""
    found, first_seen = stalled([workload], TARGET, STAMP, {}, T0)
    assert found == []
    assert first_seen == {workload.ref: T0}

    found, again = stalled([workload], TARGET, STAMP, first_seen, T0 + STALL_HOLD_SECONDS - 1)
    assert found == []
    assert again == {workload.ref: T0}  # the first sighting is kept, not moved

    found, kept = stalled([workload], TARGET, STAMP, again, T0 + STALL_HOLD_SECONDS)
    assert found == [workload.ref]
    assert kept == {workload.ref: T0}


@pytest.mark.parametrize("workload", HELD)
def test_a_held_test_that_clears_restarts_the_clock(workload):
    _, first_seen = stalled([workload], TARGET, STAMP, {}, T0)
    found, cleared = stalled([settled(workload.kind)], TARGET, STAMP, first_seen, T0 + 100)
    assert (found, cleared) == ([], {})
    found, fresh = stalled([workload], TARGET, STAMP, cleared, T0 + STALL_HOLD_SECONDS + 1)
    assert found == []
    assert fresh == {workload.ref: T0 + STALL_HOLD_SECONDS + 1}


def test_replicas_default_of_one_counts_for_a_deployment():
    """S6.5: `spec.replicas` (default 1)."""
    obj = {
        "metadata": {
            "name": "web",
            "generation": 1,
            "annotations": {"hikyo.dev/secrets": TARGET},
        },
        "spec": {"template": {"metadata": {"annotations": {"stamp.hikyo.dev/app-env": STAMP}}}},
        "status": {"observedGeneration": 1, "updatedReplicas": 0},
    }
    workload = workload_from(DEPLOYMENT, obj)
    assert workload is not None
    _, first_seen = stalled([workload], TARGET, STAMP, {}, T0)
    assert first_seen == {"Deployment/web": T0}


def test_statefulset_on_delete_with_old_pods_is_not_progressed():
    """S6.5: updatedReplicas < replicas covers updateStrategy OnDelete."""
    on_delete = settled(STATEFUL_SET, strategy="OnDelete", updated_replicas=0)
    found, _ = stalled([on_delete], TARGET, STAMP, {"StatefulSet/web": T0}, T0 + 600)
    assert found == ["StatefulSet/web"]


def test_only_workloads_carrying_the_current_stamp_are_judged():
    """S6.5: a workload with another stamp was just patched (or failed to be); its clock
    restarts."""
    patched_now = settled(paused=True, stamps={TARGET: OTHER})
    found, first_seen = stalled([patched_now], TARGET, STAMP, {"Deployment/web": T0}, T0 + 600)
    assert (found, first_seen) == ([], {})


def test_workloads_of_other_targets_and_gone_workloads_are_dropped():
    other_target = settled(paused=True, targets=frozenset({"db"}), stamps={"db": STAMP})
    found, first_seen = stalled(
        [other_target], TARGET, STAMP, {"Deployment/web": T0, "DaemonSet/gone": T0}, T0 + 600
    )
    assert (found, first_seen) == ([], {})


def test_paused_and_held_keeps_the_clock_running():
    workload = settled(paused=True, unavailable_replicas=1)
    found, first_seen = stalled([workload], TARGET, STAMP, {}, T0)
    assert found == ["Deployment/web"]
    assert first_seen == {"Deployment/web": T0}


def test_stalled_names_are_sorted_kind_slash_name():
    workloads = [
        settled(STATEFUL_SET, name="db", ready_replicas=0),
        settled(DEPLOYMENT, name="web", paused=True),
        settled(DAEMON_SET, name="agent", number_unavailable=3),
    ]
    seen = {"StatefulSet/db": T0, "DaemonSet/agent": T0}
    found, _ = stalled(workloads, TARGET, STAMP, seen, T0 + STALL_HOLD_SECONDS)
    assert found == ["DaemonSet/agent", "Deployment/web", "StatefulSet/db"]


def test_recheck_after_names_the_earliest_pending_hold():
    first_seen = {"Deployment/a": T0, "Deployment/b": T0 + 100, "Deployment/old": T0 - 900}
    assert recheck_after(first_seen, T0 + 60) == STALL_HOLD_SECONDS - 60
    assert recheck_after({"Deployment/old": T0 - 900}, T0) is None
    assert recheck_after({}, T0) is None


# --- the Rollout condition (S5.1, S5.6) -----------------------------------------------------


def test_no_stalled_workload_removes_the_condition():
    assert rollout_condition([]) is None


def test_stalled_condition_lists_kind_and_name():
    condition = rollout_condition(["Deployment/web", "StatefulSet/db"])
    assert condition is not None
    assert (condition.type, condition.status, condition.reason) == ("Rollout", "False", "Stalled")
    assert condition.message == "not progressed: Deployment/web, StatefulSet/db"


def test_patch_failures_are_named_first():
    condition = rollout_condition(["StatefulSet/db"], ["Deployment/web"])
    assert condition is not None
    assert condition.message == (
        "stamp patch failed for Deployment/web; not progressed: StatefulSet/db"
    )


def test_long_lists_are_cut_after_ten():
    names = [f"Deployment/w{i:02d}" for i in range(12)]
    condition = rollout_condition(names)
    assert condition is not None
    assert condition.message.endswith("Deployment/w09 … and 2 more")


def test_unlisted_workloads_count_as_a_patch_failure():
    condition = unlisted_condition()
    assert (condition.type, condition.status, condition.reason) == ("Rollout", "False", "Stalled")


def test_messages_never_carry_the_stamp():
    condition = rollout_condition(["Deployment/web"], ["Deployment/api"])
    assert condition is not None and "v1:" not in condition.message
