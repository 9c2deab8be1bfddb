"""Where a run's CPU went: user + system seconds of every process under the bench (the control
plane, Redis, PostgreSQL, the operator's processes) and of the bench itself (its devserver and
watch threads), by kind, read from /proc. On a machine whose cores are all busy this is what
limits a cold start (issue 13, P5: "say what limits it")."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from bench.common import cpu_seconds
from bench.memory import descendants, parent_pids

BENCH = "bench (devserver, watch)"


def command_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def kind_of(pid: int, parents: dict[int, int], roots: dict[int, str]) -> str | None:
    """The label of the nearest of ``roots`` at or above ``pid`` (a celery worker's pool child
    counts as its worker), else the process's command name; None once it is gone."""
    at = pid
    while at in parents and at not in roots:
        at = parents[at]
    if at in roots:
        return roots[at]
    return command_name(pid)


class CpuSnapshot:
    """CPU seconds used so far by each process under this one (and this one), with its kind."""

    def __init__(self, roots: dict[int, str]) -> None:
        parents = parent_pids()
        self.seconds: dict[int, tuple[str, float]] = {}
        me = os.getpid()
        for pid in [me, *descendants(me, parents)]:
            kind = BENCH if pid == me else kind_of(pid, parents, roots)
            used = cpu_seconds(pid)
            if kind is not None and used is not None:
                self.seconds[pid] = (kind, used)

    def since(self, before: CpuSnapshot) -> dict[str, float]:
        """CPU seconds by kind between ``before`` and this snapshot, largest first; a process
        started in between counts from 0, one gone in between is missing (its last seconds)."""
        by_kind: Counter[str] = Counter()
        for pid, (kind, used) in self.seconds.items():
            earlier = before.seconds.get(pid)
            by_kind[kind] += used - (earlier[1] if earlier and earlier[0] == kind else 0.0)
        return {kind: round(seconds, 1) for kind, seconds in by_kind.most_common() if seconds > 0}


def busy_share(by_kind: dict[str, float], seconds: float, cores: int | None) -> float | None:
    """The share of the machine's cores these processes kept busy over ``seconds``."""
    if not seconds or not cores:
        return None
    return round(sum(by_kind.values()) / (seconds * cores), 2)
