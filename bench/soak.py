"""The soak (issue 52): unchanged resyncs for a long while, every process's VmRSS once a minute,
and the slope of each after the second period, against 2 % of its RSS per period.

    python -m bench soak --n 5000 --resync 60                  # 30 minutes, embedded
    python -m bench soak --n 5000 --resync 60 --soak-workers 2 --soak-minutes 30
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bench.common import status_kib
from bench.scenarios import Bench, cold_start, log, mode_label

SAMPLE_SECONDS = 60.0
SETTLING_PERIODS = 2  # the first resync waves still write (S4.17); the slope starts after them
SLOPE_BOUND_PERCENT = 2.0  # per period (issue 52)


def slope_percent_per_period(
    samples: Sequence[tuple[float, float]], period: float, after_periods: int = SETTLING_PERIODS
) -> float | None:
    """The least-squares slope of (seconds since all Ready, RSS) over the samples taken from
    ``after_periods`` periods on, per period and as a percentage of the first such sample's
    RSS; None with fewer than two such samples."""
    window = [(t, rss) for t, rss in samples if t >= after_periods * period]
    if len(window) < 2:
        return None
    mean_t = sum(t for t, _ in window) / len(window)
    mean_rss = sum(rss for _, rss in window) / len(window)
    spread = sum((t - mean_t) ** 2 for t, _ in window)
    if spread == 0 or window[0][1] <= 0:
        return None
    per_second = sum((t - mean_t) * (rss - mean_rss) for t, rss in window) / spread
    return round(100.0 * per_second * period / window[0][1], 3)


def soak(bench: Bench, n: int) -> dict[str, Any]:
    """One side per worker count of the soak_workers option: cold start, then soak_minutes of
    unchanged resyncs with every process's VmRSS read each minute (printed as it goes)."""
    out: dict[str, Any] = {"n": n, "runs": [], "bound_percent_per_period": SLOPE_BOUND_PERCENT}
    bench.results["scenarios"]["soak"] = out
    period = bench.options.resync_seconds
    minutes = bench.options.soak_minutes
    for workers in bench.options.soak_workers:
        label = f"soak-{mode_label(workers)}-{n}"
        with bench.side(label, n, workers, period) as side:
            cold = cold_start(side, "soak")
            ready = time.monotonic()
            processes = {
                row["pid"]: row["label"] for row in side.fleet.memory() if row["role"] == "main"
            }
            series: dict[str, list[tuple[float, float]]] = {name: [] for name in processes.values()}
            for minute in range(1, minutes + 1):
                time.sleep(max(0.0, ready + minute * SAMPLE_SECONDS - time.monotonic()))
                dead = side.fleet.dead()
                if dead:
                    raise RuntimeError(f"{label}: {', '.join(dead)} exited while soaking")
                since = time.monotonic() - ready
                now = []
                for pid, name in processes.items():
                    rss_mib = round((status_kib(pid) or {}).get("VmRSS", 0) / 1024, 1)
                    series[name].append((since, rss_mib))
                    now.append(f"{name} {rss_mib}")
                log(f"{label} minute {minute}/{minutes}: RSS MiB " + ", ".join(now))
        run = {
            "mode": mode_label(workers),
            "workers": workers,
            "resync_seconds": period,
            "cold_seconds": cold["seconds"],
            "processes": [
                {
                    "process": name,
                    "rss_mib": [rss for _, rss in samples],
                    "slope_percent_per_period": slope_percent_per_period(samples, period),
                }
                for name, samples in series.items()
            ],
        }
        out["runs"].append(run)
        for row in run["processes"]:
            log(
                f"{label} {row['process']}: slope after period {SETTLING_PERIODS} "
                f"{row['slope_percent_per_period']} % per period "
                f"(bound {SLOPE_BOUND_PERCENT} %)"
            )
    return out
