"""S4.1.6 rev 3 on the real apiserver and the devserver: a 429 pauses one org of an instance.

Two orgs share one HikyoInstance. The devserver answers 429 (Retry-After 60) to one org's
credential: that org's CRs stop before fetching until the pause ends and then come back in the
order they became due, the CR that drew the 429 last; the other org's CR keeps delivering,
value changes included. Every clock a run reads is the test's, so nothing waits out the pause.
"""

from __future__ import annotations

from dataclasses import replace

from devserver import Fault
from tests.support.world import World, canary
from workers.engine.outcome import Requeue
from workers.queue.memory import MemoryQueue

PAUSE = 60.0


def _fetches(world: World) -> int:
    return len(world.requests())


def test_a_429_pauses_one_org_of_an_instance_and_its_crs_resume_in_due_order(
    world, api_client, devserver
):
    now = [1_000_000.0]
    world.engine = replace(
        world.engine, store=MemoryQueue(clock=lambda: now[0]), wall_seconds=lambda: now[0]
    )
    world.ready()  # org A: "app"
    for name in ("second", "third"):
        world.create_cr(name, target={"name": f"{name}-env"})
        assert world.reconcile(name).outcome.reason in {"Delivered", "FinalizerAdded"}
        if world.results[-1].outcome.reason == "FinalizerAdded":
            assert world.reconcile(name).outcome.reason == "Delivered"
    other = World(
        api_client,
        devserver,
        world.engine,
        world.namespace,
        instance=world.instance,  # the same HikyoInstance, another org
        credential="other-org-credential",
    )
    assert other.org != world.org
    other.publish(DATABASE_URL=canary("value"))
    other.grant()
    other.create_credential()
    other.create_cr("other", target={"name": "other-env"})
    assert other.reconcile("other").outcome.reason in {"Delivered", "FinalizerAdded"}

    devserver.set_fault(world.token, Fault.rate_limited(retry_after=str(int(PAUSE))), times=1)
    drawer = world.reconcile("app", forced_full=True).outcome
    assert drawer.reason == "FetchFailed" and drawer.requeue is Requeue.AFTER
    due = {"app": now[0] + drawer.delay}
    pause_ends = now[0] + PAUSE

    fetched = _fetches(world)
    for name, at in (("second", 10.0), ("third", 30.0)):  # due one after the other
        now[0] = pause_ends - PAUSE + at
        outcome = world.reconcile(name, forced_full=True).outcome
        assert outcome.reason == "InstancePaused" and not outcome.write_status
        due[name] = now[0] + outcome.delay
    assert _fetches(world) == fetched  # nothing went to the instance for the paused org

    # The other org is not paused: it delivers, and a new value reaches its Secret.
    now[0] = pause_ends - PAUSE + 40.0
    changed = other.publish(DATABASE_URL=canary("value"))["DATABASE_URL"]
    assert other.reconcile("other").outcome.reason == "Delivered"
    assert other.target("other-env").data["DATABASE_URL"] == changed.encode()

    # At the pause's end: first due, first back; the CR that drew the 429 last.
    assert sorted(due, key=due.__getitem__) == ["second", "third", "app"], due
    assert min(due.values()) >= pause_ends
    for name in ("second", "third", "app"):
        now[0] = due[name]
        result = world.reconcile(name, forced_full=True).outcome
        assert result.reason == "Delivered", (name, result.reason, result.message)
    assert _fetches(world) == fetched + 3
