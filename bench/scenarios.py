"""The scenarios of ``python -m bench`` (issue 13): each side gets a fresh local control plane,
a fresh devserver and the world of bench/world.py, then the operator in one mode; the figures go
into the results dict that bench/report.py renders."""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.apiserver import (
    CALL_TIMEOUT,
    READ_VERBS,
    RequestKey,
    measure_period,
    request_counts,
)
from bench.common import status_kib
from bench.cpu import CpuSnapshot, busy_share
from bench.fleet import Databases, Fleet
from bench.report import per_cr, percentile, ratio, speedup
from bench.tracking import (
    WATCH_SECONDS,
    ReadyTracker,
    list_with_version,
    open_watch,
    wait_ready,
    watch_events,
)
from bench.world import NAMESPACES, create_world, floor, key_items, ready_count
from workers.engine.reports import heartbeat_period

P1_WORKERS = (0, 2, 4)  # 0: embedded
P4_WORKERS = (0, 2)  # a P4 run of its own: embedded and the chart's default of 2 workers
P5_WORKERS = (1, 2, 4)
FLOOR_THREADS = (1, 8)
SETTLE_PERIODS = 4  # P2/P3: give up waiting for every CR Synced=Current after this many
SPEC_EDIT_TIMEOUT = 60.0
POLL_SPEC_SECONDS = 0.1
EDITED_KEY = "EDITED_0"
REPORTS_WAIT = 60.0  # after all Ready, plus 50 ms a CR, for every CR's first status report
REPORTS_POLL_SECONDS = 0.2
SECRETS = "/api/v1/secrets"
JITTER_MAX = 1.1  # a resync comes after resyncInterval times [0.9, 1.1] (S4.16)
CAPACITY_RESYNC_SECONDS = 10  # S4.16's least resyncInterval: more due than any operator runs
# As long as S7.4's heartbeat period P at that resync (5 min), in which a steady state sends
# every CR's heartbeat once; the row prints how many the window held. A 60 s window sampled
# the heartbeats' phase after the cold start instead (issue 37).
CAPACITY_WINDOW_SECONDS = heartbeat_period(CAPACITY_RESYNC_SECONDS)
CAPACITY_TARGET_RESYNC_SECONDS = 300  # issue 37: the 5-minute resync the capacity is set against


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Options:
    fetch_qps: float = 1000.0
    worker_concurrency: int = 2
    worker_pool: str = "threads"  # celery --pool: threads (the chart's default) or prefork
    resync_seconds: int = 30
    p3_samples: int = 30
    p5_delay_ms: float = 50.0
    p2_p3_workers: int = 0  # embedded (the P2/P3), or scaled with this many workers
    p1_workers: tuple[int, ...] = P1_WORKERS  # P1's cold starts
    p9_workers: tuple[int, ...] = (0, 2)  # P9's sides: embedded and the chart's default of 2
    soak_workers: tuple[int, ...] = (0,)  # the soak's sides (bench/soak.py)
    soak_minutes: int = 30
    # The HikyoSecrets are spread over this many namespaces. R7's list of the CRs naming one
    # target scans its namespace's: at 20,000, 100 namespaces cost the apiserver about 1 ms
    # less per run than 10 (docs/performance.md).
    namespaces: int = NAMESPACES
    keep: bool = False  # keep a failed side's directory (logs, kubeconfig)


@dataclass
class Side:
    """One fresh world with the operator configured (not yet started)."""

    label: str
    n: int
    api: Any
    hikyo: Any
    world: dict[str, Any]
    fleet: Fleet
    create_seconds: float
    tmp: Path
    tracker: ReadyTracker | None = None  # from the cold start on


