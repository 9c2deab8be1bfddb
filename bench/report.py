"""The runner's figures as a markdown table and a JSON file: pure functions over the results
dict that ``bench.scenarios`` fills (no cluster, no processes)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

LIMIT_MIB = 128  # the chart's memory limit per container (issue 13, S9.6)
CAPACITY_BOUND = 1.5  # P9: measured capacity ÷ needed for a 5-minute resync (issue 37)
TIMES = "\u00d7"  # the multiplication sign of ratios, as the issue writes them


# --- arithmetic --------------------------------------------------------------------------------


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base to two places; None when either is missing or the base is not positive."""
    if value is None or base is None or base <= 0:
        return None
    return round(value / base, 2)


def speedup(base_seconds: float | None, seconds: float | None) -> float | None:
    """How many times faster ``seconds`` is than ``base_seconds``."""
    return ratio(base_seconds, seconds)


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile (the smallest sample with at least q % of the samples at or
    below it); None for no samples. On 30 samples p99 is the largest."""
    ordered = sorted(values)
    if not ordered:
        return None
    if not 0 < q <= 100:
        raise ValueError("q is a percentage in (0, 100]")
    rank = math.ceil(q / 100 * len(ordered))
    return ordered[rank - 1]


def per_cr(counts: dict[str, int], n: int) -> dict[str, float]:
    """Each count divided by ``n`` (two places), largest first, zero counts dropped."""
    if n <= 0:
        raise ValueError("n is positive")
    kept = [(k, v) for k, v in counts.items() if v > 0]
    return {k: round(v / n, 2) for k, v in sorted(kept, key=lambda kv: (-kv[1], kv[0]))}


# --- formatting --------------------------------------------------------------------------------


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}{TIMES}"


def fmt_mib(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} MiB"


def fmt_count(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def fmt_n(n: int) -> str:
    return f"N = {n:,}"


def cell(text: str) -> str:
    """A table cell: pipes escaped, no line breaks."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(cell(h) for h in header) + " |"]
    lines.append("|" + "---|" * len(header))
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row {row!r} has {len(row)} cells, the header {len(header)}")
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return "\n".join(lines)


def run_name(run: dict[str, Any]) -> str:
    """ "embedded" or "scaled, 2 workers"."""
    if run["mode"] == "embedded":
        return "embedded"
    workers = run["workers"]
    return f"scaled, {workers} worker{'s' if workers != 1 else ''}"


# --- rows per scenario ---------------------------------------------------------------------------


def p1_rows(p1: dict[str, Any]) -> list[list[str]]:
    rows = []
    for size in p1.get("sizes", []):
        floor = size.get("floor") or {}
        one, eight = floor.get("1"), floor.get("8")
        bound = f"floor 1 thread {fmt_seconds(one)}; 8 threads {fmt_seconds(eight)}"
        for run in size.get("runs", []):
            rows.append(
                [
                    f"P1 {fmt_n(size['n'])}",
                    f"cold → all Ready, {run_name(run)}",
                    _with_reports(run),
                    bound,
                    f"{fmt_ratio(ratio(run.get('seconds'), one))} / "
                    f"{fmt_ratio(ratio(run.get('seconds'), eight))}",
                ]
            )
    return rows


def _with_reports(run: dict[str, Any]) -> str:
    """The cold start's seconds, and when every CR's first status report had been sent."""
    measured = fmt_seconds(run.get("seconds"))
    if "reports_sent_seconds" not in run:
        return measured
    sent = run["reports_sent_seconds"]
    reports = "not all sent" if sent is None else f"all sent at {fmt_seconds(sent)}"
    return f"{measured} (reports {reports})"


def mode_suffix(run: dict[str, Any]) -> str:
    """P2/P3 run embedded unless told otherwise (and did before they recorded a mode)."""
    mode = run.get("mode", "embedded")
    return "" if mode == "embedded" else f", {mode}"


