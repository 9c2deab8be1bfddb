"""S4.1.7 foreign owner: the pure verdict, with an injected ``now``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from workers.engine.foreign_owner import OwnerVerdict, judge_owner
from workers.engine.ports import LeaseRecord

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
OURS_NS, THEIRS_NS = "hikyo-system", "other-operator"
RESYNC = 60.0  # 3 x resyncInterval = 180 s


def _judge(lease: LeaseRecord | None, *, readable: bool = True, recorded: str | None = THEIRS_NS):
    return judge_owner(
        recorded, OURS_NS, lease, lease_readable=readable, resync_seconds=RESYNC, now=NOW
    )


def _renewed(seconds_ago: float, holder: str = "them-1") -> LeaseRecord:
    return LeaseRecord(holder=holder, renewed_at=NOW - timedelta(seconds=seconds_ago))


@pytest.mark.parametrize("recorded", [None, "", OURS_NS])
def test_a_cr_without_a_foreign_operator_namespace_is_ours(recorded):
    assert _judge(_renewed(1), recorded=recorded) == OwnerVerdict(None)


def test_a_live_lease_stands_off_and_rechecks_within_one_resync_interval():
    verdict = _judge(_renewed(2))
    assert verdict.owner == THEIRS_NS
    # The owner writes nothing while healthy: without a recheck no event would ever come.
    assert verdict.recheck_after == RESYNC


def test_a_live_lease_near_the_threshold_rechecks_when_it_would_go_stale():
    verdict = _judge(_renewed(3 * RESYNC - 20))
    assert verdict == OwnerVerdict(THEIRS_NS, 20.0)


def test_the_recheck_is_never_sooner_than_a_second():
    assert _judge(_renewed(3 * RESYNC - 0.1)).recheck_after == 1.0


@pytest.mark.parametrize("age", [3 * RESYNC, 3 * RESYNC + 1, 86400])
def test_a_lease_renewed_3_resync_intervals_ago_or_earlier_is_taken_over(age):
    assert _judge(_renewed(age)) == OwnerVerdict(None)


@pytest.mark.parametrize("age", [1, 3 * RESYNC - 20])
def test_a_released_lease_is_judged_by_its_renew_time(age):
    """S4.1.7 rev 3: a clean stop empties holderIdentity (k8s/leader.py _release) and keeps
    renewTime; a rolling update of the owner's install starts that way, so the other install
    stands off until the Lease is 3 resync intervals old, as for any live owner."""
    released = _renewed(age, holder="")
    assert _judge(released) == _judge(_renewed(age))
    assert _judge(released).owner == THEIRS_NS


def test_a_released_lease_is_taken_over_once_stale():
    assert _judge(_renewed(3 * RESYNC, holder="")) == OwnerVerdict(None)


def test_a_lease_never_renewed_or_absent_is_taken_over():
    assert _judge(LeaseRecord(holder="them-1", renewed_at=None)) == OwnerVerdict(None)
    assert _judge(None) == OwnerVerdict(None)


def test_an_unreadable_lease_counts_as_live_and_is_rechecked():
    """S4.1.7: "or reading it is forbidden" means a live owner; RBAC may change, so look again."""
    assert _judge(None, readable=False) == OwnerVerdict(THEIRS_NS, RESYNC)


def test_a_lease_renewed_in_the_future_clock_skew_stands_off():
    verdict = _judge(_renewed(-30))
    assert verdict == OwnerVerdict(THEIRS_NS, RESYNC)
