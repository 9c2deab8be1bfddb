"""``python -m bench``: the issue-13 operator benchmarks against the real local control plane and
the devserver, as one markdown table on stdout and JSON (var/bench/latest.json).

    python -m bench                       # every scenario at its default size
    python -m bench p1 --n 5000           # one scenario (or several), one size
    python -m bench p4 --n 10000

Scenarios: p1 (cold start against the floor), p2 (one unchanged resync period), p3 (spec-edit and
value-change latency), p4 (VmHWM of every process), p5 (1/2/4 workers with a slow server), p7
(apiserver requests per reconcile), p8 (3 shard leaders and 2 workers: VmHWM of each, all Ready,
one shard's leader killed beside a standby; not in the default run), p9 (resync capacity:
unchanged resyncs a second with the queue saturated, embedded and 2 workers, against a 5-minute
resync of N; not in the default run), soak (unchanged resyncs for --soak-minutes, every
process's RSS each minute and its slope; not in the default run; bench/soak.py). Default
sizes: p1, p2, p3, p4, p7, p8 at 1,000 CRs; p5 at 300; p9 at 2,000; soak at 5,000.
P4 reuses P1's runs of the same size; 5,000 and 10,000 need ``--n`` (they do not fit the
20-minute budget of the default run on a 2-core machine; the default run took 16 minutes on
2 shared cores). Run from the repository root, with
KUBEBUILDER_ASSETS set or tools/build-control-plane.sh able to build the binaries. Progress
goes to stderr; on a failure the operator's and workers' log tails too, and the exit is 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shlex
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

from bench import report, scenarios, soak  # noqa: E402
from bench.world import KEYS, NAMESPACES  # noqa: E402

SCENARIOS = ("p1", "p2", "p3", "p4", "p5", "p7", "p8", "p9", "soak")
DEFAULT_RUN = SCENARIOS[:-3]  # p8, p9 and the soak run when named
DEFAULT_N = {
    "p1": 1000,
    "p2": 1000,
    "p3": 1000,
    "p4": 1000,
    "p5": 300,
    "p7": 1000,
    "p8": 1000,
    "p9": 2000,
    "soak": 5000,
}
DEFAULT_JSON = REPO / "var" / "bench" / "latest.json"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="The issue-13 operator benchmarks (see bench/__main__.py).",
    )
    # No choices=: argparse refuses an empty list against them (Python 3.11).
    parser.add_argument("scenario", nargs="*", help=f"{', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--n", type=int, help="HikyoSecrets, one size for every scenario run")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"({DEFAULT_JSON})")
    parser.add_argument("--fetch-qps", type=float, default=1000.0, help="per instance (1000)")
    parser.add_argument(
        "--worker-concurrency", type=int, default=2, help="celery --concurrency per worker (2)"
    )
    parser.add_argument(
        "--worker-pool",
        choices=("threads", "prefork"),
        default="threads",
        help="(threads, the chart's)",
    )
    parser.add_argument("--resync", type=int, default=30, help="P2/P3 resyncInterval, s (30)")
    parser.add_argument("--p3-samples", type=int, default=30, help="CRs per P3 measure (30)")
    parser.add_argument(
        "--p2-p3-workers",
        type=int,
        default=0,
        help="P2/P3 scaled with this many workers (0: embedded)",
    )
    parser.add_argument(
        "--p1-workers",
        default="0,2,4",
        help="P1's cold starts: worker counts, 0 for embedded (0,2,4)",
    )
    parser.add_argument(
        "--p9-workers",
        default="0,2",
        help="P9's sides: worker counts, 0 for embedded (0,2)",
    )
    parser.add_argument(
        "--soak-workers",
        default="0",
        help="the soak's sides: worker counts, 0 for embedded (0)",
    )
    parser.add_argument("--soak-minutes", type=int, default=30, help="the soak's length (30)")
    parser.add_argument(
        "--namespaces",
        type=int,
        default=NAMESPACES,
        help=f"namespaces the HikyoSecrets are spread over ({NAMESPACES})",
    )
    parser.add_argument("--p5-delay-ms", type=float, default=50.0, help="P5 delivery delay (50)")
    parser.add_argument("--keep", action="store_true", help="keep a failed side's directory")
    options = parser.parse_args(argv)
    unknown = [s for s in options.scenario if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    if options.n is not None and options.n < 2:
        parser.error("--n is at least 2")
    if options.namespaces < 1:
        parser.error("--namespaces is at least 1")
    if options.fetch_qps <= 0 or options.worker_concurrency < 1 or options.resync < 1:
        parser.error("--fetch-qps, --worker-concurrency and --resync are positive")
    for flag in ("p1_workers", "p9_workers", "soak_workers"):
        try:
            counts = tuple(int(w) for w in getattr(options, flag).split(","))
        except ValueError:
            counts = (-1,)
        if any(w < 0 for w in counts):
            name = "--" + flag.replace("_", "-")
            parser.error(f"{name} is a comma-separated list of worker counts ≥ 0, e.g. 0,2")
        setattr(options, flag, counts)
    if options.soak_minutes < 1:
        parser.error("--soak-minutes is at least 1")
    if options.p3_samples < 1 or options.p5_delay_ms < 0 or options.p2_p3_workers < 0:
        parser.error("--p3-samples is positive, --p5-delay-ms and --p2-p3-workers not negative")
    return options


def size_for(options: argparse.Namespace, scenario: str) -> int:
    return options.n if options.n is not None else DEFAULT_N[scenario]


def interrupted(signum: int, frame: Any) -> None:
    """The first SIGINT/SIGTERM/SIGHUP unwinds through every cleanup; later ones are ignored so
    that the cleanup itself is not cut short."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


