"""Faults, each followed by full convergence with nothing lost (S4.1.4, S4.1.5, S8.4): what
/readyz and the log say while Redis is down, the Lease handover after a leader kill, and a slow
Hikyo server that must not hold up other HikyoSecrets in embedded mode. The whole fault matrix,
with its table, is tests/integration/test_fault_matrix.py."""

from __future__ import annotations

import pytest
import redis
from kubernetes import client

from devserver import Fault
from tests.support.factories import GROUP, VERSION
from tests.support.operator_harness import (
    Operator,
    populate,
    ready_count,
    readyz,
)
from tests.support.processes import RedisServer, locate_redis_server
from tests.support.waiting import wait_for
from tests.support.world import World
from workers.engine.ports import LEASE_NAME

from .conftest import OPERATOR_NAMESPACE


def _add_crs(world: World, start: int, count: int) -> None:
    for index in range(start, start + count):
        world.create_cr(f"app-{index}", target={"name": f"app-env-{index}"})


@pytest.mark.timeout(600)
def test_redis_restarted_empty_then_everything_converges(world, kubeconfig, tmp_path):
    """S8.4: the leader finds the store lost and re-enqueues every CR; meanwhile /readyz and the
    log say what is wrong; workers reconnect by themselves."""
    server = RedisServer(tmp_path / "redis", locate_redis_server(False)).start()
    operator = Operator(tmp_path, kubeconfig, server.url)
    try:
        populate(world, 10)
        leader = operator.start_leader()
        operator.start_worker("w1")
        wait_for(lambda: ready_count(world) == 10, timeout=180, interval=1, what="10 Ready")

        server.stop()
        wait_for(
            lambda: readyz(operator.http_port)[0] == 503,
            timeout=60,
            what="/readyz to report the store",
        )
        assert "keyed-queue store unreachable" in readyz(operator.http_port)[1]
        _add_crs(world, 10, 5)  # changes while Redis is down

        server.start()  # same port, empty: every queued key and broker message is gone
        wait_for(lambda: readyz(operator.http_port)[0] == 200, timeout=120, what="/readyz ok")
        wait_for(
            lambda: ready_count(world) == 15,
            timeout=300,
            interval=2,
            what="15 Ready after Redis came back empty",
        )
        # The resync timers of the CRs that were already Ready went with the store: the leader
        # notices the missing generation marker and schedules every CR again.
        wait_for(lambda: "store was lost" in leader.log(), timeout=60, what="store-lost notice")
        queued = redis.Redis.from_url(server.url)
        wait_for(
            lambda: sum(1 for _ in queued.scan_iter("*")) > 0,
            timeout=30,
            what="timers back in the store",
        )
    finally:
        operator.stop()
        server.stop()
    assert "dispatching failed" in leader.log()


def _lease_holder(api_client) -> str | None:
    lease = client.CoordinationV1Api(api_client).read_namespaced_lease(
        "hikyo-operator.hikyo.dev", "hikyo-system"
    )
    return lease.spec.holder_identity


@pytest.mark.timeout(600)
def test_leader_killed_a_standby_takes_over_within_the_lease(
    world, kubeconfig, api_client, redis_server, tmp_path
):
    redis.Redis.from_url(redis_server.url).flushall()
    operator = Operator(tmp_path, kubeconfig, redis_server.url)
    try:
        populate(world, 5)
        first = operator.start_leader("operator-a")
        wait_for(lambda: "became leader" in first.log(), timeout=60, what="a leader")
        second = operator.start_leader("operator-b")
        operator.start_worker("w1")
        wait_for(lambda: ready_count(world) == 5, timeout=180, interval=1, what="5 Ready")
        assert "became leader" not in second.log()

        held_by_first = _lease(api_client).spec.holder_identity
        first.kill()
        last_renewal = _lease(api_client).spec  # a dead holder renews no more
        assert last_renewal.holder_identity == held_by_first
        wait_for(
            lambda: "became leader" in second.log(),
            timeout=60,
            interval=0.2,
            what="the standby to take over",
        )
        taken = _lease(api_client).spec
        # The new term's watched reads are published under the Lease's own count of holders,
        # one more than the dead leader's: no Redis counter to lose (workers.queue.published).
        wait_for(
            lambda: _published_term(redis_server.url) == taken.lease_transitions,
            timeout=60,
            interval=0.2,
            what="the watched reads published under the new Lease term",
        )
        _add_crs(world, 5, 5)
        wait_for(lambda: ready_count(world) == 10, timeout=180, interval=1, what="10 Ready")
    finally:
        operator.stop()
    # S4.1.5: the standby took the Lease over, and only once the dead holder's term had run out
    # (times as recorded by the apiserver, not measured by this test).
    assert taken.holder_identity not in ("", held_by_first)
    assert taken.lease_transitions == (last_renewal.lease_transitions or 0) + 1
    waited = (taken.acquire_time - last_renewal.renew_time).total_seconds()
    assert waited >= last_renewal.lease_duration_seconds - 1, waited
    print(f"leader takeover {waited:.1f} s after the last renewal")


def _published_term(redis_url: str) -> int | None:
    """The term in the token of the published HikyoInstances (``<term>.<random>``)."""
    with redis.Redis.from_url(redis_url, socket_timeout=5) as client_:
        token = client_.get("hikyo:view:instances")
    return None if token is None else int(token.decode().split(".", 1)[0])


def _lease(api_client) -> client.V1Lease:
    return client.CoordinationV1Api(api_client).read_namespaced_lease(
        LEASE_NAME, OPERATOR_NAMESPACE
    )


@pytest.mark.timeout(300)
def test_a_slow_hikyo_server_does_not_hold_up_other_hikyosecrets(
    world, kubeconfig, tmp_path, devserver
):
    """One CR's server hangs past the client timeout; the others converge while its first
    run is still in flight (it has written no condition yet)."""
    operator = Operator(tmp_path, kubeconfig, None)
    slow = World(
        world.api_client, devserver, world.engine, world.namespace, credential="slow-credential"
    )
    try:
        populate(world, 6)
        slow.publish(DATABASE_URL="x", LOG_LEVEL="y")
        slow.grant()
        slow.create_instance()
        slow.create_credential()
        slow.create_cr("slow", target={"name": "slow-env"})
        devserver.set_fault(slow.token, Fault.slow(120.0))
        operator.start_leader()
        wait_for(lambda: ready_count(world) >= 6, timeout=60, interval=0.5, what="6 Ready")
        meanwhile = slow.status("slow")
    finally:
        devserver.clear_fault(slow.token)
        operator.stop()
    assert not meanwhile.get("conditions"), meanwhile
    assert world.custom.get_namespaced_custom_object(
        GROUP, VERSION, world.namespace, "hikyosecrets", "app-0"
    )
