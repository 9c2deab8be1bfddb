"""Fairness across instances and credentials (S4.1.9 rev 4): one request's timeout is its own
CR's failure. After it, that requester's other requests (the same credential in the same org)
wait behind one probe at a time, while the instance serves every other requester as ever; after
requests for two different requesters timed out with no answer in between, one fetch at a time
probes the whole instance and every other CR stops before fetching. So a hanging server cannot
fill every worker slot, and one hanging credential cannot stop its neighbours."""

from __future__ import annotations

import pytest

from tests.support.clocks import FakeClock
from tests.support.counting_store import NoteReadCountingQueue
from workers.engine.pacing import (
    PROBE_INTERVAL_SECONDS,
    InstanceGate,
    gate_note_names,
    instance_gate,
    note_answer,
    pause_instance,
    pause_scope,
    requester,
    resumed,
    spread,
)
from workers.queue.memory import MemoryQueue

UID = "instance-uid"
ORG = "acme"
ALICE, BOB, CAROL = (requester(ORG, f"team/{name}") for name in ("alice", "bob", "carol"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def store(clock: FakeClock) -> MemoryQueue:
    return MemoryQueue(clock=clock)


def _wait(store, who: str, uid: str = UID) -> float:
    """Seconds until a request for ``who`` may go (0: it goes, taking a probe if one is due)."""
    gate = instance_gate(store, uid, ORG, 1000.0, who)
    return gate.probe_in


def _time_out_twice(store, uid=UID, detail="timeout"):
    """Two requesters' requests time out with no answer in between: the instance is judged."""
    note_answer(store, uid, detail, ALICE)
    note_answer(store, uid, detail, BOB)


def test_an_answering_instance_is_never_held_back(store):
    for _ in range(5):
        assert _wait(store, ALICE) == 0
        note_answer(store, UID, None, ALICE)


@pytest.mark.parametrize("detail", ["timeout", "connect timeout"])
def test_one_timeout_holds_back_only_its_requester_behind_one_probe(store, clock, detail):
    note_answer(store, UID, detail, ALICE)  # the run that timed out was the first probe
    assert [_wait(store, CAROL) for _ in range(3)] == [0, 0, 0]  # the instance answers others
    assert instance_gate(store, UID, ORG, clock(), ALICE).requester_only
    clock.advance(PROBE_INTERVAL_SECONDS)
    assert instance_gate(store, UID, ORG, clock(), ALICE) == InstanceGate(
        0.0, 0.0, requester_only=True
    )  # the next probe for alice
    assert instance_gate(store, UID, ORG, clock(), ALICE).probe_in > 0


def test_two_requesters_timing_out_hold_back_the_whole_instance(store, clock):
    _time_out_twice(store)  # the second run was the instance's probe
    gate = instance_gate(store, UID, ORG, clock(), CAROL)
    assert gate.probe_in == pytest.approx(PROBE_INTERVAL_SECONDS) and not gate.requester_only
    clock.advance(PROBE_INTERVAL_SECONDS)
    assert instance_gate(store, UID, ORG, clock(), CAROL).probe_in == 0  # the next probe
    assert instance_gate(store, UID, ORG, clock(), CAROL).probe_in > 0


def test_an_answer_to_the_probe_lets_every_cr_fetch_again(store, clock):
    _time_out_twice(store)
    assert _wait(store, CAROL) > 0
    note_answer(store, UID, None, BOB)  # a probe for bob got an answer (any status)
    assert [_wait(store, CAROL) for _ in range(3)] == [0, 0, 0]
    assert [_wait(store, BOB) for _ in range(3)] == [0, 0, 0]
    assert _wait(store, ALICE) > 0  # alice's own requests were not answered: still probed


@pytest.mark.parametrize("detail", ["connection failed", "TLS handshake failed", "status 503"])
def test_fast_failures_do_not_hold_anyone_back(store, detail):
    """They hold no slot for long: the per-CR backoff (S4.11) is enough."""
    note_answer(store, UID, detail, ALICE)
    note_answer(store, UID, detail, BOB)
    assert [_wait(store, who) for who in (ALICE, BOB, CAROL)] == [0, 0, 0]


def test_the_marks_are_per_instance(store):
    _time_out_twice(store, "slow")
    assert _wait(store, CAROL, "slow") > 0
    assert _wait(store, CAROL, "healthy") == 0
    assert _wait(store, ALICE, "healthy") == 0


def test_a_quiet_instance_is_trusted_again_after_ten_minutes(store, clock):
    _time_out_twice(store)
    clock.advance(601)
    gates = [instance_gate(store, UID, ORG, clock(), who) for who in (ALICE, BOB, CAROL)]
    assert [g.probe_in for g in gates] == [0, 0, 0]


def test_one_credential_timing_out_again_and_again_holds_no_one_else_back(store):
    """S4.1.9: the hanging credential's own CRs wait for its probe; the instance is not
    judged, and other credentials fetch as ever."""
    for _ in range(5):
        note_answer(store, UID, "timeout", ALICE)
    assert [_wait(store, BOB) for _ in range(3)] == [0, 0, 0]


def test_the_same_credential_in_another_org_is_another_requester(store):
    note_answer(store, UID, "timeout", requester(ORG, "team/alice"))
    assert _wait(store, CAROL) == 0
    note_answer(store, UID, "timeout", requester("other-org", "team/alice"))
    assert _wait(store, CAROL) > 0  # judged; that run was the probe


def test_an_answer_between_two_timeouts_means_the_instance_answers(store):
    note_answer(store, UID, "timeout", ALICE)
    note_answer(store, UID, None, BOB)  # the instance answered someone
    note_answer(store, UID, "timeout", BOB)
    assert [_wait(store, CAROL) for _ in range(3)] == [0, 0, 0]


def test_the_store_keeps_digests_not_credential_names(store):
    note_answer(store, UID, "timeout", requester(ORG, "team-a/alice-credential"))
    kept = store.get_note(f"instance-timeouts:{UID}") or ""
    assert kept and "alice" not in kept and "team-a" not in kept


def test_stood_off_crs_wake_spread_out():
    delays = {spread(30.0, f"cr-{i}") for i in range(50)}
    assert all(30.0 <= d < 60.0 for d in delays)
    assert len(delays) > 40  # not all at once
    assert spread(30.0, "cr-1") == spread(30.0, "cr-1")  # fixed per CR


def test_the_gate_reads_its_notes_in_one_round_trip(clock):
    store = NoteReadCountingQueue(clock)
    assert instance_gate(store, UID, ORG, clock(), CAROL) == InstanceGate(0.0, 0.0)
    assert store.note_reads == 1
    _time_out_twice(store)  # unresponsive: the second run was its probe
    store.note_reads = 0
    gate = instance_gate(store, UID, ORG, clock(), CAROL)
    assert gate.paused == 0 and gate.probe_in == pytest.approx(PROBE_INTERVAL_SECONDS)
    assert store.note_reads == 1


def test_a_paused_instance_waits_its_pause_and_takes_no_probe_token(store, clock):
    _time_out_twice(store)
    clock.advance(PROBE_INTERVAL_SECONDS)  # a probe token is due again
    pause_instance(store, pause_scope(UID, ORG), 20.0, clock())  # and a 429 paused the instance
    paused = InstanceGate(pytest.approx(20.0), 0.0)
    assert instance_gate(store, UID, ORG, clock(), CAROL) == paused
    clock.advance(20.0)
    first = InstanceGate(0.0, 0.0, resuming=True)  # the first request after it, and the probe
    assert instance_gate(store, UID, ORG, clock(), CAROL) == first
    resumed(store, pause_scope(UID, ORG))  # its answer ended the pause's end
    assert instance_gate(store, UID, ORG, clock(), CAROL).probe_in > 0  # the probe is taken


def test_notes_already_read_are_not_read_again(clock):
    store = NoteReadCountingQueue(clock)
    notes = (repr(clock() + 5.0), None, None, None)
    gate = instance_gate(store, UID, ORG, clock(), CAROL, notes)
    assert gate == InstanceGate(pytest.approx(5.0), 0.0) and store.note_reads == 0
    assert len(gate_note_names(UID, ORG, CAROL)) == len(notes)
