"""R7's read (workers.engine.observe): the same-target list is asked for at least as new as the
CR's own R0 read, its resourceVersion (k8s.gateway makes it a NotOlderThan list, issue 13);
a CR that the leader's index holds alone under its target is decided without it (issue 37)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.decide_fixtures import CR_UID, SETTINGS, cr
from workers.engine.observe import _Reader
from workers.engine.observed import Observed
from workers.engine.plan import Read
from workers.queue.memory import MemoryQueue


class ClaimantsCluster:
    def __init__(self, indexed: tuple[str, ...] | None = None) -> None:
        self.asked: list[tuple[str, str, str]] = []
        self.indexed = indexed

    def indexed_claimants(self, namespace: str, target: str) -> tuple[str, ...] | None:
        return self.indexed

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


@pytest.mark.parametrize(
    "delivered, indexed, lists",
    [
        (True, (CR_UID,), False),  # alone in the index: it decides
        (False, (CR_UID,), False),  # a first sync too (the index is in creation order)
        (True, ("uid-other",), True),  # the index does not hold this CR (yet)
        (True, ("uid-0-older", CR_UID), True),  # contested
        (True, (), True),
        (False, None, True),  # no watch vouches
    ],
)
def test_the_leader_s_index_replaces_the_list_only_for_a_sole_indexed_claimant(
    delivered, indexed, lists
):
    status = {"managedSecretUID": "secret-uid"} if delivered else {}
    the_cr = cr(status=status)
    cluster = ClaimantsCluster(indexed)
    reader = _Reader(cluster, MemoryQueue(), SETTINGS, lambda instance: None)  # type: ignore[arg-type]
    namespace, name = the_cr["metadata"]["namespace"], the_cr["metadata"]["name"]
    observed = reader.read(Observed(namespace, name, cr=the_cr), Read.CLAIMANTS)
    assert bool(cluster.asked) is lists
    assert observed.claimants == ([] if lists else [the_cr])