def p2_rows(p2: dict[str, Any]) -> list[list[str]]:
    if "period" not in p2:
        return []
    period, n = p2["period"], p2["n"]
    where = (
        f"P2 {fmt_n(n)}{mode_suffix(p2)}, resync {p2['resync_seconds']:g} s, "
        f"window {period['seconds']:g} s"
    )
    writes = ", ".join(f"{k}: {v}" for k, v in period["apiserver_writes"].items()) or "none"
    return [
        [
            where,
            "apiserver writes in the unchanged window (Leases apart)",
            f"{fmt_count(period['apiserver_writes_total'])} ({writes}); "
            f"Lease writes {fmt_count(period['lease_writes'])}",
            "0 (S4.17)",
            "—",
        ],
        [
            where,
            "apiserver requests in the window (all verbs, Leases apart); per fetch, by verb",
            f"{fmt_count(period['apiserver_requests_total'])}; "
            + per_fetch(period.get("apiserver_requests") or {}, period["fetches"]),
            "—",
            "—",
        ],
        [
            where,
            "fetches per CR per resync period (window fetches / N, scaled to one period)",
            fmt_count(p2["fetches_per_cr_per_period"]),
            "1 (every CR once)",
            fmt_ratio(ratio(p2["fetches_per_cr_per_period"], 1)),
        ],
        [
            where,
            "status reports answered per CR in one resync period (heartbeats, S7.4)",
            fmt_count(p2.get("reports_per_cr_per_period")),
            "—",
            "—",
        ],
        *(
            [
                [
                    where,
                    "share of all cores busy in the window (every process, heartbeats included)",
                    fmt_count(p2["cores_busy"]),
                    "—",
                    "—",
                ]
            ]
            if p2.get("cores_busy") is not None
            else []
        ),
        [
            where,
            "CRs not fetched in the window",
            f"{fmt_count(p2['crs_not_fetched'])} of {n:,}",
            "0",
            "—",
        ],
    ]


def per_fetch(requests: dict[str, int], fetches: int) -> str:
    """``4.02 per fetch: GET secrets 2.01, ...``, the largest first. WATCHes are long-lived
    streams, not requests a fetch makes, and a share under 0.01 is left out as noise."""
    if not fetches:
        return "no fetch"
    made = {name: n for name, n in requests.items() if not name.startswith("WATCH")}
    parts = ", ".join(f"{name} {share:g}" for name, share in per_cr(made, fetches).items() if share)
    return f"{sum(made.values()) / fetches:.2f} per fetch: {parts or 'none'}"


def p3_rows(p3: dict[str, Any]) -> list[list[str]]:
    rows = []
    n = p3.get("n", 0)
    for key, label in (("spec_edit", "spec edit → Secret"), ("value_change", "value → Secret")):
        measured = p3.get(key)
        if not measured:
            continue
        bound_s = measured.get("bound_seconds")
        rows.append(
            [
                f"P3 {fmt_n(n)}{mode_suffix(p3)}",
                f"{label}, p50 / p99 of {measured['samples']} CRs",
                f"{fmt_seconds(measured['p50'])} / {fmt_seconds(measured['p99'])}",
                "—" if bound_s is None else f"resync {TIMES} 1.1 = {fmt_seconds(bound_s)}",
                "—" if bound_s is None else f"p99 {fmt_ratio(ratio(measured['p99'], bound_s))}",
            ]
        )
    return rows


def memory_summary(processes: list[dict[str, Any]]) -> tuple[str, float | None]:
    """("operator 120.9 MiB; worker-1 96.1 + children 122.0/121.8 MiB", the largest VmHWM)."""
    parts: dict[str, list[str]] = {}
    largest = None
    for row in processes:
        hwm = row["vmhwm_mib"]
        largest = hwm if largest is None else max(largest, hwm)
        parts.setdefault(row["label"], []).append(f"{hwm:.1f}")
    text = []
    for label, values in parts.items():
        main, children = values[0], values[1:]
        text.append(
            f"{label} {main}" + (f" + children {'/'.join(children)}" if children else "") + " MiB"
        )
    return "; ".join(text), largest