@dataclass
class Bench:
    """What every scenario shares: binaries, the PostgreSQL server, cached runs, results."""

    options: Options
    cleanup: contextlib.ExitStack
    tmp: Path
    results: dict[str, Any]
    binaries: Any = None
    databases: Databases | None = None
    cold_runs: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    _sides: int = 0

    def __post_init__(self) -> None:
        from localcluster import locate_binaries

        self.binaries = locate_binaries()
        self.databases = Databases(self.cleanup)

    def env(self, run_lines: bool = False) -> dict[str, str]:
        qps = self.options.fetch_qps
        env = {
            "DJANGO_DEBUG": "false",
            "HIKYO_LOG_LEVEL": "WARNING",
            "HIKYO_OPERATOR_FETCH_QPS": f"{qps:g}",
            "HIKYO_OPERATOR_FETCH_BURST": str(max(1, int(qps * 2))),
        }
        if run_lines:  # the runner's one line per reconcile (workers.runner, INFO)
            env["HIKYO_WORKERS_LOG_LEVEL"] = "INFO"
        return env

    @contextlib.contextmanager
    def side(
        self,
        label: str,
        n: int,
        workers: int,
        resync_seconds: int | None = None,
        delivery_delay: float = 0.0,
        run_lines: bool = False,
        shards: int = 1,
    ) -> Iterator[Side]:
        """A fresh control plane, devserver and world of ``n`` CRs, and the operator ready to
        start. On failure, the tails of the operator's and workers' logs go to stderr."""
        from kubernetes import config

        from devserver import DevServer
        from devserver.faults import Fault
        from k8s.crd_manifests import install_crds
        from localcluster import LocalControlPlane

        self._sides += 1
        tmp = self.tmp / f"{self._sides:02d}-{label}"
        fleet: Fleet | None = None
        with contextlib.ExitStack() as stack:
            try:
                log(f"{label}: control plane, devserver, {n:,} HikyoSecrets")
                cluster = LocalControlPlane(self.binaries, tmp / "control-plane")
                stack.callback(cluster.stop)
                cluster.start()
                api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
                stack.callback(api.close)
                install_crds(api)
                hikyo = stack.enter_context(DevServer())
                if delivery_delay:
                    hikyo.set_fault(None, Fault.slow(delivery_delay), route="delivery")
                created = time.perf_counter()
                world = create_world(api, hikyo, n, resync_seconds, self.options.namespaces)
                create_seconds = round(time.perf_counter() - created, 1)
                assert self.databases is not None
                fleet = Fleet(
                    tmp / "operator",
                    cluster.kubeconfig,
                    workers,
                    self.options.worker_concurrency,
                    self.env(run_lines),
                    self.databases,
                    stack,
                    pool=self.options.worker_pool,
                    shards=shards,
                )
                side = Side(label, n, api, hikyo, world, fleet, create_seconds, tmp)
                stack.callback(lambda: side.tracker.close() if side.tracker else None)
                yield side
            except BaseException:
                if fleet is not None:
                    print(fleet.log_tails(), file=sys.stderr)
                if self.options.keep:
                    log(f"keeping {tmp} (logs, kubeconfig)")
                raise
        shutil.rmtree(tmp, ignore_errors=True)


# --- the cold start (P1, and the start of every other scenario) --------------------------------


def cold_start(
    side: Side, scenario: str, timeout: float | None = None, wait_reports: bool = True
) -> dict[str, Any]:
    """Seconds from launching run_operator (scaled: with the workers already booted and idle)
    to every CR Ready=True at its generation (seen through a WATCH), and what it cost; then,
    with ``wait_reports``, until every CR's first status report was accepted."""
    n, api, hikyo, fleet = side.n, side.api, side.hikyo, side.fleet
    limit = timeout or 120.0 + n * 1.0
    booting = time.monotonic()
    if fleet.workers:
        fleet.start_workers()
    workers_boot = time.monotonic() - booting
    before, seen = request_counts(api), len(hikyo.requests)
    redis_before = fleet.redis_commands()
    side.tracker = tracker = ReadyTracker(api).start_and_wait()
    cpu_before = CpuSnapshot(fleet.cpu_roots())
    started = time.monotonic()
    fleet.start_leader()
    up = time.monotonic() - started
    log(f"{side.label}: operator up after {up:.1f} s (workers booted in {workers_boot:.1f} s)")
    progress: list[tuple[float, int]] = []
    done = wait_ready(
        tracker,
        n,
        started + limit,
        fleet.dead,
        lambda ready: log(
            f"{side.label}: {ready:,} of {n:,} Ready after {time.monotonic() - started:.0f} s"
        ),
        progress,
    )
    seconds = done - started
    cpu = CpuSnapshot(fleet.cpu_roots()).since(cpu_before)
    delta = request_counts(api) - before
    redis_delta = fleet.redis_commands() - redis_before
    scraped = time.monotonic()
    # Reports yield to reconciles (S7.4), so most are sent after the last CR is Ready: when
    # every CR's first one has been answered is the cold start's other end.
    log(f"{side.label}: all {n:,} Ready in {seconds:.1f} s")
    reports_sent = (
        wait_reports_sent(hikyo, seen, n, time.monotonic() + REPORTS_WAIT + n * 0.05)
        if wait_reports
        else None
    )
    with_reports = request_counts(api) - before
    memory = fleet.memory()
    pod_memory = fleet.pod_memory()
    # The bench's own requests: its LISTs and ended WATCHes, and the /metrics scrapes before.
    lists = tracker.lists
    for counted, scrapes, until in ((delta, 1, scraped), (with_reports, 2, time.monotonic())):
        counted[("LIST", "hikyosecrets", "")] -= lists
        counted[("WATCH", "hikyosecrets", "")] -= tracker.watches_ended_between(started, until)
        counted[("GET", "nonresource", "")] -= scrapes
    answered = hikyo.requests[seen:]
    if wait_reports:
        sent = "not all sent" if reports_sent is None else f"{reports_sent - started:.1f} s"
        log(f"{side.label}: every first status report sent after {sent}")
    return {
        "label": side.label,
        "scenario": scenario,
        "mode": fleet.mode,
        "workers": fleet.workers,
        "worker_concurrency": fleet.concurrency if fleet.workers else None,
        "worker_pool": fleet.pool if fleet.workers else None,
        "n": n,
        "create_seconds": side.create_seconds,
        "seconds": round(seconds, 2),
        "ready_wall": time.time() - (time.monotonic() - done),
        "reports_sent_seconds": None if reports_sent is None else round(reports_sent - started, 2),
        "operator_up_seconds": round(up, 1),
        "workers_boot_seconds": round(workers_boot, 1) if fleet.workers else None,
        # From launch to the first CR Ready: the operator's start, its Lease, its first LISTs and
        # the first run, which no number of workers shortens.
        "first_ready_seconds": next((round(t - started, 2) for t, k in progress if k), None),
        "ready_after_seconds": {
            f"{share}%": next(
                (round(t - started, 1) for t, k in progress if k >= n * share / 100), None
            )
            for share in (25, 50, 75, 100)
        },
        "apiserver": (table := request_table(delta)),
        "apiserver_total": sum(table.values()),
        # Until every CR's first status report was accepted (None when they were not all sent).
        "apiserver_with_reports": None if reports_sent is None else request_table(with_reports),
        "hikyo": dict(sorted(Counter(f"{r.method} {r.status}" for r in answered).items())),
        # Scaled: every process's Redis commands until all Ready (the keyed queue, the broker,
        # the published reads), per CR: what a round trip more or less per reconcile costs.
        "redis_per_cr": {k: round(v / n, 2) for k, v in redis_delta.most_common()},
        "redis_total_per_cr": round(sum(redis_delta.values()) / n, 2),
        # Until all Ready, by kind of process (bench.cpu): on busy cores, what limits the run.
        "cpu_seconds": cpu,
        "cores_busy": busy_share(cpu, seconds, os.cpu_count()),
        "memory": memory,
        "pod_memory": pod_memory,
    }


