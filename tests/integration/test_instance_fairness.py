"""A Hikyo instance that stops answering must not hold up the CRs of other instances: after a
fetch to it timed out, one fetch at a time probes it and its other CRs stop before fetching
(Synced=False/FetchFailed, no slot held) until a probe gets an answer (issue 7 item 3)."""

from __future__ import annotations

from dataclasses import replace

from devserver import Fault
from tests.support.world import World
from workers.engine.pacing import PROBE_INTERVAL_SECONDS
from workers.queue.memory import MemoryQueue


def test_a_hanging_instance_is_probed_one_fetch_at_a_time(world, api_client, devserver):
    now = [1_000_000.0]
    engine = replace(world.engine, store=MemoryQueue(clock=lambda: now[0]))
    world.engine = engine
    world.ready()
    slow = World(api_client, devserver, engine, world.namespace, credential="slow-credential")
    slow.publish(DATABASE_URL="x", LOG_LEVEL="y")
    slow.grant()
    slow.create_instance()
    slow.create_credential()
    for index in (1, 2):
        slow.create_cr(f"slow-{index}", target={"name": f"slow-env-{index}"})
    devserver.set_fault(slow.token, Fault.slow(60.0))  # far past the test client's 3 s timeout
    try:
        first = slow.reconcile("slow-1")
        assert first.outcome.reason == "FetchFailed" and first.outcome.fetched
        assert "timeout" in first.outcome.message

        asked = len(devserver.requests)
        second = slow.reconcile("slow-2")
        assert second.outcome.reason == "FetchFailed" and not second.outcome.fetched
        assert "did not answer in time" in second.outcome.message
        assert PROBE_INTERVAL_SECONDS <= second.outcome.delay < 2 * PROBE_INTERVAL_SECONDS
        assert len(devserver.requests) == asked  # it stopped before fetching
        assert slow.conditions("slow-2")["Synced"] == ("False", "FetchFailed")
        assert ("Warning", "FetchFailed") not in slow.events("slow-2")  # the probe's emits

        assert world.reconcile().outcome.reason == "Current"  # the other instance is unaffected
    finally:
        devserver.clear_fault(slow.token)
    now[0] += PROBE_INTERVAL_SECONDS  # the next probe is due
    assert slow.reconcile("slow-2").outcome.reason == "Delivered"  # the probe got an answer
    assert slow.reconcile("slow-1").outcome.reason == "Delivered"  # so everyone fetches again