def p4_rows(p4: dict[str, Any]) -> list[list[str]]:
    rows = []
    for size in p4.get("sizes", []):
        for run in size.get("runs", []):
            summary, largest = memory_summary(run.get("processes", []))
            rows.append(
                [
                    f"P4 {fmt_n(size['n'])}",
                    f"VmHWM per process, {run_name(run)} ({run.get('source', 'own run')})",
                    summary or "—",
                    f"{LIMIT_MIB} MiB each",
                    f"largest {fmt_ratio(ratio(largest, LIMIT_MIB))}",
                ]
            )
            for point in run.get("periods", []):
                if point["periods"] == 2:
                    continue  # only its RSS, for the growth into the third
                summary, largest = memory_summary(point.get("processes", []))
                rows.append(
                    [
                        f"P4 {fmt_n(size['n'])}",
                        f"VmHWM per process after {point['periods']} resync period(s) of "
                        f"{size.get('resync_seconds', '?')} s, {run_name(run)}",
                        summary or "—",
                        f"{LIMIT_MIB} MiB each",
                        f"largest {fmt_ratio(ratio(largest, LIMIT_MIB))}",
                    ]
                )
            growth = period_growth(run.get("periods", []))
            if growth is not None:
                rows.append(
                    [
                        f"P4 {fmt_n(size['n'])}",
                        f"VmRSS growth from the second resync period to the third, {run_name(run)}",
                        f"{growth:+.1f} %",
                        "≤ 2 %",
                        "met" if growth <= 2.0 else "not met",
                    ]
                )
            pods = run.get("pods") or {}
            if pods:
                rows.append(
                    [
                        f"P4 {fmt_n(size['n'])}",
                        f"peak per pod (its process tree in one container), {run_name(run)}",
                        "; ".join(f"{label} {mib:.1f} MiB" for label, mib in pods.items()),
                        f"{LIMIT_MIB} MiB each (the chart's limit)",
                        f"largest {fmt_ratio(ratio(max(pods.values()), LIMIT_MIB))}",
                    ]
                )
    return rows


def period_growth(periods: list[dict[str, Any]]) -> float | None:
    """The main processes' VmRSS, summed, from the last period but one to the last, %."""
    if len(periods) < 2:
        return None

    def rss(point: dict[str, Any]) -> float:
        return sum(r.get("vmrss_now_mib", 0.0) for r in point["processes"] if r["role"] == "main")

    first, last = rss(periods[-2]), rss(periods[-1])
    return 100.0 * (last - first) / first if first else None


def p5_rows(p5: dict[str, Any]) -> list[list[str]]:
    runs = p5.get("runs", [])
    if not runs:
        return []
    base = next((r["seconds"] for r in runs if r["workers"] == 1), None)
    workers = " → ".join(str(r["workers"]) for r in runs)
    rows = [
        [
            f"P5 {fmt_n(p5['n'])}",
            f"cold → all Ready, {workers} workers, {p5['delay_ms']:g} ms per delivery",
            " → ".join(fmt_seconds(r["seconds"]) for r in runs),
            "ideal " + " / ".join(f"{r['workers']}{TIMES}" for r in runs if r["workers"] != 1),
            " / ".join(fmt_ratio(speedup(base, r["seconds"])) for r in runs if r["workers"] != 1),
        ]
    ]
    if all(r.get("cores_busy") is not None for r in runs):  # runs recorded before it have none
        most = runs[-1]
        spent = ", ".join(f"{kind} {s:.1f} s" for kind, s in most["cpu_seconds"].items())
        rows.append(
            [
                f"P5 {fmt_n(p5['n'])}",
                f"CPU until all Ready: share of the cores busy, {workers} workers; CPU-s by "
                f"process, {most['workers']} workers",
                " → ".join(f"{r['cores_busy']:.0%}" for r in runs) + f"; {spent}",
                "—",
                "—",
            ]
        )
    if all(r.get("first_ready_seconds") is not None for r in runs):  # older runs have none
        rows.append(
            [
                f"P5 {fmt_n(p5['n'])}",
                f"launch → first CR Ready (the part no worker shortens), {workers} workers",
                " → ".join(fmt_seconds(r["first_ready_seconds"]) for r in runs),
                "—",
                "—",
            ]
        )
    if all("redis_total_per_cr" in r for r in runs):  # runs recorded before it have none
        rows.append(
            [
                f"P5 {fmt_n(p5['n'])}",
                f"Redis commands per CR until all Ready, {workers} workers (Lua's own included)",
                " → ".join(fmt_count(r["redis_total_per_cr"]) for r in runs),
                "—",
                "—",
            ]
        )
    return rows


