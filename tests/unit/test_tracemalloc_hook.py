"""The development aid of issue 52 (workers/memory.py): off unless HIKYO_TRACEMALLOC_DIR is set;
then each SIGUSR2 writes a tracemalloc snapshot there."""

from __future__ import annotations

import os
import signal
import tracemalloc

from workers.memory import TRACEMALLOC_DIR, tracemalloc_on_signal


def test_off_without_the_variable(monkeypatch):
    monkeypatch.delenv(TRACEMALLOC_DIR, raising=False)
    assert tracemalloc_on_signal() is False and not tracemalloc.is_tracing()


def test_each_sigusr2_writes_a_snapshot(monkeypatch, tmp_path):
    monkeypatch.setenv(TRACEMALLOC_DIR, str(tmp_path))
    previous = signal.getsignal(signal.SIGUSR2)
    try:
        assert tracemalloc_on_signal() is True
        for _ in range(2):
            os.kill(os.getpid(), signal.SIGUSR2)
        snapshots = sorted(p.name for p in tmp_path.iterdir())
        assert snapshots == ["snapshot-1.pickle", "snapshot-2.pickle"]
        assert tracemalloc.Snapshot.load(str(tmp_path / "snapshot-2.pickle")).traces
    finally:
        tracemalloc.stop()
        signal.signal(signal.SIGUSR2, previous)
