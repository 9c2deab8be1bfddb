"""Fairness across instances (S4.1.9 rev 4): one request's timeout is its own CR's failure;
after requests for two different requesters (credential or org) timed out with no answer in
between, one fetch at a time probes the instance and the other CRs stop before fetching, so a
hanging server cannot fill every worker slot, and one hanging credential cannot stop its
neighbours."""

from __future__ import annotations

import pytest

from tests.support.counting_store import NoteReadCountingQueue
from workers.engine.pacing import (
    PROBE_INTERVAL_SECONDS,
    InstanceGate,
    instance_gate,
    note_answer,
    pause_instance,
    pause_scope,
    requester,
    resumed,
    spread,
    unresponsive_wait,
)
from workers.queue.memory import MemoryQueue

UID = "instance-uid"
ORG = "acme"
ALICE, BOB = requester(ORG, "team-a/alice"), requester(ORG, "team-b/bob")


def _time_out_twice(store, uid=UID, detail="timeout"):
    """Two requesters' requests time out with no answer in between: the instance is judged."""
    note_answer(store, uid, detail, ALICE)
    note_answer(store, uid, detail, BOB)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> MemoryQueue:
    return MemoryQueue(clock=clock)


def test_an_answering_instance_is_never_held_back(store):
    for _ in range(5):
        assert unresponsive_wait(store, UID) == 0
        note_answer(store, UID, None, ALICE)


@pytest.mark.parametrize("detail", ["timeout", "connect timeout"])
def test_after_a_timeout_one_probe_at_a_time(store, clock, detail):
    _time_out_twice(store, detail=detail)  # the run that timed out last was the first probe
    assert unresponsive_wait(store, UID) == pytest.approx(PROBE_INTERVAL_SECONDS)
    clock.now += PROBE_INTERVAL_SECONDS / 2
    assert unresponsive_wait(store, UID) == pytest.approx(PROBE_INTERVAL_SECONDS / 2)
    clock.now += PROBE_INTERVAL_SECONDS / 2
    assert unresponsive_wait(store, UID) == 0  # the next probe
    assert unresponsive_wait(store, UID) > 0


def test_an_answer_to_the_probe_lets_every_cr_fetch_again(store):
    _time_out_twice(store)
    assert unresponsive_wait(store, UID) > 0
    note_answer(store, UID, None, ALICE)  # a probe got an answer (any status)
    assert [unresponsive_wait(store, UID) for _ in range(3)] == [0, 0, 0]


@pytest.mark.parametrize("detail", ["connection failed", "TLS handshake failed", "status 503"])
def test_fast_failures_do_not_hold_an_instance_back(store, detail):
    """They hold no slot for long: the per-CR backoff (S4.11) is enough."""
    note_answer(store, UID, detail, ALICE)
    note_answer(store, UID, detail, BOB)
    assert [unresponsive_wait(store, UID) for _ in range(3)] == [0, 0, 0]


def test_the_mark_is_per_instance(store):
    _time_out_twice(store, "slow")
    assert unresponsive_wait(store, "slow") > 0
    assert unresponsive_wait(store, "healthy") == 0


def test_a_quiet_instance_is_trusted_again_after_ten_minutes(store, clock):
    _time_out_twice(store)
    clock.now += 601
    assert [unresponsive_wait(store, UID) for _ in range(2)] == [0, 0]


def test_stood_off_crs_wake_spread_out():
    delays = {spread(30.0, f"cr-{i}") for i in range(50)}
    assert all(30.0 <= d < 60.0 for d in delays)
    assert len(delays) > 40  # not all at once
    assert spread(30.0, "cr-1") == spread(30.0, "cr-1")  # fixed per CR


def test_the_gate_reads_the_pause_and_the_unresponsive_mark_in_one_round_trip(clock):
    store = NoteReadCountingQueue(clock)
    assert instance_gate(store, UID, ORG, clock.now) == InstanceGate(0.0, 0.0)
    assert store.note_reads == 1
    _time_out_twice(store)  # unresponsive: the second run was its probe
    store.note_reads = 0
    gate = instance_gate(store, UID, ORG, clock.now)
    assert gate.paused == 0 and gate.probe_in == pytest.approx(PROBE_INTERVAL_SECONDS)
    assert store.note_reads == 1


def test_a_paused_instance_waits_its_pause_and_takes_no_probe_token(store, clock):
    _time_out_twice(store)
    clock.now += PROBE_INTERVAL_SECONDS  # a probe token is due again
    pause_instance(store, pause_scope(UID, ORG), 20.0, clock.now)  # and a 429 paused the instance
    assert instance_gate(store, UID, ORG, clock.now) == InstanceGate(pytest.approx(20.0), 0.0)
    clock.now += 20.0
    first = InstanceGate(0.0, 0.0, resuming=True)  # the first request after it, and the probe
    assert instance_gate(store, UID, ORG, clock.now) == first
    resumed(store, pause_scope(UID, ORG))  # its answer ended the pause's end
    assert instance_gate(store, UID, ORG, clock.now).probe_in > 0  # the probe token is taken


def test_notes_already_read_are_not_read_again(clock):
    store = NoteReadCountingQueue(clock)
    gate = instance_gate(store, UID, ORG, clock.now, (repr(clock.now + 5.0), None, None))
    assert gate == InstanceGate(pytest.approx(5.0), 0.0) and store.note_reads == 0


def test_one_credential_timing_out_again_and_again_holds_no_one_else_back(store):
    """S4.1.9: the hanging credential's own CR backs off; the instance is not judged."""
    for _ in range(5):
        note_answer(store, UID, "timeout", ALICE)
    assert [unresponsive_wait(store, UID) for _ in range(3)] == [0, 0, 0]


def test_the_same_credential_in_another_org_is_another_requester(store):
    note_answer(store, UID, "timeout", requester(ORG, "team-a/alice"))
    assert unresponsive_wait(store, UID) == 0
    note_answer(store, UID, "timeout", requester("other-org", "team-a/alice"))
    assert unresponsive_wait(store, UID) > 0  # judged; that run was the probe


def test_an_answer_between_two_timeouts_means_the_instance_answers(store):
    note_answer(store, UID, "timeout", ALICE)
    note_answer(store, UID, None, BOB)  # the instance answered someone
    note_answer(store, UID, "timeout", BOB)
    assert [unresponsive_wait(store, UID) for _ in range(3)] == [0, 0, 0]


def test_the_store_keeps_digests_not_credential_names(store):
    note_answer(store, UID, "timeout", requester(ORG, "team-a/alice-credential"))
    kept = store.get_note(f"instance-timeouts:{UID}") or ""
    assert kept and "alice" not in kept and "team-a" not in kept