def p7_rows(p7: dict[str, Any]) -> list[list[str]]:
    if "per_cr" not in p7:
        return []
    where = f"P7 {fmt_n(p7['n'])}"
    top = ", ".join(f"{k} {v:g}" if v >= 0.01 else f"{k} <0.01" for k, v in p7["per_cr"].items())
    return [
        [
            where,
            f"apiserver requests per reconcile, {p7['source']} (Leases, WATCHes apart)",
            fmt_count(p7["total_per_cr"]),
            "floor 2 (Secret create, status patch)",
            fmt_ratio(ratio(p7["total_per_cr"], 2)),
        ],
        [where, "by verb and resource, per CR", top or "—", "—", "—"],
        [where, "Lease requests per CR", fmt_count(p7.get("lease_per_cr")), "—", "—"],
        [
            where,
            "CRs run more than once until all Ready",
            fmt_count(p7.get("crs_run_again")),
            "0",
            "—",
        ],
        [
            where,
            "apiserver requests per CR until every first status report was sent",
            fmt_count(p7.get("total_with_reports_per_cr")),
            "7.5 (issue 37)",
            _met(p7.get("total_with_reports_per_cr"), 7.5),
        ],
    ]


def _met(value: float | None, bound: float) -> str:
    if value is None:
        return "—"
    return "met" if value <= bound else "NOT met"


# What each figure measures, printed under the table for the scenarios that ran.
NOTES = {
    "p1": (
        "P1: seconds from launching run_operator (its boot included; scaled: the celery "
        "workers booted first and idle, each with its pool started) to every HikyoSecret "
        "Ready=True at its generation, seen through one LIST and a WATCH; the CRs exist "
        "before the start. Floor: after the embedded operator stopped, in the same "
        "world, per CR one HTTPS fetch of the same delivery (kept-alive), one Secret create, "
        "one status merge-patch writing Ready=True at the CR's generation (the state P1 waits "
        "for); ratio = operator seconds / floor seconds (1 thread / 8 threads). "
        "Status reports yield to reconciles (S7.4): in brackets, the seconds until the "
        "devserver had accepted one report per CR (not part of the ratio)."
    ),
    "fetch_qps": (
        "Every operator run has HIKYO_OPERATOR_FETCH_QPS={qps} and _BURST={burst}: at the "
        "default 10/s per instance a cold start of 1,000 CRs would measure the S4.1.6 pace."
    ),
    "p2": (
        "P2: embedded (scaled where the row says so), every CR resyncInterval {resync} s; "
        "after the cold start, at least one "
        "period and until every CR is Synced=Current, then one window of resyncInterval "
        "{times} 1.1 (the jitter's upper bound, S4.16: an operator holding the interval runs "
        "every CR in it) with the bench idle. Writes = apiserver_request_total deltas of "
        "verbs other than GET/LIST/WATCH, Leases counted apart; fetches = delivery GETs the "
        "devserver answered; CRs not fetched = CRs with no reconcile run ending in the window "
        "(the runner's run lines)."
    ),
    "p3": (
        "P3: in the P2 run, under its resync load. Spec edit: one CR at a time, seconds from "
        "sending the merge patch (allKeys → a mapping KEY_0 → EDITED_0) until a GET of its "
        "target (every 0.1 s) shows EDITED_0. Value: one new revision published on the "
        "devserver (every value changed), seconds until a WATCH of Secrets shows each CR's "
        "target with the new KEY_0 (every CR, not a sample). Nearest-rank p50/p99."
    ),
    "p4": (
        "P4: VmHWM (lifetime peak RSS) of every process of the operator (run_operator, each "
        "celery worker's main process and its prefork children), read from "
        "/proc/<pid>/status every 0.5 s over the process tree until all Ready. A prefork "
        "child's RSS counts the pages it still shares with its parent (copy-on-write), so the "
        "processes' peaks do not add up to the pod's memory. Peak per pod: the largest of "
        "the same samples of the main process's VmRSS plus each prefork child's private "
        "pages (smaps_rollup), what one container running that tree holds; with the threads "
        "pool (the chart's default) a worker is one process. Then, its CRs resyncing every "
        "--resync seconds with nothing changed, the same after the first and the third resync "
        "period (each 1.1 x resync), and the main processes' VmRSS growth from the second "
        "period to the third (issue 52)."
    ),
    "soak": (
        "Soak: a cold start as P1, then --soak-minutes of unchanged resyncs (every --resync "
        "seconds) with each main process's VmRSS read from /proc/<pid>/status once a minute; "
        "the slope is the least-squares fit of those readings taken from the second resync "
        "period on, per period, as a percentage of the first of them (issue 52)."
    ),
    "p5": (
        "P5: scaled cold starts as P1 with 1, 2 and 4 celery workers while the devserver holds "
        "every delivery answer back {delay} ms (Fault.slow on the delivery route); "
        "ratio = 1-worker seconds / k-worker seconds."
    ),
    "p8": (
        "P8: scaled with 3 shard leaders (HIKYO_OPERATOR_SHARDS=3) sharing 2 celery workers; the "
        "cold start as P1 and VmHWM as P4. Then a standby of shard 1 starts, shard 1's leader is "
        "killed -9 (its Lease is not released) and 10 CRs of each shard get a spec edit at once: "
        "seconds from the edits to each target showing EDITED_0, per shard, and from the kill to "
        "the standby serving hikyo_operator_leader 1. Overlaps: consecutive runs of one CR (the "
        "workers' run lines) where the later began before the earlier ended."
    ),
    "p9": (
        "P9: every CR resyncInterval 10 s (S4.16's least), so the due queue never empties; after "
        "the cold start and until every CR is Synced=Current, one window with the bench idle: "
        "capacity = reconcile runs ending in it (the runner's run lines) a second; needed = "
        "N / 300 s; the window is S7.4's heartbeat period (5 min), in which a steady state "
        "sends every CR's heartbeat once, and the row says how many it held (a saturated queue "
        "holds back the heartbeats that cannot ride on a run); CPU by process from /proc "
        "(kube-apiserver and etcd included)."
    ),
    "p7": (
        "P7: apiserver_request_total deltas over the embedded cold start divided by N, Leases "
        "and WATCHes apart (the bench's own LIST, WATCHes and /metrics scrape taken out; the "
        "kube-controller-manager's few requests in the window are in)."
    ),
}


