"""The operator running by itself: `run_operator` (+ Celery workers on real Redis in scaled
mode), against the real apiserver and the devserver. S4.1, S4.17, S8.4, design.md."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
import redis
from kubernetes import client

from tests.support.factories import GROUP, VERSION
from tests.support.operator_harness import (
    Operator,
    all_current,
    assert_serialized,
    dump_redis,
    populate,
    ready_count,
    write_requests,
)
from tests.support.waiting import wait_for
from tests.support.world import CANARIES, World
from workers.broker_window import window
from workers.runtime import build_queue


@pytest.mark.timeout(900)
def test_scaled_mode_converges_200_hikyosecrets_one_run_per_key(
    world, kubeconfig, redis_server, tmp_path
):
    """200 CRs, run_operator + two Celery workers on real Redis: all Ready, never two runs of
    one CR at once, and the broker holds no values. The leader hands out only the live
    workers' slots plus a spare round (workers/broker_window.py, S4.1.6): none before any
    worker runs, both workers' 2 slots each once they advertise, withdrawn as they stop."""
    redis.Redis.from_url(redis_server.url).flushall()
    operator = Operator(tmp_path, kubeconfig, redis_server.url)
    keyed = build_queue(redis_server.url)
    try:
        populate(world, 200)
        operator.start_leader()
        # Let the leader dispatch before any worker runs, then read the raw broker messages.
        wait_for(
            lambda: redis.Redis.from_url(redis_server.url).llen("celery") >= window(0),
            timeout=60,
            what="tasks on the broker",
        )
        assert keyed.dispatched_count() == window(0)  # the rest wait in the keyed queue
        raw = dump_redis(redis_server.url)
        operator.start_worker("w1")
        operator.start_worker("w2")
        wait_for(lambda: keyed.live_slots() == (2, 4), timeout=300, what="both workers' slots")
        wait_for(
            lambda: ready_count(world) == 200,
            timeout=600,
            interval=2,
            what="200 HikyoSecrets Ready",
        )
    finally:
        operator.stop()
    assert keyed.live_slots() == (0, 0)  # each worker withdrew as it stopped
    for secret in CANARIES | {world.token}:
        assert secret not in raw
    assert f"{world.namespace}" in raw  # the messages are there, carrying references
    runs = operator.runs()
    assert {uid for uid, *_ in runs} >= {
        item["metadata"]["uid"]
        for item in world.custom.list_namespaced_custom_object(
            GROUP, VERSION, world.namespace, "hikyosecrets"
        )["items"]
    }
    assert_serialized(runs)


@pytest.mark.timeout(600)
def test_embedded_mode_converges_and_an_unchanged_resync_writes_nothing(
    world, kubeconfig, api_client, tmp_path
):
    """Embedded mode, no Redis: CRs converge; then a full resync cycle makes zero writes to
    the apiserver (its own /metrics) and one conditional fetch per CR."""
    operator = Operator(tmp_path, kubeconfig, None)
    count = 20
    try:
        populate(world, count, resyncInterval="10s")
        operator.start_leader()
        wait_for(
            lambda: ready_count(world) == count, timeout=300, interval=1, what="HikyoSecrets Ready"
        )
        # Let every CR pass its first resync (Delivered -> Current is one status write).
        wait_for(lambda: all_current(world), timeout=120, interval=1, what="Synced=Current")
        before = write_requests(api_client)
        world.devserver.clear_requests()
        window_start = time.time()
        # Two resync periods (10 s x [0.9, 1.1]), counted by the runs themselves.
        wait_for(
            lambda: _runs_per_cr(operator, window_start, count, at_least=2),
            timeout=120,
            interval=1,
            what="two resyncs of every CR",
        )
        after = write_requests(api_client)
    finally:
        operator.stop()
    fetches = world.requests()
    assert after == before, {k: after.get(k, 0) - before.get(k, 0) for k in after}
    window = [run for run in operator.runs() if run[1] >= window_start]
    per_cr: dict[str, int] = defaultdict(int)
    for uid, _, _, outcome in window:
        assert outcome == "Current"
        per_cr[uid] += 1
    assert len(per_cr) == count and all(2 <= n <= 4 for n in per_cr.values()), per_cr
    # One conditional fetch per run (a run straddling the window start may add one).
    assert all(r.cursor_present for r in fetches)
    assert len(window) <= len(fetches) <= len(window) + 1
    assert "Traceback" not in operator.logs()
    assert_serialized(operator.runs())  # four threads, never two runs of one CR at once