def reports_answered(hikyo: Any, seen: int) -> int:
    """Status reports (S7.3) the devserver accepted since its ``seen``-th request."""
    return sum(
        1
        for r in hikyo.requests[seen:]
        if r.method == "POST" and r.path.endswith("/delivery/status") and r.status == 204
    )


def wait_reports_sent(hikyo: Any, seen: int, n: int, deadline: float) -> float | None:
    """Monotonic time when ``n`` reports were accepted since ``seen``; None at the deadline."""
    while reports_answered(hikyo, seen) < n:
        if time.monotonic() > deadline:
            return None
        time.sleep(REPORTS_POLL_SECONDS)
    return time.monotonic()


def request_table(delta: Counter[RequestKey]) -> dict[str, int]:
    """``"VERB resource[/subresource]": n``, the apiserver's own /metrics apart."""
    table: dict[str, int] = {}
    for (verb, resource, subresource), count in sorted(delta.items()):
        if count > 0 and resource != "nonresource":
            table[f"{verb} {resource}{f'/{subresource}' if subresource else ''}"] = count
    return table


def mode_label(workers: int) -> str:
    return "embedded" if workers == 0 else f"scaled-{workers}w"


# --- P1 ----------------------------------------------------------------------------------------


def p1(bench: Bench, sizes: tuple[int, ...]) -> dict[str, Any]:
    """Embedded and scaled (by default 2 and 4 workers: the p1_workers option) cold starts at
    each size; the floor (1 and 8 threads) in the embedded side's world after its operator
    stopped."""
    out: dict[str, Any] = {"sizes": []}
    bench.results["scenarios"]["p1"] = out
    for n in sizes:
        size: dict[str, Any] = {"n": n, "floor": {}, "runs": []}
        out["sizes"].append(size)
        for workers in bench.options.p1_workers:
            with bench.side(f"p1-{mode_label(workers)}-{n}", n, workers) as side:
                run = cold_start(side, "P1")
                size["runs"].append(run)
                bench.cold_runs[(n, workers)] = run
                if workers == 0:
                    side.fleet.stop()
                    if side.tracker:  # the floor's status patches need no watching
                        side.tracker.close()
                    for threads in FLOOR_THREADS:
                        done = floor(side.api, side.hikyo, side.world, threads)
                        size["floor"][str(threads)] = done["seconds"]
                        log(f"floor, {threads} thread(s), N = {n:,}: {done['seconds']} s")
        for run in size["runs"]:
            run["ratio_to_floor"] = {t: ratio(run["seconds"], s) for t, s in size["floor"].items()}
    return out


# --- P7 ----------------------------------------------------------------------------------------