def run(options: argparse.Namespace, results: dict[str, Any], wall: dict[str, float]) -> None:
    chosen = set(options.scenario or DEFAULT_RUN)
    opts = scenarios.Options(
        fetch_qps=options.fetch_qps,
        worker_concurrency=options.worker_concurrency,
        worker_pool=options.worker_pool,
        resync_seconds=options.resync,
        p3_samples=options.p3_samples,
        p5_delay_ms=options.p5_delay_ms,
        p2_p3_workers=options.p2_p3_workers,
        p1_workers=options.p1_workers,
        p9_workers=options.p9_workers,
        soak_workers=options.soak_workers,
        soak_minutes=options.soak_minutes,
        namespaces=options.namespaces,
        keep=options.keep,
    )
    with contextlib.ExitStack() as cleanup:
        tmp = Path(tempfile.mkdtemp(prefix="bench-"))
        cleanup.callback(lambda: None if options.keep else _remove(tmp))
        bench = scenarios.Bench(opts, cleanup, tmp, results)
        results["machine"]["control_plane"] = bench.binaries.kube_apiserver.parent.name

        def timed(name: str, call: Any) -> None:
            started = time.monotonic()
            try:
                call()
            finally:
                wall[name] = round(time.monotonic() - started, 1)
                scenarios.log(f"{name} took {wall[name]:.0f} s")

        if "p1" in chosen:
            timed("p1", lambda: scenarios.p1(bench, (size_for(options, "p1"),)))
        if "p7" in chosen:
            timed("p7", lambda: scenarios.p7(bench, size_for(options, "p7")))
        if "p4" in chosen:
            timed("p4", lambda: scenarios.p4(bench, (size_for(options, "p4"),)))
        if chosen & {"p2", "p3"}:
            name = "+".join(p for p in ("p2", "p3") if p in chosen)
            n = size_for(options, "p2" if "p2" in chosen else "p3")
            timed(name, lambda: scenarios.p2_p3(bench, n, "p2" in chosen, "p3" in chosen))
        if "p5" in chosen:
            timed("p5", lambda: scenarios.p5(bench, size_for(options, "p5")))
        if "p8" in chosen:
            timed("p8", lambda: scenarios.p8(bench, size_for(options, "p8")))
        if "p9" in chosen:
            timed("p9", lambda: scenarios.p9(bench, size_for(options, "p9")))
        if "soak" in chosen:
            timed("soak", lambda: soak.soak(bench, size_for(options, "soak")))


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    results: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]),
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": {
            "cores": os.cpu_count(),
            "load_avg_start": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
        },
        "settings": {
            "fetch_qps": options.fetch_qps,
            "fetch_burst": max(1, int(options.fetch_qps * 2)),
            "keys": KEYS,
            "namespaces": options.namespaces,
            "worker_concurrency": options.worker_concurrency,
            "worker_pool": options.worker_pool,
            "resync_seconds": options.resync,
            "p3_samples": options.p3_samples,
            "p5_delay_ms": options.p5_delay_ms,
            "p2_p3_workers": options.p2_p3_workers,
            "p1_workers": list(options.p1_workers),
            "p9_workers": list(options.p9_workers),
            "soak_workers": list(options.soak_workers),
            "soak_minutes": options.soak_minutes,
        },
        "scenarios": {},
        "notes": [],
    }
    wall: dict[str, float] = {}
    results["wall"] = wall
    started = time.monotonic()
    code = 0
    try:
        run(options, results, wall)
    except KeyboardInterrupt as stop:
        results["error"] = f"interrupted ({stop})"
        code = 130
    except Exception as error:
        traceback.print_exc()
        results["error"] = (
            f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        )
        code = 1
    results["total_seconds"] = round(time.monotonic() - started, 1)
    results["machine"]["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    report.write_json(options.json, results)
    print(report.render(results))
    print(f"\nJSON: {options.json}")
    if code:
        print(f"bench failed: {results['error']}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
