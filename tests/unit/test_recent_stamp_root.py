"""S6.3 rev 3: a process reuses an uncached read of the stamp root for at most 60 s; an absent
root is never kept, so R12 decides over a fresh read whether to create one."""

from __future__ import annotations

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