def p7(bench: Bench, n: int) -> dict[str, Any]:
    """Requests per reconcile from the embedded cold start at ``n`` (P1's when it ran)."""
    run = bench.cold_runs.get((n, 0))
    source = "P1 embedded cold start"
    ran_again = None  # counted only from a cold start of its own, which logs every run
    if run is None:
        with bench.side(f"p7-embedded-{n}", n, 0, run_lines=True) as side:
            run = cold_start(side, "P7")
            ran_again = runs_again_by(side.fleet.operator.runs(), run["ready_wall"])
        bench.cold_runs[(n, 0)] = run
        source = "embedded cold start"
    counts = run["apiserver"]
    work = per_cr_work(counts)
    with_reports = run.get("apiserver_with_reports")
    leases = sum(v for k, v in counts.items() if k.endswith(" leases"))
    out = {
        "n": n,
        "source": source,
        "per_cr": per_cr(work, n),
        "total_per_cr": round(sum(work.values()) / n, 2),
        "writes_per_cr": round(
            sum(v for k, v in work.items() if k.split()[0] not in READ_VERBS) / n, 2
        ),
        "lease_per_cr": round(leases / n, 3),
        "crs_run_again": ran_again,
        "counts": counts,
        # Issue 37: the cold start with every CR's first status report (bound 7.5 a CR).
        "with_reports_per_cr": (
            None if with_reports is None else per_cr(per_cr_work(with_reports), n)
        ),
        "total_with_reports_per_cr": (
            None if with_reports is None else round(sum(per_cr_work(with_reports).values()) / n, 2)
        ),
    }
    bench.results["scenarios"]["p7"] = out
    return out


def runs_again_by(runs: list[tuple[str, float, float, str]], until: float) -> int:
    """CRs with more than one run ending by ``until`` (wall time): a first sync that ran twice
    (a lost race, a retry) costs its requests twice."""
    ended = Counter(uid for uid, _, end, _ in runs if end <= until)
    return sum(1 for count in ended.values() if count > 1)


def per_cr_work(counts: dict[str, int]) -> dict[str, int]:
    """Leases are the leader's heartbeat and WATCHes long-running streams: neither is per CR."""
    return {
        k: v for k, v in counts.items() if not k.endswith(" leases") and k.split()[0] != "WATCH"
    }


# --- P4 ----------------------------------------------------------------------------------------


def p4(bench: Bench, sizes: tuple[int, ...]) -> dict[str, Any]:
    """VmHWM of every process: embedded and scaled with 2 workers at all Ready, after the first
    resync period and after the third, and the RSS growth from the second to the third
    (issue 52: the steady state, not only the first sync),
    their CRs resyncing every ``resync_seconds``; any other mode this bench run already
    cold-started at that size is shown at all Ready."""
    out: dict[str, Any] = {"sizes": []}
    bench.results["scenarios"]["p4"] = out
    period = bench.options.resync_seconds
    for n in sizes:
        size: dict[str, Any] = {"n": n, "runs": [], "resync_seconds": period}
        out["sizes"].append(size)
        for workers in P4_WORKERS:
            with bench.side(f"p4-{mode_label(workers)}-{n}", n, workers, period) as side:
                run = cold_start(side, "P4")
                periods = steady_memory(side, period, (1, 2, 3))
            size["runs"].append(
                {
                    "mode": run["mode"],
                    "workers": run["workers"],
                    "source": "own run",
                    "processes": run["memory"],
                    "pods": run.get("pod_memory", {}),
                    "periods": periods,
                }
            )
        for (m, workers), run in sorted(bench.cold_runs.items()):
            if m == n and workers not in P4_WORKERS:
                size["runs"].append(
                    {
                        "mode": run["mode"],
                        "workers": run["workers"],
                        "source": f"from {run['scenario']}",
                        "processes": run["memory"],
                        "pods": run.get("pod_memory", {}),
                    }
                )
    return out


def steady_memory(side: Side, period: float, after: tuple[int, ...]) -> list[dict[str, Any]]:
    """After each count of resync periods in ``after`` (from all Ready): every process's VmHWM
    so far and its VmRSS now, and each pod's peak (issue 52)."""
    found, waited = [], 0
    for count in after:
        time.sleep(period * JITTER_MAX * (count - waited))
        waited = count
        dead = side.fleet.dead()
        if dead:
            raise RuntimeError(f"{side.label}: {', '.join(dead)} exited while resyncing")
        processes = side.fleet.memory()
        for row in processes:
            now = status_kib(row["pid"]) or {}
            row["vmrss_now_mib"] = round(now.get("VmRSS", 0) / 1024, 1)
        found.append({"periods": count, "processes": processes, "pods": side.fleet.pod_memory()})
    return found


# --- P2 and P3 (one run) -----------------------------------------------------------------------


def settle(side: Side, period: float, limit: float | None = None) -> tuple[float, bool]:
    """At least one period, then until every CR is Synced=Current (its first resync after the
    delivery still writes, S4.17); (seconds, settled) — gives up after ``limit`` seconds
    (SETTLE_PERIODS periods unless given)."""
    assert side.tracker is not None
    started = time.monotonic()
    give_up = SETTLE_PERIODS * period if limit is None else limit
    time.sleep(period)
    while True:
        dead = side.fleet.dead()
        if dead:
            raise RuntimeError(f"{side.label}: {', '.join(dead)} exited while settling")
        _, synced, listed = side.tracker.counts()
        if synced == listed == side.n:
            return time.monotonic() - started, True
        if time.monotonic() - started > give_up:
            return time.monotonic() - started, False
        side.tracker.wait_change(2.0)


