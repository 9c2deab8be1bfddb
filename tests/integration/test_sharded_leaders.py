"""Sharded leaders (S4.1.8, docs/scaling.md) as real processes: run_operator per shard and
shared Celery workers on real Redis, against the real apiserver and the devserver.

The shard count changes from 2 to 3 the way a rolling update of the chart changes it: the new
layout's shard 2 (a Lease nobody held) leads at once beside the old layout, a change lands on
every CR while both layouts schedule it, then the new shards 0 and 1 take their Leases over
from the old leaders as those stop. No two runs of a CR overlap (the run records, across both
workers) and every CR converges on the values published last.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support.fault_matrix import Fleet, assert_logs_clean, converge, stop_keeping_logs
from tests.support.operator_harness import Operator, assert_serialized
from tests.support.waiting import wait_for
from tests.support.world import World
from workers.engine.ports import LEASE_NAME
from workers.shards import shard_of

from .conftest import _remove_hikyosecrets

COUNT = 6  # CRs per namespace (each change adds one)
CONVERGE_TIMEOUT = 300.0
SECRETS_SAMPLE = re.compile(r"^hikyo_operator_secrets\{[^}]*\} ([0-9.e+]+)$", re.MULTILINE)


def _namespaces_over_every_shard() -> list[str]:
    """Three fresh names, one in each shard of 3 and together in both shards of 2."""
    while True:
        names = [f"t-{uuid.uuid4().hex[:10]}" for _ in range(3)]
        if {shard_of(n, 3) for n in names} == {0, 1, 2} and {shard_of(n, 2) for n in names} == {
            0,
            1,
        }:
            return sorted(names, key=lambda n: shard_of(n, 3))


@pytest.fixture
def shard_namespaces(api_client: client.ApiClient, crds) -> Iterator[list[str]]:
    core = client.CoreV1Api(api_client)
    names = _namespaces_over_every_shard()
    for name in names:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield names
    for name in names:
        _remove_hikyosecrets(api_client, name)
        core.delete_namespace(name)


def _secrets_held(operator: Operator, leader: str) -> int:
    """How many HikyoSecrets a shard leader's watch holds (hikyo_operator_secrets, summed)."""
    return int(sum(float(v) for v in SECRETS_SAMPLE.findall(operator.scrape(leader))))


def _in_shard(fleets: list[Fleet], shard: int, shards: int) -> int:
    return sum(len(f.names) for f in fleets if shard_of(f.world.namespace, shards) == shard)


def _shard_env(shard: int, shards: int) -> dict[str, str]:
    return {"HIKYO_OPERATOR_SHARDS": str(shards), "HIKYO_OPERATOR_SHARD": str(shard)}


def _operator_watching(tmp_path, kubeconfig, redis_url: str, namespaces: list[str]) -> Operator:
    """Processes that watch only this test's namespaces: a CR another test left in a namespace
    still being torn down would otherwise count in a leader's hikyo_operator_secrets."""
    operator = Operator(tmp_path, kubeconfig, redis_url)
    operator.env["HIKYO_OPERATOR_NAMESPACES"] = ",".join(namespaces)
    return operator


def _holder(api_client: client.ApiClient, name: str) -> str | None:
    lease = client.CoordinationV1Api(api_client).read_namespaced_lease(name, "hikyo-system")
    return lease.spec.holder_identity