def notes(results: dict[str, Any]) -> list[str]:
    """The definitions for the scenarios that ran, then the run's own remarks."""
    settings, ran = results.get("settings", {}), results.get("scenarios", {})
    out = []
    for name, text in NOTES.items():
        if name in ran or (name == "fetch_qps" and ran):
            out.append(
                text.format(
                    qps=f"{settings.get('fetch_qps', 0):g}",
                    burst=settings.get("fetch_burst", "?"),
                    resync=settings.get("resync_seconds", "?"),
                    delay=f"{settings.get('p5_delay_ms', 0):g}",
                    times=TIMES,
                )
            )
    return out + list(results.get("notes") or [])


def p8_rows(p8: dict[str, Any]) -> list[list[str]]:
    where = f"P8 {fmt_n(p8['n'])}"
    cold = p8.get("cold") or {}
    shards, workers = p8.get("shards"), p8.get("workers")
    summary, largest = memory_summary(cold.get("memory", []))
    edits = p8.get("edit_seconds") or {}
    per_shard = "; ".join(
        f"shard {k}: max {fmt_seconds(max(v) if v else None)}" for k, v in edits.items()
    )
    sizes = ", ".join(f"{k}: {v:,}" for k, v in (p8.get("crs_per_shard") or {}).items())
    return [
        [
            where,
            f"cold → all Ready, {shards} shard leaders, {workers} workers (CRs per shard {sizes})",
            fmt_seconds(cold.get("seconds")),
            "all Ready",
            "—",
        ],
        [where, "VmHWM per process, sharded", summary or "—", "leaders 256, workers 192 MiB",
         f"largest {fmt_mib(largest)}"],
        [
            where,
            "shard 1's leader killed -9 beside a standby: takeover; spec edits sent at the kill",
            f"takeover {fmt_seconds(p8.get('takeover_seconds'))}; {per_shard}",
            "only shard 1 waits",
            "—",
        ],
        [
            where,
            "overlapping runs of one CR (run records); CRs Ready after",
            f"{p8.get('overlapping_runs')} of {p8.get('runs', 0):,} runs; "
            f"{p8.get('ready_after', 0):,} of {p8.get('total', 0):,} Ready",
            "0 overlapping; all Ready",
            "met" if p8.get("overlapping_runs") == 0 and p8.get("ready_after") == p8.get("total")
            else "NOT met",
        ],
    ]  # fmt: skip


def _report_rate(run: dict[str, Any]) -> str:
    """The window's reports a second against the heartbeats a steady state sends (one per CR
    per P, S7.4), when the run recorded both."""
    if "heartbeats_needed_per_second" not in run:
        return ""
    return (
        f", {run['reports_per_second']:g}/s against "
        f"{run['heartbeats_needed_per_second']:g}/s of heartbeats"
    )


