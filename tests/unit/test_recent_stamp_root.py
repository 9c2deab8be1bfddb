"""S6.3 rev 3: a process reuses an uncached read of the stamp root for at most 60 s; an absent
root is never kept, so R12 decides over a fresh read whether to create one."""

from __future__ import annotations

import threading

import pytest

from workers.engine.ports import SecretObject
from workers.engine.stamp_root import ROOT_REUSE_SECONDS, RecentStampRoot

ROOT = SecretObject("hikyo-system", "hikyo-operator-stamp-root", "Opaque", {"root": b"r" * 32})


class Reads:
    def __init__(self, answers: list[SecretObject | None]) -> None:
        self.answers, self.count = answers, 0

    def __call__(self) -> SecretObject | None:
        self.count += 1
        return self.answers[min(self.count, len(self.answers)) - 1]


def test_a_root_read_is_reused_for_60_seconds_then_read_again():
    now = [100.0]
    recent, reads = RecentStampRoot(lambda: now[0]), Reads([ROOT])
    assert recent.read(reads) is ROOT
    now[0] += ROOT_REUSE_SECONDS - 0.001
    assert recent.read(reads) is ROOT and reads.count == 1
    now[0] += 0.001
    assert recent.read(reads) is ROOT and reads.count == 2  # the window is over


def test_an_absent_root_is_read_again_on_every_run():
    now = [100.0]
    recent, reads = RecentStampRoot(lambda: now[0]), Reads([None, None, ROOT])
    assert recent.read(reads) is None
    assert recent.read(reads) is None
    assert recent.read(reads) is ROOT and reads.count == 3


def test_a_root_that_went_away_is_seen_gone_once_the_window_ends():
    now = [100.0]
    recent, reads = RecentStampRoot(lambda: now[0]), Reads([ROOT, None])
    assert recent.read(reads) is ROOT
    now[0] += ROOT_REUSE_SECONDS
    assert recent.read(reads) is None and reads.count == 2


def test_a_zero_window_reads_every_time():
    recent, reads = RecentStampRoot(lambda: 0.0, window=0.0), Reads([ROOT])
    for _ in range(3):
        recent.read(reads)
    assert reads.count == 3


def _in_thread(call):
    """Run ``call`` on another thread (a run of the same process); its result once joined."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    return thread, out


def test_runs_wait_for_the_run_creating_the_root_and_reuse_what_it_created():
    recent, reads = RecentStampRoot(lambda: 0.0), Reads([None])
    assert recent.read(reads) is None  # this run found it absent: it holds the turn
    thread, out = _in_thread(lambda: recent.read(reads))
    recent.keep(ROOT)  # it created the root
    thread.join(10)
    assert out == [ROOT] and reads.count == 1  # the other run read nothing uncached


def test_a_run_that_ends_without_creating_hands_the_turn_on():
    recent, reads = RecentStampRoot(lambda: 0.0), Reads([None, None, ROOT])
    assert recent.read(reads) is None
    thread, out = _in_thread(lambda: (recent.read(reads), recent.finish())[0])
    recent.finish()  # stopped before R12's create (a refusal, a failed list)
    thread.join(10)
    assert out == [None] and reads.count == 2  # the next run reads for itself
    assert recent.read(reads) is ROOT  # and, having finished, left the turn free


def test_a_run_reads_alone_once_the_wait_for_the_turn_is_over():
    recent, reads = RecentStampRoot(lambda: 0.0, wait=0.01), Reads([None])
    assert recent.read(reads) is None  # holds the turn and never finishes
    thread, out = _in_thread(lambda: recent.read(reads))
    thread.join(10)
    assert out == [None] and reads.count == 2


def test_a_failed_read_gives_the_turn_back():
    recent = RecentStampRoot(lambda: 0.0, wait=600.0)  # a turn kept would hold the next run

    def failing() -> SecretObject | None:
        raise ConnectionError("apiserver gone")

    with pytest.raises(ConnectionError):
        recent.read(failing)
    thread, out = _in_thread(lambda: recent.read(lambda: ROOT))
    thread.join(10)
    assert out == [ROOT]
