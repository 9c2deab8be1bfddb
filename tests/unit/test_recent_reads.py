"""S7.1 rev 3's reuse window, on an injected timer (workers/engine/recent_reads.py)."""

from __future__ import annotations

from tests.support.clocks import FakeClock
from workers.engine import recent_reads
from workers.engine.recent_reads import REUSE_SECONDS, RecentReads

CR = {"metadata": {"uid": "u1"}}


def test_the_reads_are_handed_out_once_within_the_window():
    clock = FakeClock()
    reads = RecentReads(clock)
    reads.keep("u1", CR, "CANARY-token")
    clock.advance(REUSE_SECONDS - 1)
    kept = reads.take("u1")
    assert kept is not None and kept.cr is CR and kept.token == "CANARY-token"
    assert reads.take("u1") is None  # once
    assert "CANARY" not in repr(kept)


def test_reads_older_than_the_window_are_read_again():
    clock = FakeClock()
    reads = RecentReads(clock)
    reads.keep("u1", CR, "t")
    clock.advance(REUSE_SECONDS)
    assert reads.take("u1") is None


def test_the_kept_reads_are_bounded(monkeypatch):
    monkeypatch.setattr(recent_reads, "MAX_KEPT", 3)
    reads = RecentReads(FakeClock())
    for uid in ("a", "b", "c", "d"):
        reads.keep(uid, CR, "t")
    assert reads.take("a") is None  # the oldest went
    assert [reads.take(uid) is not None for uid in ("b", "c", "d")] == [True, True, True]


def test_every_engine_of_a_process_shares_its_reuse_windows():
    """S6.3 and S7.1 reuse reads across runs: each run gets a new Engine, so the windows live
    in the Runtime (before, each Engine made its own and nothing was ever reused)."""
    from workers.engine.settings import OperatorSettings
    from workers.queue.memory import MemoryQueue
    from workers.runtime import Runtime

    runtime = Runtime(
        settings=OperatorSettings(operator_namespace="hikyo-system"),
        cluster=object(),
        queue=MemoryQueue(),
    )
    first, second = runtime.engine(), runtime.engine(lambda: None)
    assert first.recent_root is second.recent_root is runtime.recent_root
    assert first.recent_reads is second.recent_reads is runtime.recent_reads


def test_a_kept_cr_leaves_its_managed_fields_behind_and_its_status_in():
    """Issue 52: no report reads managedFields, and they are most of a CR's size."""
    cr = {
        "metadata": {"uid": "u1", "generation": 2, "managedFields": [{"manager": "x"}] * 50},
        "status": {"lifecycle": "Synced"},
    }
    slim = recent_reads.without_managed_fields(cr)
    assert slim == {"metadata": {"uid": "u1", "generation": 2}, "status": {"lifecycle": "Synced"}}
    assert "managedFields" in cr["metadata"]  # the run's own copy is left as it was
    assert recent_reads.without_managed_fields(CR) is CR