def p9_rows(p9: dict[str, Any]) -> list[list[str]]:
    rows = []
    for run in p9.get("runs", []):
        window = run["window_seconds"]
        where = f"P9 {fmt_n(p9['n'])}, {run['mode']}, resync 10 s, window {window:g} s"
        capacity = run.get("capacity_to_needed")
        by_verb = ", ".join(f"{k} {v:g}" for k, v in run["apiserver_per_run"].items())
        cpu = ", ".join(f"{k} {v:g}" for k, v in run["cpu_ms_per_run"].items())
        writes = ", ".join(f"{k}: {v}" for k, v in run["apiserver_writes"].items()) or "none"
        rows += [
            [
                where,
                "unchanged resyncs a second, queue saturated (capacity); needed for a 5-minute "
                "resync of N",
                f"{run['runs_per_second']:g}/s ({run['fetches']:,} fetches, "
                f"{run.get('reports', 0):,} status reports{_report_rate(run)}); "
                f"needed {run['needed_per_second']:g}/s",
                f"capacity ÷ needed ≥ {CAPACITY_BOUND:g} (issue 37)",
                f"{fmt_ratio(capacity)}: "
                + ("met" if capacity is not None and capacity >= CAPACITY_BOUND else "NOT met"),
            ],
            [
                where,
                "apiserver requests per run (Leases, WATCHes apart); writes in the window",
                f"{fmt_count(run['apiserver_per_run_total'])}: {by_verb or '—'}; writes {writes}",
                "writes 0 (S4.17)",
                "—",
            ],
            [
                where,
                "CPU ms per run, by process; share of all cores busy",
                f"{cpu or '—'}; {fmt_count(run['cores_busy'])}",
                "—",
                "—",
            ],
        ]
    return rows


def soak_rows(soak: dict[str, Any]) -> list[list[str]]:
    rows = []
    bound = soak.get("bound_percent_per_period", 2.0)
    for run in soak.get("runs", []):
        where = (
            f"soak {fmt_n(soak['n'])}, {run['mode']}, resync {run['resync_seconds']} s, "
            f"{len(run['processes'][0]['rss_mib']) if run['processes'] else 0} minutes"
        )
        for process in run["processes"]:
            rss, slope = process["rss_mib"], process["slope_percent_per_period"]
            rows.append(
                [
                    where,
                    f"{process['process']}: VmRSS MiB at minutes 1 / last / largest; slope "
                    "after the second period, % of its RSS per period",
                    f"{rss[0]:g} / {rss[-1]:g} / {max(rss):g}; "
                    + ("—" if slope is None else f"{slope:+g} %"),
                    f"slope ≤ {bound:g} % per period (issue 52)",
                    "—" if slope is None else ("met" if slope <= bound else "NOT met"),
                ]
            )
    return rows


ROWS = {
    "p1": p1_rows,
    "p2": p2_rows,
    "p3": p3_rows,
    "p4": p4_rows,
    "p5": p5_rows,
    "p7": p7_rows,
    "p8": p8_rows,
    "p9": p9_rows,
    "soak": soak_rows,
}


def figures_table(results: dict[str, Any]) -> str:
    rows: list[list[str]] = []
    for name, build in ROWS.items():
        if name in results.get("scenarios", {}):
            rows.extend(build(results["scenarios"][name]))
    return markdown_table(["Scenario", "Figure", "Measured", "Floor / bound", "Ratio"], rows)


def wall_table(results: dict[str, Any]) -> str:
    rows = [[name, fmt_seconds(seconds)] for name, seconds in results.get("wall", {}).items()]
    rows.append(["total", fmt_seconds(results.get("total_seconds"))])
    return markdown_table(["Scenario", "Wall time"], rows)


def render(results: dict[str, Any]) -> str:
    machine, settings = results.get("machine", {}), results.get("settings", {})
    load = "/".join(f"{x:.1f}" for x in machine.get("load_avg_start", ()))
    head = (
        f"`{results.get('command', 'python -m bench')}` — {results.get('started_at', '')}, "
        f"{machine.get('cores', '?')} cores, load average at start {load or '?'}"
    )
    parts = [head, "", figures_table(results), ""]
    remarks = notes(results)
    if remarks:
        parts += ["Notes:", *[f"- {note}" for note in remarks], ""]
    if settings:
        parts += ["Settings: " + ", ".join(f"{k} {v}" for k, v in settings.items()), ""]
    parts.append(wall_table(results))
    if results.get("error"):
        parts += ["", f"FAILED: {results['error']}"]
    return "\n".join(parts)


def write_json(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
