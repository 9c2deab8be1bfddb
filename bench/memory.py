"""Peak memory of whole process trees: a thread reads VmHWM and VmRSS of every process under the
roots it was given (a celery worker and its prefork children, say) from /proc, and what the
tree as a whole holds: what one container running it is charged."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from bench.common import stat_fields, status_kib

SAMPLE_SECONDS = 0.5


def parent_pids() -> dict[int, int]:
    """pid -> parent pid of every process now (from /proc/<pid>/stat)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        if fields is not None:  # else gone meanwhile
            parents[int(entry.name)] = int(fields[1])
    return parents


def private_kib(pid: int) -> int | None:
    """The pages only this process maps (Private_Clean + Private_Dirty of smaps_rollup), KiB;
    None once gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    total = 0
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("Private_Clean", "Private_Dirty"):
            total += int(rest.split()[0])
    return total


def tree_kib(main_rss_kib: int, children_private_kib: list[int]) -> int:
    """What a container running this tree holds: the main process's resident pages (those its
    forked children still share with it among them, counted once) plus each child's own. A
    child's RSS would count the shared pages again, once per child."""
    return main_rss_kib + sum(children_private_kib)


def descendants(root: int, parents: dict[int, int]) -> list[int]:
    """Every process below ``root`` (not ``root`` itself), in pid order."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return sorted(found)


class TreeSampler(threading.Thread):
    """Every SAMPLE_SECONDS, the VmHWM/VmRSS of each root and each of its descendants. VmHWM is
    a process's lifetime peak, so its last reading is the peak of a process that has exited
    since (to within one sampling interval)."""

    def __init__(self) -> None:
        super().__init__(name="tree-sampler", daemon=True)
        self._roots: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        # pid -> {"label", "role", "vmhwm_kib", "vmrss_peak_kib"}
        self.peaks: dict[int, dict[str, Any]] = {}
        self.tree_peaks_kib: dict[str, int] = {}  # label -> the largest tree_kib sampled

    def add(self, label: str, pid: int) -> None:
        with self._lock:
            self._roots[label] = pid

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(SAMPLE_SECONDS)

    def sample(self) -> None:
        with self._lock:
            roots = dict(self._roots)
        parents = parent_pids()
        for label, root in roots.items():
            main = self._read(root, label, "main")
            children = [
                pid for pid in descendants(root, parents) if self._read(pid, label, "child")
            ]
            if main is None:
                continue  # gone: its last sample stands
            owned = [kib for kib in map(private_kib, children) if kib is not None]
            held = tree_kib(main.get("VmRSS", 0), owned)
            with self._lock:
                self.tree_peaks_kib[label] = max(self.tree_peaks_kib.get(label, 0), held)

    def _read(self, pid: int, label: str, role: str) -> dict[str, int] | None:
        found = status_kib(pid)
        if not found:
            return None
        with self._lock:
            entry = self.peaks.setdefault(
                pid, {"label": label, "role": role, "vmhwm_kib": 0, "vmrss_peak_kib": 0}
            )
            entry["vmhwm_kib"] = max(entry["vmhwm_kib"], found.get("VmHWM", 0))
            entry["vmrss_peak_kib"] = max(entry["vmrss_peak_kib"], found.get("VmRSS", 0))
        return found

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=10)

    def report(self) -> list[dict[str, Any]]:
        """One row per process seen: label, role (main or child), pid, peaks in MiB."""
        with self._lock:
            rows = [
                {
                    "label": entry["label"],
                    "role": entry["role"],
                    "pid": pid,
                    "vmhwm_mib": round(entry["vmhwm_kib"] / 1024, 1),
                    "vmrss_peak_mib": round(entry["vmrss_peak_kib"] / 1024, 1),
                }
                for pid, entry in self.peaks.items()
            ]
        return sorted(rows, key=lambda r: (r["label"], r["role"] != "main", r["pid"]))

    def tree_report(self) -> dict[str, float]:
        """label -> the peak of what its whole tree held (``tree_kib``), MiB."""
        with self._lock:
            return {
                label: round(kib / 1024, 1) for label, kib in sorted(self.tree_peaks_kib.items())
            }