@pytest.mark.timeout(900)
def test_the_shard_count_changes_from_two_to_three_under_load(
    api_client, devserver, engine, kubeconfig, redis_server, tmp_path, shard_namespaces
):
    redis_server.client().flushall()
    operator = _operator_watching(tmp_path, kubeconfig, redis_server.url, shard_namespaces)
    fleets = [
        Fleet(World(api_client, devserver, engine, ns), "app", COUNT) for ns in shard_namespaces
    ]
    try:
        for fleet in fleets:
            fleet.create()
        old = [operator.start_leader(f"old-{k}", **_shard_env(k, 2)) for k in range(2)]
        for leader in old:
            wait_for(lambda leader=leader: "became leader" in leader.log(), 60, what="old leaders")
        operator.start_worker("w1")
        operator.start_worker("w2")
        converge(fleets, CONVERGE_TIMEOUT, "every CR converged under two shards")
        # Each leader holds only its own shard's CRs; shard 1 its own Lease.
        for k in range(2):
            assert _secrets_held(operator, f"old-{k}") == _in_shard(fleets, k, 2)
        shard_1_lease = f"{LEASE_NAME}-shard-1"
        old_holder = _holder(api_client, shard_1_lease)
        assert old_holder and old_holder != _holder(api_client, LEASE_NAME)

        # The rolling update starts: the new layout's shard 2 leads beside the old layout.
        new = {2: operator.start_leader("new-2", **_shard_env(2, 3))}
        wait_for(lambda: "became leader" in new[2].log(), 60, what="new shard 2 leading")
        for fleet in fleets:
            fleet.change("both-layouts")  # runs while two layouts schedule the moved CRs
        for k in (0, 1):
            new[k] = operator.start_leader(f"new-{k}", **_shard_env(k, 3))
        for leader in old:
            leader.stop()  # the old pods end; the new shards 0 and 1 take the Leases over
        for k in (0, 1):
            wait_for(lambda k=k: "became leader" in new[k].log(), 90, what=f"new shard {k}")
        assert _holder(api_client, shard_1_lease) != old_holder
        for fleet in fleets:
            fleet.change("new-layout")
        converge(fleets, CONVERGE_TIMEOUT, "every CR converged under three shards")
        for k in range(3):
            wait_for(
                lambda k=k: _secrets_held(operator, f"new-{k}") == _in_shard(fleets, k, 3),
                timeout=30,
                what=f"new shard {k} holding exactly its own CRs",
            )
    finally:
        logs = stop_keeping_logs(operator)
        for fleet in fleets:
            fleet.release()
    assert_logs_clean(logs)
    assert_serialized(operator.runs())  # S4.1.4 across layouts: no two runs of a CR overlapped


@pytest.mark.timeout(600)
def test_a_shard_leader_killed_pauses_only_its_own_shard(
    api_client, devserver, engine, kubeconfig, redis_server, tmp_path, shard_namespaces
):
    """Shard 0's leader is killed (-9: its Lease is not released) with no standby: a change
    reaches shard 1's CRs and none of shard 0's, since nobody schedules them; a standby of
    shard 0 then takes its Lease over once it expires, and shard 0 catches up."""
    redis_server.client().flushall()
    operator = _operator_watching(tmp_path, kubeconfig, redis_server.url, shard_namespaces)
    fleets = [
        Fleet(World(api_client, devserver, engine, ns), "app", COUNT) for ns in shard_namespaces
    ]
    mine = {k: [f for f in fleets if shard_of(f.world.namespace, 2) == k] for k in range(2)}
    try:
        for fleet in fleets:
            fleet.create()
        leaders = [operator.start_leader(f"shard-{k}", **_shard_env(k, 2)) for k in range(2)]
        operator.start_worker("w1")
        converge(fleets, CONVERGE_TIMEOUT, "every CR converged under two shards")
        for fleet in fleets:
            fleet.record_uids()
        leaders[0].kill()
        for fleet in fleets:
            fleet.change("shard-0-leaderless")
        converge(mine[1], CONVERGE_TIMEOUT, "shard 1 converged while shard 0 has no leader")
        behind = [name for fleet in mine[0] for name in fleet.lagging()]
        assert len(behind) == sum(len(f.names) for f in mine[0])  # none of shard 0's moved
        standby = operator.start_leader("shard-0-standby", **_shard_env(0, 2))
        converge(mine[0], CONVERGE_TIMEOUT, "shard 0 converged under its new leader")
        assert "became leader" in standby.log()
        assert not any(fleet.wrong_deletions() for fleet in fleets)
    finally:
        logs = stop_keeping_logs(operator)
        for fleet in fleets:
            fleet.release()
    logs.pop("shard-0")  # killed: its log may end mid-line
    assert_logs_clean(logs)
    assert_serialized(operator.runs())