def p2_period(side: Side, period: float) -> dict[str, Any]:
    """One idle window of resyncInterval times 1.1, the jitter's upper bound (S4.16), so that an
    operator holding the interval runs every CR in it at least once: apiserver writes and
    requests, delivery fetches and status reports (also scaled to one period), and the CRs with
    no reconcile run ending inside it (the runner's run lines)."""
    assert side.tracker is not None
    window = period * JITTER_MAX
    uids = side.tracker.uids()
    cpu_before = CpuSnapshot(side.fleet.cpu_roots())
    window_start, started, seen = time.time(), time.monotonic(), len(side.hikyo.requests)
    measured, fetched = measure_period(
        side.api, side.hikyo, window, lambda r: r.method == "GET" and r.path.endswith("/delivery")
    )
    window_end = time.time()
    cpu = CpuSnapshot(side.fleet.cpu_roots()).since(cpu_before)
    reports = reports_answered(side.hikyo, seen)
    # a WATCH of the bench's tracker that ended in the window is the bench's, not the operator's
    measured["apiserver_requests_total"] -= side.tracker.watches_ended_between(
        started, time.monotonic()
    )
    runs = side.fleet.operator.runs()
    ran = {uid for uid, _, end, _ in runs if window_start <= end <= window_end}
    return {
        "n": side.n,
        "period": measured,
        "fetches_per_cr": round(len(fetched) / side.n, 2),
        "fetches_per_cr_per_period": round(len(fetched) / side.n * period / window, 2),
        "reports_per_cr_per_period": round(reports / side.n * period / window, 2),
        "crs_not_fetched": len(uids - ran),
        "crs_run": len(uids & ran),
        # The steady state's share of the cores, every heartbeat included: what is left is
        # the headroom a saturated P9 cannot show with its heartbeats held back (issue 37).
        "cores_busy": busy_share(cpu, window_end - window_start, os.cpu_count()),
        "cpu_seconds": cpu,
    }


# --- P9: resync capacity ----------------------------------------------------------------------


def p9(bench: Bench, n: int) -> dict[str, Any]:
    """How many unchanged resyncs a second the operator runs when more are due than it can run:
    every CR's resyncInterval is S4.16's least (10 s), so past the cold start and the first
    resyncs (which still write, S4.17) the queue never empties. One side per worker count of
    the p9_workers option (0: embedded); capacity ÷ what a 5-minute resync of ``n`` CRs needs,
    against the issue's 1.5."""
    out: dict[str, Any] = {"n": n, "runs": []}
    bench.results["scenarios"]["p9"] = out
    for workers in bench.options.p9_workers:
        label = f"p9-{mode_label(workers)}-{n}"
        with bench.side(label, n, workers, CAPACITY_RESYNC_SECONDS, run_lines=True) as side:
            cold = cold_start(side, "P9", wait_reports=False)
            # At saturation the first resyncs take about N / capacity; 20 a second is far below
            # any capacity measured here.
            seconds, settled = settle(side, CAPACITY_RESYNC_SECONDS, limit=120.0 + n / 20)
            log(f"{label}: settled in {seconds:.0f} s" + ("" if settled else " (gave up)"))
            measured = capacity_window(side, CAPACITY_WINDOW_SECONDS)
            run = {
                "mode": mode_label(workers),
                "workers": workers,
                "cold_seconds": cold["seconds"],
                "settle_seconds": round(seconds, 1),
                "settled": settled,
                **measured,
            }
            out["runs"].append(run)
            log(
                f"P9 {run['mode']}: {run['runs_per_second']} unchanged resyncs/s, "
                f"capacity ÷ needed {run['capacity_to_needed']} (5-minute resync)"
            )
    return out


