"""S7.4 "never delays a reconcile": embedded reports yield to due reconciles, but never starve
(workers/leader/report_gate.py)."""

from __future__ import annotations

from workers.leader.report_gate import HOLD_LIMIT_SECONDS, ReportGate


def test_with_no_reconcile_waiting_every_free_slot_may_take_a_report():
    gate = ReportGate()
    assert gate.slots(2, False, 0.0) == 2
    assert gate.slots(1, False, 1.0) == 1
    assert gate.slots(0, False, 2.0) == 0
    assert gate.held_since is None


def test_a_waiting_reconcile_holds_every_report():
    gate = ReportGate()
    assert gate.slots(2, True, 100.0) == 0
    assert gate.slots(2, True, 100.0 + HOLD_LIMIT_SECONDS - 0.1) == 0
    assert gate.held_since == 100.0


def test_a_hold_past_the_limit_lets_one_report_a_second_go():
    gate = ReportGate(hold_limit=60.0, release_every=1.0)
    gate.slots(2, True, 0.0)
    assert gate.slots(2, True, 60.0) == 1
    assert gate.slots(2, True, 60.5) == 0  # a slot is free, but one went half a second ago
    assert gate.slots(2, True, 61.0) == 1
    assert gate.slots(0, True, 62.5) == 0  # no free slot: none goes, and none is spent
    assert gate.slots(1, True, 62.6) == 1


def test_a_break_in_the_backlog_starts_the_next_hold_afresh():
    gate = ReportGate(hold_limit=60.0)
    gate.slots(2, True, 0.0)
    assert gate.slots(2, False, 50.0) == 2
    assert gate.slots(2, True, 55.0) == 0  # not 60 s since 0.0: a new hold began at 55
    assert gate.slots(2, True, 114.0) == 0
    assert gate.slots(2, True, 115.0) == 1
