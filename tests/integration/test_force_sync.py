"""``hikyo.dev/force-sync`` through the running operator (issue 9 item 1 acceptance), against
the real apiserver, devserver and, in scaled mode, Redis and Celery workers.

Each test has one HikyoSecret in its own devserver scope, so the devserver's request log for
the scope is that CR's fetches. The annotation is set with the real kubectl, as a user would.
"Nothing more happened" is always asserted after a positive observation: a later spec change
(``resyncInterval``, which keeps the cursor, S4.3.3) that the operator is seen to handle, so
every earlier watch event has been routed by then.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis

from tests.support.operator_harness import Operator, populate, ready_count
from tests.support.processes import Service, free_port
from tests.support.waiting import wait_for
from tests.support.world import CANARIES, World
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION

CR = "app-0"  # populate()'s first CR
READY_TIMEOUT = 240.0
HANDLED_TIMEOUT = 180.0


def deliveries(world: World) -> list:
    return [r for r in world.requests() if r.method == "GET" and r.path.endswith("/delivery")]


def cursorless(world: World) -> int:
    return sum(1 for r in deliveries(world) if not r.cursor_present)


def kubectl(binaries, kubeconfig: Path, *args: str) -> str:
    done = subprocess.run(
        [str(binaries.kubectl), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def annotate(binaries, kubeconfig: Path, world: World, *pairs: str) -> None:
    kubectl(
        binaries, kubeconfig, "annotate", "--overwrite", "-n", world.namespace, "hksec", CR, *pairs
    )


def new_value() -> str:
    """`$(date +%s)`, made unique within the session."""
    return f"{int(time.time())}{uuid.uuid4().hex[:4]}"


def handled(world: World, value: str) -> dict | None:
    record = world.status(CR).get("lastForcedSync") or {}
    return record if record.get("value") == value else None


def synced(world: World) -> bool:
    cr = world.cr(CR)
    status = cr.get("status") or {}
    return (
        ready_count(world) == 1
        and status.get("lifecycle") == "Synced"
        and status.get("observedGeneration") == cr["metadata"]["generation"]
    )


def handle_a_spec_change(world: World, resync: str) -> None:
    """The positive observation: a generation the operator is seen to handle, with a fetch
    that presents the cursor (resyncInterval does not invalidate it, S4.3.3)."""
    fetched = len(deliveries(world))
    world.patch_cr(CR, {"resyncInterval": resync})
    generation = world.cr(CR)["metadata"]["generation"]
    wait_for(
        lambda: world.status(CR).get("observedGeneration") == generation,
        timeout=HANDLED_TIMEOUT,
        what=f"generation {generation} handled",
    )
    later = deliveries(world)[fetched:]
    assert later and all(r.cursor_present for r in later), [r.cursor_present for r in later]


def start(operator: Operator, kind: str, name: str) -> Service:
    """A leader or a worker with a metrics port of its own (several processes run here, and
    other test sessions may hold the default :8080)."""
    operator.env["HIKYO_OPERATOR_METRICS_ADDR"] = f"127.0.0.1:{free_port()}"
    if kind == "leader":
        return operator.start_leader(name)
    return operator.start_worker(name)


def _operator(mode: str, request, tmp_path: Path, kubeconfig: Path) -> Operator:
    if mode == "embedded":
        return Operator(tmp_path, kubeconfig, None)
    redis_server = request.getfixturevalue("redis_server")
    redis_server.client().flushall()  # nothing left from an earlier test's operator
    return Operator(tmp_path, kubeconfig, redis_server.url)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["embedded", "scaled"])
def test_a_new_force_sync_value_makes_exactly_one_cursorless_fetch(
    mode, request, world, kubeconfig, binaries, tmp_path
):
    operator = _operator(mode, request, tmp_path, kubeconfig)
    try:
        populate(world, 1)
        start(operator, "leader", "operator")
        if mode == "scaled":
            start(operator, "worker", "w1")
        wait_for(lambda: synced(world), timeout=READY_TIMEOUT, interval=0.5, what="Synced")
        before = cursorless(world)
        target_uid = world.target("app-env-0").uid

        value = new_value()
        annotate(binaries, kubeconfig, world, f"{FORCE_SYNC_ANNOTATION}={value}")
        record = wait_for(
            lambda: handled(world, value),
            timeout=HANDLED_TIMEOUT,
            interval=0.3,
            what="status.lastForcedSync naming the value",
        )
        assert cursorless(world) == before + 1
        assert record["fetched"] is True and record["wroteSecret"] is False  # same content
        assert world.status(CR)["lifecycle"] == "Synced"
        assert world.target("app-env-0").uid == target_uid

        # The same value again: re-applied (a no-op for the apiserver), then beside an
        # unrelated annotation (a MODIFIED event the watch does see).
        annotate(binaries, kubeconfig, world, f"{FORCE_SYNC_ANNOTATION}={value}")
        annotate(binaries, kubeconfig, world, "example.com/note=unrelated")
        handle_a_spec_change(world, "6m")
        assert cursorless(world) == before + 1
        assert handled(world, value)

        # A newer value is a new request: exactly one more.
        second = new_value()
        annotate(binaries, kubeconfig, world, f"{FORCE_SYNC_ANNOTATION}={second}")
        wait_for(lambda: handled(world, second), timeout=HANDLED_TIMEOUT, what="the 2nd value")
        handle_a_spec_change(world, "7m")
        assert cursorless(world) == before + 2
    finally:
        operator.stop()
    assert "Traceback" not in operator.logs()
    for secret in CANARIES | {world.token}:
        assert secret not in json.dumps(world.status(CR))


def _reconcile_messages(url: str, uid: str) -> int:
    """Reconcile tasks for ``uid`` waiting on the broker (kombu's JSON envelope, base64 body)."""
    count = 0
    for raw in redis.Redis.from_url(url).lrange("celery", 0, -1):
        envelope = json.loads(raw)
        if not str((envelope.get("headers") or {}).get("task", "")).startswith("hikyo.reconcile"):
            continue
        if uid in base64.b64decode(envelope["body"]).decode(errors="replace"):
            count += 1
    return count


@pytest.mark.timeout(900)
def test_a_leader_killed_between_annotation_and_handling_still_runs_it_once(
    world, kubeconfig, binaries, redis_server, tmp_path
):
    """Scaled mode, two leader failovers (SIGKILL), exactly one cursor-less fetch per value:

    1. Leader A dies, then the value is set while nobody leads: standby B's initial list finds
       it pending and runs it now, although the store keeps the CR's resync due in minutes.
    2. Leader B routes a value (its task waits on the broker: no worker runs), B dies, standby
       C takes over (its initial list finds the value still pending), then a worker starts.
    """
    redis_server.client().flushall()
    operator = Operator(tmp_path, kubeconfig, redis_server.url)
    try:
        populate(world, 1)
        first = start(operator, "leader", "operator-a")
        wait_for(lambda: "became leader" in first.log(), timeout=60, what="a leader")
        second = start(operator, "leader", "operator-b")
        worker = start(operator, "worker", "w1")
        wait_for(lambda: synced(world), timeout=READY_TIMEOUT, interval=0.5, what="Synced")
        uid = world.cr(CR)["metadata"]["uid"]
        before = cursorless(world)

        first.kill()  # SIGKILL: no Lease release, no goodbye
        value = new_value()
        annotate(binaries, kubeconfig, world, f"{FORCE_SYNC_ANNOTATION}={value}")
        wait_for(
            lambda: handled(world, value),
            timeout=HANDLED_TIMEOUT,
            interval=0.3,
            what="the request made while nobody led handled under B",
        )
        assert "became leader" in second.log()
        handle_a_spec_change(world, "6m")
        assert cursorless(world) == before + 1

        third = start(operator, "leader", "operator-c")
        worker.stop()  # warm shutdown: nothing runs the next request until w2 starts
        assert not worker.alive()
        value = new_value()
        annotate(binaries, kubeconfig, world, f"{FORCE_SYNC_ANNOTATION}={value}")
        wait_for(
            lambda: _reconcile_messages(redis_server.url, uid) > 0,
            timeout=60,
            what="leader B dispatching the request",
        )
        assert handled(world, value) is None
        second.kill()
        wait_for(
            lambda: "became leader" in third.log(),
            timeout=120,
            interval=0.5,
            what="standby C leading",
        )
        assert handled(world, value) is None  # C has listed it, still pending
        start(operator, "worker", "w2")
        wait_for(
            lambda: handled(world, value),
            timeout=HANDLED_TIMEOUT,
            interval=0.3,
            what="the request handled under C",
        )
        handle_a_spec_change(world, "7m")
        assert cursorless(world) == before + 2
        killed = (first, second, worker)
        dead = [s.name for s in operator.services if s not in killed and not s.alive()]
        assert not dead, dead
    finally:
        operator.stop()
    assert "Traceback" not in operator.logs()