def capacity_window(side: Side, window: float) -> dict[str, Any]:
    """Runs, fetches, apiserver requests (per run, by verb) and CPU (per run, by process) in
    one window of ``window`` seconds with the queue saturated and the bench idle."""
    assert side.tracker is not None
    api, hikyo, fleet = side.api, side.hikyo, side.fleet
    before, seen = request_counts(api), len(hikyo.requests)
    cpu_before = CpuSnapshot(fleet.cpu_roots())
    wall_start, started = time.time(), time.monotonic()
    time.sleep(window)
    cpu = CpuSnapshot(fleet.cpu_roots()).since(cpu_before)
    elapsed, wall_end = time.monotonic() - started, time.time()
    delta = request_counts(api) - before
    delta[("GET", "nonresource", "")] -= 1  # this function's own /metrics scrape
    delta[("WATCH", "hikyosecrets", "")] -= side.tracker.watches_ended_between(
        started, time.monotonic()
    )
    runs = [r for r in fleet.operator.runs() if wall_start <= r[2] <= wall_end]
    answered = hikyo.requests[seen:]
    fetches = sum(1 for r in answered if r.method == "GET" and r.path.endswith("/delivery"))
    reports = sum(1 for r in answered if r.method == "POST" and r.path.endswith("/status"))
    table = request_table(delta)
    written = {k: v for k, v in table.items() if k.split(" ")[0] not in READ_VERBS}
    leases = {k: v for k, v in table.items() if "leases" in k}
    work = {k: v for k, v in table.items() if k not in leases and not k.startswith("WATCH ")}
    count = len(runs)
    per_second = count / elapsed
    needed = side.n / CAPACITY_TARGET_RESYNC_SECONDS
    heartbeats = side.n / heartbeat_period(CAPACITY_RESYNC_SECONDS)
    return {
        "window_seconds": round(elapsed, 1),
        "runs": count,
        "outcomes": dict(Counter(outcome for *_, outcome in runs).most_common()),
        "fetches": fetches,
        "reports": reports,  # status reports the devserver answered (S7): they share the pace
        "reports_per_second": round(reports / elapsed, 1),
        "heartbeats_needed_per_second": round(heartbeats, 1),  # one per CR per P (S7.4)
        "runs_per_second": round(per_second, 1),
        "needed_per_second": round(needed, 1),
        "capacity_to_needed": ratio(per_second, needed),
        "apiserver_writes": {k: v for k, v in written.items() if k not in leases},
        "apiserver_per_run": per_cr(work, count) if count else {},
        "apiserver_per_run_total": round(sum(work.values()) / count, 2) if count else None,
        "cpu_seconds": cpu,
        "cpu_ms_per_run": {k: round(v * 1000 / count, 1) for k, v in cpu.items()} if count else {},
        "cores_busy": busy_share(cpu, elapsed, os.cpu_count()),
    }


def secret_data(core: Any, namespace: str, name: str) -> dict[str, str]:
    """The target Secret's data (base64 as stored); {} while it is missing."""
    from kubernetes.client.rest import ApiException

    try:
        secret = core.read_namespaced_secret(name, namespace, _request_timeout=10)
    except ApiException as error:
        if error.status == 404:
            return {}
        raise
    return secret.data or {}


