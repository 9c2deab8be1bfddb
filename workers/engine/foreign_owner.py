"""S4.1.7 foreign owner: whether another operator's live Lease keeps us off a CR, and when to
look again. Pure: the Lease as plain data and ``now`` in, a verdict out.

A healthy owner writes nothing (S4.17), so its Lease is the only liveness signal. A stand-off
must therefore schedule its own re-check: no watch event will come when the owner stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .ports import LeaseRecord

STALE_AFTER_RESYNCS = 3  # S4.1.7: renewed less than 3 x resyncInterval ago = live
MIN_RECHECK_SECONDS = 1.0


@dataclass(frozen=True)
class OwnerVerdict:
    """``owner``: the namespace of the live operator that owns the CR, None when it is ours to
    reconcile. ``recheck_after``: seconds until we look again while standing off."""

    owner: str | None
    recheck_after: float | None = None


OURS = OwnerVerdict(None)


def judge_owner(
    recorded: str | None,
    own_namespace: str,
    lease: LeaseRecord | None,
    *,
    lease_readable: bool,
    resync_seconds: float,
    now: datetime,
) -> OwnerVerdict:
    """S4.1.7 for a CR whose ``status.operatorNamespace`` is ``recorded``.

    ``lease`` is None when the Lease does not exist; ``lease_readable`` False when reading it
    failed (forbidden included), which counts as a live owner. A Lease without a holder was
    released by a clean stop, which is also how a rolling update of the owner's install
    begins: it is judged by its renewTime like any other (rev 3), so an overlapping install
    does not take over, and restart every opted-in workload, while the owner's new pod starts.
    """
    if not recorded or recorded == own_namespace:
        return OURS
    if not lease_readable:
        # Cannot tell: assume alive, but look again (RBAC or the apiserver may recover).
        return OwnerVerdict(recorded, max(resync_seconds, MIN_RECHECK_SECONDS))
    if lease is None or lease.renewed_at is None:
        return OURS
    threshold = STALE_AFTER_RESYNCS * resync_seconds
    age = (now - lease.renewed_at).total_seconds()
    if age >= threshold:
        return OURS
    # Live: re-check by the time it would go stale, and at least every resync interval, so an
    # owner that stopped for good (it renews nothing) is noticed within one interval of that.
    return OwnerVerdict(recorded, max(min(threshold - age, resync_seconds), MIN_RECHECK_SECONDS))
