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
from workers.engine.pacing import RESUME_CLAIM_SECONDS
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


def test_at_a_pause_end_one_request_goes_first_and_a_429_to_it_re_arms_the_pause(world):
    """S4.1.6 rev 4: the first request after the pause goes alone; the server answers it 429
    again, so the pause is re-armed and the others, still waiting, send nothing; after the
    second pause the first request is answered 200 and the rest follow. One 429 per pause
    end, never a burst."""
    now = [1_000_000.0]
    world.engine = replace(
        world.engine, store=MemoryQueue(clock=lambda: now[0]), wall_seconds=lambda: now[0]
    )
    world.ready()
    for name in ("second", "third"):
        world.create_cr(name, target={"name": f"{name}-env"})
        while world.reconcile(name).outcome.reason == "FinalizerAdded":
            pass
    world.devserver.set_fault(world.token, Fault.rate_limited(retry_after="10"), times=2)
    start = _fetches(world)
    assert world.reconcile("app", forced_full=True).outcome.reason == "FetchFailed"  # a 429

    now[0] += 10.0  # the first pause ends
    first = world.reconcile("second", forced_full=True).outcome
    assert first.reason == "FetchFailed" and first.fetched  # it went first, and drew a 429
    waiting = world.reconcile("third", forced_full=True).outcome
    assert waiting.reason == "InstancePaused" and not waiting.fetched

    now[0] += 10.0  # the re-armed pause ends: again one goes first, answered 200 this time
    assert world.reconcile("third", forced_full=True).outcome.reason == "Delivered"
    for name in ("app", "second"):
        assert world.reconcile(name, forced_full=True).outcome.reason == "Delivered"
    statuses = [r.status for r in world.requests()[start:]]
    assert statuses.count(429) == 2 and len(statuses) == 5, statuses  # one 429 per pause end


def test_at_a_pause_end_the_others_wait_until_the_first_request_is_answered(world):
    """S4.1.6 rev 4: the first request after the pause gets no answer (it times out); until it
    is answered, or a client timeout has passed, the others of that org send nothing."""
    now = [1_000_000.0]
    world.engine = replace(
        world.engine, store=MemoryQueue(clock=lambda: now[0]), wall_seconds=lambda: now[0]
    )
    world.ready()
    world.create_cr("second", target={"name": "second-env"})
    while world.reconcile("second").outcome.reason == "FinalizerAdded":
        pass
    world.devserver.set_fault(world.token, Fault.rate_limited(retry_after="10"), times=1)
    assert world.reconcile("app", forced_full=True).outcome.reason == "FetchFailed"  # a 429
    now[0] += 10.0
    world.devserver.set_fault(world.token, Fault.slow(60.0), times=1)  # past the 3 s timeout
    try:
        hung = world.reconcile("app", forced_full=True).outcome
        assert hung.reason == "FetchFailed" and "timeout" in hung.message
        fetched = _fetches(world)
        waiting = world.reconcile("second", forced_full=True).outcome
        assert waiting.reason == "InstancePaused" and not waiting.write_status
        assert _fetches(world) == fetched  # nothing went while the first was unanswered
    finally:
        world.devserver.clear_fault(world.token)
    now[0] += RESUME_CLAIM_SECONDS  # about one client timeout later another may go first
    assert world.reconcile("second", forced_full=True).outcome.reason == "Delivered"
    assert world.reconcile("app", forced_full=True).outcome.reason == "Delivered"
