"""R7's read (workers.engine.observe): the same-target list is asked for at least as new as the
CR's own R0 read, its resourceVersion (k8s.gateway makes it a NotOlderThan list, issue 13)."""

from __future__ import annotations

from typing import Any

from tests.unit.decide_fixtures import SETTINGS, cr
from workers.engine.observe import _Reader
from workers.engine.observed import Observed
from workers.engine.plan import Read
from workers.queue.memory import MemoryQueue


class ClaimantsCluster:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []

    def list_hikyosecrets_for_target(
        self, namespace: str, target: str, not_older_than: str
    ) -> list[dict[str, Any]]:
        self.asked.append((namespace, target, not_older_than))
        return []


def test_the_same_target_list_is_asked_for_at_the_crs_own_revision():
    the_cr = cr()
    the_cr["metadata"]["resourceVersion"] = "4711"
    cluster = ClaimantsCluster()
    reader = _Reader(cluster, MemoryQueue(), SETTINGS, lambda instance: None)  # type: ignore[arg-type]
    namespace, name = the_cr["metadata"]["namespace"], the_cr["metadata"]["name"]
    observed = reader.read(Observed(namespace, name, cr=the_cr), Read.CLAIMANTS)
    assert observed.claimants == []
    target = the_cr["spec"]["target"]["name"]
    assert cluster.asked == [(namespace, target, "4711")]