def samples(crs: list[tuple[str, str]], k: int, offset: int) -> list[tuple[str, str]]:
    """``k`` CRs spread evenly over the list, starting at ``offset``."""
    step = max(1, len(crs) // k)
    return [crs[(offset + i * step) % len(crs)] for i in range(k)]


def p3_spec_edits(side: Side, crs: list[tuple[str, str]]) -> list[float]:
    """One at a time: seconds from sending a spec edit (allKeys → a mapping of KEY_0 to
    EDITED_0) until a GET of the target shows EDITED_0."""
    from kubernetes import client

    from k8s.slim_api import CoreV1

    core, custom = CoreV1(side.api), client.CustomObjectsApi(side.api)
    latencies = []
    for namespace, name in crs:
        patch = {"spec": {"allKeys": None, "mapping": [{"key": "KEY_0", "secretKey": EDITED_KEY}]}}
        sent = time.monotonic()
        custom.patch_namespaced_custom_object(
            "hikyo.dev",
            "v1alpha1",
            namespace,
            "hikyosecrets",
            name,
            patch,
            _request_timeout=CALL_TIMEOUT,
        )
        while EDITED_KEY not in secret_data(core, namespace, f"{name}-env"):
            if time.monotonic() - sent > SPEC_EDIT_TIMEOUT:
                raise TimeoutError(f"spec edit of {namespace}/{name} not delivered in 60 s")
            time.sleep(POLL_SPEC_SECONDS)
        latencies.append(time.monotonic() - sent)
    return latencies


def p3_value_change(side: Side, crs: list[tuple[str, str]], timeout: float) -> list[float]:
    """Publishes a new revision (every value changed) and follows a WATCH of Secrets: seconds
    from the publish until each CR's target shows the new KEY_0. A watch costs the apiserver one
    event per Secret write; polling the targets cost it a GET per target and round, load enough
    to slow the operator it measured."""
    expected = base64.b64encode(key_items("-r2")[0]["value"].encode()).decode()
    pending = {(namespace, f"{name}-env") for namespace, name in crs}
    _, version = list_with_version(side.api, SECRETS)
    latencies = []
    published = time.monotonic()
    side.hikyo.publish(*side.world["scope"], key_items("-r2"))
    while pending:
        left = published + timeout - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{len(pending)} of {len(crs)} targets without the new value")
        answer = open_watch(side.api, SECRETS, version, max(1, min(WATCH_SECONDS, int(left))))
        try:
            if answer.status != 200:
                raise RuntimeError(f"the WATCH of Secrets answered {answer.status}")
            for kind, item in watch_events(answer.response):
                if kind == "ERROR":
                    raise RuntimeError(f"the WATCH of Secrets failed: {item.get('message')}")
                version = item["metadata"]["resourceVersion"]
                target = (item["metadata"].get("namespace"), item["metadata"].get("name"))
                if target in pending and (item.get("data") or {}).get("KEY_0") == expected:
                    latencies.append(time.monotonic() - published)
                    pending.discard(target)
                    if not pending:
                        break
        finally:
            # Closed, not released: a watch left mid-stream must not go back to the pool.
            answer.response.close()
    return latencies


def p2_p3(bench: Bench, n: int, run_p2: bool, run_p3: bool) -> None:
    """Embedded (or scaled with the p2_p3_workers option), CRs with resyncInterval = the resync
    option: cold start, settle, one idle period (P2), then spec edits one at a time and one
    published value change (P3), all under the resync load of the N CRs."""
    period, workers = bench.options.resync_seconds, bench.options.p2_p3_workers
    name = "+".join(p for p, on in (("p2", run_p2), ("p3", run_p3)) if on)
    with bench.side(
        f"{name}-{mode_label(workers)}-{n}", n, workers, period, run_lines=True
    ) as side:
        cold = cold_start(side, "P2/P3")
        seconds, settled = settle(side, period)
        log(f"{side.label}: settled in {seconds:.0f} s" + ("" if settled else " (gave up)"))
        common = {
            "n": n,
            "mode": mode_label(workers),
            "resync_seconds": period,
            "cold_seconds": cold["seconds"],
            "settle_seconds": round(seconds, 1),
            "settled": settled,
        }
        if not settled:
            bench.results["notes"].append(
                f"P2/P3: not every CR reported Synced=Current within {SETTLE_PERIODS} periods; "
                "the period may include first resyncs after delivery"
            )
        if run_p2:
            measured = p2_period(side, period)
            bench.results["scenarios"]["p2"] = {**common, **measured}
            log(
                f"P2: {measured['period']['apiserver_writes_total']} writes, "
                f"{measured['fetches_per_cr_per_period']} fetches per CR per period, "
                f"{measured['crs_not_fetched']} CRs not fetched"
            )
        if run_p3:
            k = max(1, min(bench.options.p3_samples, n // 2))
            edited = samples(side.world["crs"], k, 0)
            edits = p3_spec_edits(side, edited)
            set_of_edited = set(edited)
            # Every CR but the edited ones, whose targets now hold EDITED_0 instead of KEY_0.
            unedited = [cr for cr in side.world["crs"] if cr not in set_of_edited]
            values = p3_value_change(side, unedited, timeout=period * 3 + 60)
            spec, value = summary(edits, None), summary(values, period * JITTER_MAX)
            bench.results["scenarios"]["p3"] = {**common, "spec_edit": spec, "value_change": value}
            log(f"P3: p99 spec edit {spec['p99']:.2f} s, value change {value['p99']:.1f} s")


def summary(latencies: list[float], bound: float | None) -> dict[str, Any]:
    return {
        "samples": len(latencies),
        "p50": round(percentile(latencies, 50) or 0.0, 3),
        "p99": round(percentile(latencies, 99) or 0.0, 3),
        "max": round(max(latencies), 3),
        "bound_seconds": bound,
        "latencies": [round(x, 3) for x in latencies],
    }


# --- P5 ----------------------------------------------------------------------------------------


# What P5 keeps of each cold start: its time, memory, and what it cost (Redis, CPU).
P5_KEPT = (
    "seconds",
    "first_ready_seconds",
    "ready_after_seconds",
    "memory",
    "redis_total_per_cr",
    "redis_per_cr",
    "cpu_seconds",
    "cores_busy",
)


def p5(bench: Bench, n: int) -> dict[str, Any]:
    """Scaled cold starts with 1, 2 and 4 workers while every delivery answer is held back."""
    delay = bench.options.p5_delay_ms / 1000
    out: dict[str, Any] = {"n": n, "delay_ms": bench.options.p5_delay_ms, "runs": []}
    bench.results["scenarios"]["p5"] = out
    for workers in P5_WORKERS:
        with bench.side(f"p5-{workers}w-{n}", n, workers, delivery_delay=delay) as side:
            run = cold_start(side, "P5")
        out["runs"].append({"workers": workers, **{k: run[k] for k in P5_KEPT}})
    base = out["runs"][0]["seconds"]
    out["speedup"] = {str(r["workers"]): speedup(base, r["seconds"]) for r in out["runs"]}
    return out


# --- P8: sharded leaders (S4.1.8) ---------------------------------------------------------------

P8_SHARDS, P8_WORKERS, P8_VICTIM = 3, 2, 1
P8_EDITS_PER_SHARD = 10
P8_TAKEOVER_TIMEOUT = 120.0


def p8(bench: Bench, n: int) -> dict[str, Any]:
    """3 shard leaders and 2 shared workers: a cold start to all Ready (each leader's VmHWM),
    then shard 1's leader killed (-9) beside a standby. Spec edits sent to CRs of every shard at
    the kill: the other shards deliver theirs at once, shard 1's wait for its standby to take
    the Lease over. The workers' run records must show no two runs of a CR overlapping, and
    every CR ends Ready at its generation."""
    from tests.support.operator_harness import RUN_LINE
    from workers.shards import shard_of

    label = f"p8-sharded-{P8_SHARDS}x{P8_WORKERS}w-{n}"
    with bench.side(label, n, P8_WORKERS, run_lines=True, shards=P8_SHARDS) as side:
        run = cold_start(side, "P8", wait_reports=False)
        fleet = side.fleet
        standby = fleet.start_shard_leader(P8_VICTIM, label=f"standby-shard-{P8_VICTIM}")
        by_shard: dict[int, list[tuple[str, str]]] = {}
        for cr in side.world["crs"]:
            by_shard.setdefault(shard_of(cr[0], P8_SHARDS), []).append(cr)
        edited = {k: samples(crs, P8_EDITS_PER_SHARD, 7) for k, crs in by_shard.items()}
        victim = fleet.service(fleet.leader_label(P8_VICTIM))
        log(f"{label}: killing shard {P8_VICTIM}'s leader (pid {victim.pid})")
        victim.kill()
        killed = time.monotonic()
        with ThreadPoolExecutor(1) as watching:  # the takeover is timed while the edits go
            took_over = watching.submit(
                wait_leading, fleet, standby.name, killed + P8_TAKEOVER_TIMEOUT
            )
            latencies = spec_edits_at_once(side, edited)
            takeover = took_over.result()
        # Every CR, the edited ones at their new generation, Ready again.
        assert side.tracker is not None
        done = wait_ready(
            side.tracker,
            n,
            time.monotonic() + 120.0 + n * 0.05,
            lambda: [name for name in fleet.dead() if name != victim.name],
            lambda ready: log(f"{label}: {ready:,} of {n:,} Ready again"),
            [],
        )
        runs = [
            (m[2], float(m[3]), float(m[4]))
            for service in fleet.operator.services
            if service.name.startswith("worker-")
            for m in RUN_LINE.finditer(service.log())
        ]
        ready, total = ready_count(side.api)
        out = {
            "n": n,
            "shards": P8_SHARDS,
            "workers": P8_WORKERS,
            "cold": run,
            "crs_per_shard": {str(k): len(v) for k, v in sorted(by_shard.items())},
            "takeover_seconds": None if takeover is None else round(takeover - killed, 1),
            "edit_seconds": {
                str(k): [round(x, 2) for x in v] for k, v in sorted(latencies.items())
            },
            "overlapping_runs": overlapping(runs),
            "runs": len(runs),
            "ready_after": ready,
            "total": total,
            "all_ready_again_seconds": round(done - killed, 1),
        }
    bench.results["scenarios"]["p8"] = out
    return out


def spec_edits_at_once(
    side: Side, edited: dict[int, list[tuple[str, str]]]
) -> dict[int, list[float]]:
    """Every edit sent at once, then every target polled: seconds to delivery, per shard."""
    from kubernetes import client

    from k8s.slim_api import CoreV1

    core, custom = CoreV1(side.api), client.CustomObjectsApi(side.api)
    patch = {"spec": {"allKeys": None, "mapping": [{"key": "KEY_0", "secretKey": EDITED_KEY}]}}
    sent = time.monotonic()
    for crs in edited.values():
        for namespace, name in crs:
            custom.patch_namespaced_custom_object(
                "hikyo.dev", "v1alpha1", namespace, "hikyosecrets", name, patch,
                _request_timeout=CALL_TIMEOUT,
            )  # fmt: skip
    pending = {(k, cr) for k, crs in edited.items() for cr in crs}
    latencies: dict[int, list[float]] = {k: [] for k in edited}
    while pending:
        if time.monotonic() - sent > P8_TAKEOVER_TIMEOUT + SPEC_EDIT_TIMEOUT:
            raise TimeoutError(f"{len(pending)} spec edits not delivered")
        for shard, (namespace, name) in sorted(pending):
            if EDITED_KEY in secret_data(core, namespace, f"{name}-env"):
                latencies[shard].append(time.monotonic() - sent)
                pending.discard((shard, (namespace, name)))
        time.sleep(POLL_SPEC_SECONDS)
    return latencies


def wait_leading(fleet: Fleet, name: str, deadline: float) -> float | None:
    """When the run_operator ``name`` first serves hikyo_operator_leader 1 (polled every
    0.5 s; the bench's operators log at WARNING), None by the deadline."""
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if "\nhikyo_operator_leader 1.0" in fleet.operator.scrape(name):
                return time.monotonic()
        time.sleep(0.5)
    return None


def overlapping(runs: list[tuple[str, float, float]]) -> int:
    """Pairs of consecutive runs of one CR (by uid) where the later began before the earlier
    ended: S4.1.4 across shards and layouts, from the run records."""
    by_uid: dict[str, list[tuple[float, float]]] = {}
    for uid, start, end in runs:
        by_uid.setdefault(uid, []).append((start, end))
    count = 0
    for intervals in by_uid.values():
        intervals.sort()
        count += sum(1 for a, b in itertools.pairwise(intervals) if b[0] < a[1])
    return count