@pytest.mark.timeout(300)
def test_running_operator_rolls_opted_in_workloads_and_sees_a_pause(world, kubeconfig, tmp_path):
    """S6.4 through the running operator, and S4.1.1: pausing a workload (a workload event, no
    fetch) gives Rollout=False/Stalled by a rollout-only evaluation."""
    from .test_rollouts import _deployment

    apps = client.AppsV1Api(world.api_client)
    operator = Operator(tmp_path, kubeconfig, None)
    try:
        populate(world, 1)
        apps.create_namespaced_deployment(world.namespace, _deployment("web", opt_in="app-env-0"))
        operator.start_leader()
        wait_for(lambda: ready_count(world) == 1, timeout=120, what="Ready")
        wait_for(lambda: _template_stamp(apps, world) is not None, timeout=60, what="a stamp")
        first = _template_stamp(apps, world)
        wait_for(
            lambda: _replica_sets(apps, world) == 2,
            timeout=60,
            what="the stamped template's ReplicaSet",
        )

        world.publish(DATABASE_URL="changed", LOG_LEVEL="debug")
        world.patch_cr("app-0", {"mapping": [{"key": "DATABASE_URL"}]})  # a spec change runs now
        wait_for(
            lambda: _template_stamp(apps, world) not in (None, first),
            timeout=120,
            what="a new stamp after the content changed",
        )
        wait_for(
            lambda: _replica_sets(apps, world) == 3,
            timeout=60,
            what="one more ReplicaSet from the deployment controller",
        )

        fetches = len(world.requests())
        apps.patch_namespaced_deployment("web", world.namespace, {"spec": {"paused": True}})
        wait_for(
            lambda: world.conditions("app-0").get("Rollout") == ("False", "Stalled"),
            timeout=60,
            what="Rollout=False/Stalled",
        )
        assert "Deployment/web" in world.message("Rollout", "app-0")
        assert world.conditions("app-0")["Ready"] == ("True", "Reconciled")
        assert len(world.requests()) == fetches  # the workload event fetched nothing
    finally:
        operator.stop()


def _template_stamp(apps, world) -> str | None:
    deployment = apps.read_namespaced_deployment("web", world.namespace)
    return (deployment.spec.template.metadata.annotations or {}).get("stamp.hikyo.dev/app-env-0")


def _replica_sets(apps, world) -> int:
    return len(apps.list_namespaced_replica_set(world.namespace).items)


@pytest.mark.timeout(300)
def test_namespace_scoping_leaves_unlisted_namespaces_alone(
    world, api_client, kubeconfig, tmp_path
):
    """S8.1: HIKYO_OPERATOR_NAMESPACES is the watch list; a CR elsewhere is never reconciled."""
    other = f"{world.namespace}-x"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    outside = World(
        api_client,
        world.devserver,
        world.engine,
        other,
        org=world.org,
        project=world.project,
        environment=world.environment,
        instance=world.instance,
        token=world.token,
    )
    operator = Operator(tmp_path, kubeconfig, None)
    operator.env["HIKYO_OPERATOR_NAMESPACES"] = f"{world.namespace}, hikyo-system"
    try:
        populate(world, 2, resyncInterval="10s")
        outside.create_credential()
        outside.create_cr("elsewhere")
        operator.start_leader()
        wait_for(lambda: ready_count(world) == 2, timeout=120, what="listed namespace Ready")
        # First syncs run before periodic resyncs (S4.1.3): once every listed CR has resynced,
        # a wrongly scoped operator would long since have made the other CR's first sync.
        wait_for(
            lambda: _runs_per_cr(operator, 0.0, 2, at_least=2),
            timeout=120,
            interval=1,
            what="a resync of every listed CR",
        )
        assert outside.status("elsewhere") == {}
        assert outside.target() is None
    finally:
        operator.stop()
        core.delete_namespace(other)


def _runs_per_cr(operator: Operator, since: float, count: int, *, at_least: int) -> bool:
    """True once ``count`` CRs have each finished ``at_least`` runs that started at ``since``
    or later."""
    per_cr: dict[str, int] = defaultdict(int)
    for uid, started, _, _ in operator.runs():
        if started >= since:
            per_cr[uid] += 1
    return len(per_cr) >= count and all(n >= at_least for n in per_cr.values())
