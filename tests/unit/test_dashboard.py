"""The dashboard's pure parts (controlplane/observations/dashboard.py): the overview's tallies
from grouped rows, what the operator process tells (or "unknown"), and the kubectl line
(issue 10 items 1 and 3; why and what to do are tests/unit/test_dashboard_why.py's)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from controlplane.observations import dashboard
from controlplane.observations.models import TrackedObject


def _row(namespace: str, instance: str, lifecycle: str, ready: bool | None, n: int) -> dict:
    return {
        "namespace": namespace,
        "instance": instance,
        "lifecycle": lifecycle,
        "ready": ready,
        "n": n,
    }


def test_summarize_counts_lifecycles_and_ready_overall_per_instance_and_per_namespace():
    summary = dashboard.summarize(
        [
            _row("a", "prod", "Synced", True, 7),
            _row("a", "prod", "Refused", False, 2),
            _row("b", "prod", "Retained", False, 1),
            _row("b", "", "", None, 3),  # not recorded yet: Unreconciled, instance unknown
            _row("b", "dev", "Scrubbed", False, 1),
            _row("b", "dev", "SomethingNew", False, 1),  # an unknown lifecycle: Unreconciled
        ]
    )
    overall = summary.overall
    assert overall.total == 15 and overall.ready == 7 and overall.not_ready == 8
    assert dict(zip(dashboard.LIFECYCLES, overall.lifecycle_counts, strict=True)) == {
        "Synced": 7,
        "Retained": 1,
        "Refused": 2,
        "Scrubbed": 1,
        "Unreconciled": 4,
    }
    assert overall.ready_ratio == "7/15 (46 %)"
    assert [(t.label, t.key, t.total) for t in summary.per_instance] == [
        ("(none named)", "", 3),
        ("dev", "dev", 2),
        ("prod", "prod", 10),
    ]
    namespaces = [(t.label, t.total, t.ready) for t in summary.per_namespace]
    assert namespaces == [("a", 9, 7), ("b", 6, 0)]


def test_an_empty_store_summarizes_to_zeroes():
    summary = dashboard.summarize([])
    assert summary.overall.total == 0 and summary.overall.ready_ratio == "0/0"
    assert summary.per_instance == [] and summary.per_namespace == []


class _Queue:
    def __init__(self, depth: Any, due: int = 1) -> None:
        self._depth, self._due = depth, due

    def depth(self) -> int:
        if isinstance(self._depth, Exception):
            raise self._depth
        return self._depth

    def due_count(self) -> int:
        return self._due


def _operator(*, leading: bool, scaled: bool = False, depth: Any = 4, holder: str = "other-1"):
    return SimpleNamespace(
        scaled=scaled,
        runtime=SimpleNamespace(identity="me-1", queue=_Queue(depth)),
        is_leader=lambda: leading,
        elector=SimpleNamespace(_observed=(holder, "2026-01-01T00:00:00Z")),
    )


def test_operator_facts_of_the_leader_in_embedded_mode():
    facts = dashboard.operator_facts(_operator(leading=True), scaled_by_settings=False)
    # every CR has its resync timer: what is due now is told apart from what is scheduled
    assert (facts.leader, facts.mode) == ("me-1", "embedded")
    assert facts.queue_depth == "1 due now, 4 scheduled"
    assert facts.this_process == "me-1 (leader)"


def test_a_scaled_standby_names_the_holder_and_reads_the_shared_queue():
    facts = dashboard.operator_facts(_operator(leading=False, scaled=True), scaled_by_settings=True)
    assert (facts.leader, facts.mode, facts.queue_depth) == (
        "other-1",
        "scaled",
        "1 due now, 4 scheduled",
    )


def test_an_embedded_standby_does_not_claim_the_leaders_queue_depth():
    facts = dashboard.operator_facts(_operator(leading=False), scaled_by_settings=False)
    assert facts.queue_depth == "unknown"


@pytest.mark.parametrize("operator", [None, SimpleNamespace()])
def test_whatever_the_process_cannot_tell_is_unknown_never_an_error(operator):
    facts = dashboard.operator_facts(operator, scaled_by_settings=True)
    assert facts.leader == "unknown" and facts.queue_depth == "unknown"
    assert facts.mode == "scaled"


def test_an_unreachable_queue_store_is_unknown():
    operator = _operator(leading=True, scaled=True, depth=ConnectionError("redis down"))
    assert dashboard.operator_facts(operator, scaled_by_settings=True).queue_depth == "unknown"


def test_the_kubectl_line_names_the_object():
    tracked = TrackedObject(namespace="payments", name="env")
    assert dashboard.kubectl_describe(tracked) == "kubectl describe hksec -n payments env"
