"""S4.1.6 rev 4: at a 429 pause's end exactly one request (the earliest due) goes first; the
others of that (instance, org) follow only after it was answered with something other than
429; a 429 to it re-arms the pause with the others still waiting; a first request that never
answers lets another go after about one client timeout. Injected clock, real MemoryQueue."""

from __future__ import annotations

import pytest

from tests.support.clocks import FakeClock
from workers.engine.pacing import (
    RESUME_CLAIM_SECONDS,
    RESUME_POLL_SECONDS,
    InstanceGate,
    instance_gate,
    pause_instance,
    pause_scope,
    resumed,
)
from workers.queue.memory import MemoryQueue

UID, ORG, OTHER_ORG = "instance-uid", "acme", "globex"
SCOPE = pause_scope(UID, ORG)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


def test_a_pause_covers_one_org_of_one_instance():
    """Pinned literally: a scope that dropped the org (or the instance) would pause every org
    of the instance, and a test computing its expectation with pause_scope could not tell."""
    assert SCOPE == "instance-uid/acme"
    assert pause_scope(UID, OTHER_ORG) == "instance-uid/globex"
    assert pause_scope("other-uid", ORG) == "other-uid/acme"


@pytest.fixture
def store(clock: FakeClock) -> MemoryQueue:
    return MemoryQueue(clock=clock)


def _gates(store, clock, count: int, org: str = ORG) -> list[InstanceGate]:
    return [instance_gate(store, UID, org, clock(), "requester") for _ in range(count)]


def test_at_a_pause_end_one_request_goes_and_the_others_wait_for_its_answer(store, clock):
    pause_instance(store, SCOPE, 20.0, clock())
    assert all(g.paused == pytest.approx(20.0) for g in _gates(store, clock, 3))
    clock.advance(20.0)
    first, *others = _gates(store, clock, 5)
    assert first == InstanceGate(0.0, 0.0, resuming=True)  # goes; its answer ends the pause
    assert all(g.resume_in == RESUME_POLL_SECONDS and g.paused == 0 for g in others)
    resumed(store, SCOPE)  # answered 200 (or 304, 404, 503: anything but 429)
    assert _gates(store, clock, 5) == [InstanceGate(0.0, 0.0)] * 5


def test_a_429_to_the_first_request_re_arms_the_pause_with_the_others_still_waiting(store, clock):
    pause_instance(store, SCOPE, 5.0, clock())
    clock.advance(5.0)
    assert _gates(store, clock, 1)[0].resuming
    pause_instance(store, SCOPE, 5.0, clock())  # its answer was another 429
    assert all(g.paused == pytest.approx(5.0) for g in _gates(store, clock, 3))
    clock.advance(5.0)  # the new pause's end: again exactly one first
    first, *others = _gates(store, clock, 4)
    assert first.resuming and first.resume_in == 0
    assert all(g.resume_in > 0 for g in others)


def test_a_first_request_that_never_answers_lets_another_go_after_a_client_timeout(store, clock):
    pause_instance(store, SCOPE, 1.0, clock())
    clock.advance(1.0)
    assert _gates(store, clock, 1)[0].resuming
    clock.advance(RESUME_CLAIM_SECONDS / 2)
    assert _gates(store, clock, 1)[0].resume_in > 0
    clock.advance(RESUME_CLAIM_SECONDS / 2)
    assert _gates(store, clock, 1)[0] == InstanceGate(0.0, 0.0, resuming=True)


def test_another_org_of_the_instance_is_not_held_back(store, clock):
    pause_instance(store, SCOPE, 20.0, clock())
    assert _gates(store, clock, 3, OTHER_ORG) == [InstanceGate(0.0, 0.0)] * 3
    clock.advance(20.0)
    assert _gates(store, clock, 1)[0].resuming
    assert _gates(store, clock, 3, OTHER_ORG) == [InstanceGate(0.0, 0.0)] * 3


def test_without_a_pause_nothing_waits_for_a_first_request(store, clock):
    assert _gates(store, clock, 5) == [InstanceGate(0.0, 0.0)] * 5
