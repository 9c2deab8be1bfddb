"""S4.1.9 rev 4 on the real apiserver and the devserver: a request that times out is the failure
of its own CR, never of its neighbours: the same credential's other CRs wait behind one probe
at a time while every other credential fetches as ever; an instance is judged not answering
only when requests for two different credentials time out with no answer in between, and then
its other CRs wait like a pause (no fetch, no write, no event, their conditions as they were)
while one probe at a time tests it, and the first answer ends the wait. Other instances are
never held up."""

from __future__ import annotations

from dataclasses import replace

from devserver import Fault
from tests.support.world import World, canary
from workers.engine.pacing import PROBE_INTERVAL_SECONDS
from workers.queue.memory import MemoryQueue


def test_one_hanging_credential_fails_only_its_own_cr_and_two_judge_the_instance(
    world, api_client, devserver
):
    now = [1_000_000.0]
    engine = replace(world.engine, store=MemoryQueue(clock=lambda: now[0]))
    world.engine = engine
    world.ready()
    alice = World(api_client, devserver, engine, world.namespace, credential="alice-credential")
    alice.publish(DATABASE_URL="x", LOG_LEVEL="y")
    alice.grant()
    alice.create_instance()
    alice.create_credential()
    bob = replace(alice, credential="bob-credential", token=canary("token"), results=[])
    bob.grant()
    bob.create_credential()
    alice.create_cr("alice-1", target={"name": "alice-env-1"})
    for index in (1, 2, 3):
        bob.create_cr(f"bob-{index}", target={"name": f"bob-env-{index}"})
    assert bob.reconcile("bob-3").outcome.reason == "Delivered"  # a condition to keep

    devserver.set_fault(alice.token, Fault.slow(60.0))  # far past the test client's 3 s timeout
    try:
        hung = alice.reconcile("alice-1")
        assert hung.outcome.reason == "FetchFailed" and hung.outcome.fetched
        assert "timeout" in hung.outcome.message
        # One hanging credential says nothing about the instance: bob's CRs fetch as ever.
        assert bob.reconcile("bob-1").outcome.reason == "Delivered"

        devserver.set_fault(bob.token, Fault.slow(60.0))
        # Alice's other requests wait for her probe (nothing written, not a failure).
        held = alice.reconcile("alice-1").outcome
        assert held.reason == "CredentialUnanswered" and not held.fetched
        # bob-1's answer came after alice's timeout: counting starts again. Now requests for
        # two credentials time out with no answer in between: the instance is judged.
        now[0] += PROBE_INTERVAL_SECONDS  # alice's next probe is due
        for hanging, name in ((bob, "bob-2"), (alice, "alice-1")):
            timed_out = hanging.reconcile(name)
            assert timed_out.outcome.reason == "FetchFailed" and timed_out.outcome.fetched

        asked = len(devserver.requests)
        waiting = bob.reconcile("bob-3")
        assert waiting.outcome.reason == "InstanceUnresponsive", waiting.outcome.message
        assert not waiting.outcome.fetched
        assert PROBE_INTERVAL_SECONDS <= waiting.outcome.delay < 2 * PROBE_INTERVAL_SECONDS
        assert len(devserver.requests) == asked  # it stopped before fetching
        assert not waiting.status_written  # its own condition still says what it was
        assert bob.conditions("bob-3")["Synced"] == ("True", "Delivered")
        assert all("timed out" not in m and "timeout" not in m for m in _messages(bob, "bob-3"))

        assert world.reconcile().outcome.reason == "Current"  # the other instance is unaffected
    finally:
        devserver.clear_fault(alice.token)
        devserver.clear_fault(bob.token)
    now[0] += PROBE_INTERVAL_SECONDS  # the next probe is due
    assert bob.reconcile("bob-3").outcome.reason == "Current"  # the probe got an answer
    assert bob.reconcile("bob-2").outcome.reason == "Delivered"  # so everyone fetches again


def _messages(world: World, name: str) -> list[str]:
    return [c.get("message", "") for c in world.status(name).get("conditions") or []]
