"""Fairness across instances: after a fetch to an instance timed out, one fetch at a time
probes it and the other CRs stop before fetching, so a hanging server cannot fill every worker
slot (issue 7 item 3; S4.1.6 pacing is per instance)."""

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
    spread,
    unresponsive_wait,
)
from workers.queue.memory import MemoryQueue

UID = "instance-uid"
ORG = "acme"


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
        note_answer(store, UID, None)


@pytest.mark.parametrize("detail", ["timeout", "connect timeout"])
def test_after_a_timeout_one_probe_at_a_time(store, clock, detail):
    note_answer(store, UID, detail)  # the run that timed out was the first probe
    assert unresponsive_wait(store, UID) == pytest.approx(PROBE_INTERVAL_SECONDS)
    clock.now += PROBE_INTERVAL_SECONDS / 2
    assert unresponsive_wait(store, UID) == pytest.approx(PROBE_INTERVAL_SECONDS / 2)
    clock.now += PROBE_INTERVAL_SECONDS / 2
    assert unresponsive_wait(store, UID) == 0  # the next probe
    assert unresponsive_wait(store, UID) > 0


def test_an_answer_to_the_probe_lets_every_cr_fetch_again(store):
    note_answer(store, UID, "timeout")
    assert unresponsive_wait(store, UID) > 0
    note_answer(store, UID, None)  # a probe got an answer (any status)
    assert [unresponsive_wait(store, UID) for _ in range(3)] == [0, 0, 0]


@pytest.mark.parametrize("detail", ["connection failed", "TLS handshake failed", "status 503"])
def test_fast_failures_do_not_hold_an_instance_back(store, detail):
    """They hold no slot for long: the per-CR backoff (S4.11) is enough."""
    note_answer(store, UID, detail)
    assert [unresponsive_wait(store, UID) for _ in range(3)] == [0, 0, 0]


def test_the_mark_is_per_instance(store):
    note_answer(store, "slow", "timeout")
    assert unresponsive_wait(store, "slow") > 0
    assert unresponsive_wait(store, "healthy") == 0


def test_a_quiet_instance_is_trusted_again_after_ten_minutes(store, clock):
    note_answer(store, UID, "timeout")
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
    note_answer(store, UID, "timeout")  # unresponsive: this run was its probe
    store.note_reads = 0
    gate = instance_gate(store, UID, ORG, clock.now)
    assert gate.paused == 0 and gate.probe_in == pytest.approx(PROBE_INTERVAL_SECONDS)
    assert store.note_reads == 1


def test_a_paused_instance_waits_its_pause_and_takes_no_probe_token(store, clock):
    note_answer(store, UID, "timeout")
    clock.now += PROBE_INTERVAL_SECONDS  # a probe token is due again
    pause_instance(store, pause_scope(UID, ORG), 20.0, clock.now)  # and a 429 paused the instance
    assert instance_gate(store, UID, ORG, clock.now) == InstanceGate(pytest.approx(20.0), 0.0)
    clock.now += 20.0
    assert instance_gate(store, UID, ORG, clock.now) == InstanceGate(0.0, 0.0)  # the probe token
    assert instance_gate(store, UID, ORG, clock.now).probe_in > 0  # was still there, and is taken


def test_notes_already_read_are_not_read_again(clock):
    store = NoteReadCountingQueue(clock)
    gate = instance_gate(store, UID, ORG, clock.now, (repr(clock.now + 5.0), None))
    assert gate == InstanceGate(pytest.approx(5.0), 0.0) and store.note_reads == 0
