"""bench/report.py: the ratio arithmetic and the table/JSON of ``python -m bench`` (pure, no
cluster). The figures here are made up; no test measures or asserts a timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import report


def test_ratio_is_value_over_base_to_two_places():
    assert report.ratio(65.5, 28.5) == 2.3
    assert report.ratio(1, 3) == 0.33


@pytest.mark.parametrize(("value", "base"), [(None, 2.0), (2.0, None), (2.0, 0.0), (2.0, -1.0)])
def test_ratio_without_a_usable_base_is_none(value, base):
    assert report.ratio(value, base) is None


def test_speedup_is_the_base_over_the_faster_run():
    assert report.speedup(38.0, 23.9) == 1.59
    assert report.speedup(38.0, None) is None


def test_percentile_is_nearest_rank():
    samples = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert report.percentile(samples, 50) == 3.0
    assert report.percentile(samples, 99) == 5.0
    assert report.percentile(samples, 20) == 1.0
    assert report.percentile(samples, 21) == 2.0
    assert report.percentile(range(1, 101), 99) == 99
    assert report.percentile([], 50) is None


def test_percentile_refuses_a_q_outside_0_to_100():
    with pytest.raises(ValueError):
        report.percentile([1.0], 0)
    with pytest.raises(ValueError):
        report.percentile([1.0], 101)


def test_per_cr_divides_drops_zeros_and_sorts_largest_first():
    counts = {"GET secrets": 5300, "POST events": 1000, "PUT leases": 0, "LIST deployments": 1130}
    assert list(report.per_cr(counts, 1000).items()) == [
        ("GET secrets", 5.3),
        ("LIST deployments", 1.13),
        ("POST events", 1.0),
    ]
    with pytest.raises(ValueError):
        report.per_cr(counts, 0)


def test_formatting_of_seconds_counts_and_ratios():
    assert report.fmt_seconds(0.163) == "0.16 s"
    assert report.fmt_seconds(65.54) == "65.5 s"
    assert report.fmt_seconds(None) == "—"
    assert report.fmt_count(1000) == "1,000"
    assert report.fmt_count(0.31) == "0.31"
    assert report.fmt_ratio(2.3) == "2.30\u00d7"
    assert report.fmt_n(5000) == "N = 5,000"


def test_markdown_table_escapes_pipes_and_checks_row_width():
    table = report.markdown_table(["a", "b"], [["x|y", "line\nbreak"]])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| x\\|y | line break |"]
    with pytest.raises(ValueError):
        report.markdown_table(["a", "b"], [["only one"]])


def test_memory_summary_groups_children_under_their_worker():
    processes = [
        {"label": "operator", "role": "main", "pid": 10, "vmhwm_mib": 120.9},
        {"label": "worker-1", "role": "main", "pid": 11, "vmhwm_mib": 96.0},
        {"label": "worker-1", "role": "child", "pid": 12, "vmhwm_mib": 122.0},
        {"label": "worker-1", "role": "child", "pid": 13, "vmhwm_mib": 121.5},
    ]
    text, largest = report.memory_summary(processes)
    assert text == "operator 120.9 MiB; worker-1 96.0 + children 122.0/121.5 MiB"
    assert largest == 122.0


def results() -> dict:
    """A results dict shaped as bench/scenarios.py fills it."""
    memory = [{"label": "operator", "role": "main", "pid": 1, "vmhwm_mib": 139.0}]
    return {
        "command": "python -m bench",
        "started_at": "2026-01-01 00:00:00 +0000",
        "machine": {"cores": 2, "load_avg_start": [1.0, 2.0, 3.0]},
        "settings": {"fetch_qps": 1000.0, "fetch_burst": 2000, "resync_seconds": 30,
                     "p5_delay_ms": 50.0},
        "scenarios": {
            "p1": {
                "sizes": [
                    {
                        "n": 1000,
                        "floor": {"1": 28.5, "8": 15.0},
                        "runs": [
                            {"mode": "embedded", "workers": 0, "seconds": 57.0},
                            {"mode": "scaled", "workers": 2, "seconds": 42.75},
                            {
                                "mode": "scaled",
                                "workers": 4,
                                "seconds": 30.0,
                                "reports_sent_seconds": 36.5,
                            },
                            {
                                "mode": "scaled",
                                "workers": 8,
                                "seconds": 30.0,
                                "reports_sent_seconds": None,
                            },
                        ],
                    }
                ]
            },
            "p2": {
                "n": 1000,
                "period": {
                    "seconds": 33,
                    "apiserver_writes": {},
                    "apiserver_writes_total": 0,
                    "lease_writes": 15,
                    "apiserver_requests_total": 2797,
                    "apiserver_requests": {
                        "GET secrets": 620, "LIST hikyosecrets": 310, "WATCH pods": 3
                    },
                    "fetches": 310,
                },
                "resync_seconds": 30,
                "fetches_per_cr": 0.34,
                "fetches_per_cr_per_period": 0.31,
                "reports_per_cr_per_period": 0.45,
                "crs_not_fetched": 692,
                "cores_busy": 0.61,
            },
            "p3": {
                "n": 1000,
                "spec_edit": {"samples": 30, "p50": 0.16, "p99": 0.23, "bound_seconds": None},
                "value_change": {"samples": 30, "p50": 20.0, "p99": 66.0, "bound_seconds": 33.0},
            },
            "p4": {"sizes": [{"n": 1000, "runs": [
                {"mode": "embedded", "workers": 0, "source": "from P1", "processes": memory},
                {"mode": "scaled", "workers": 2, "source": "from P1", "processes": memory,
                 "pods": {"operator": 100.0, "worker-1": 192.0, "worker-2": 96.5}},
            ]}]},
            "p5": {
                "n": 300,
                "delay_ms": 50.0,
                "runs": [
                    {
                        "workers": 1,
                        "seconds": 38.0,
                        "first_ready_seconds": 2.1,
                        "redis_total_per_cr": 83.61,
                        "cores_busy": 0.4,
                        "cpu_seconds": {"kube-apiserver": 11.0},
                    },
                    {
                        "workers": 2,
                        "seconds": 19.0,
                        "first_ready_seconds": 2.2,
                        "redis_total_per_cr": 82.84,
                        "cores_busy": 0.755,
                        "cpu_seconds": {"kube-apiserver": 10.0},
                    },
                    {
                        "workers": 4,
                        "seconds": 10.0,
                        "first_ready_seconds": 2.4,
                        "redis_total_per_cr": 84.29,
                        "cores_busy": 0.97,
                        "cpu_seconds": {"kube-apiserver": 8.2, "celery workers": 7.5},
                    },
                ],
            },
            "p7": {
                "n": 1000,
                "source": "P1 embedded cold start",
                "per_cr": {"GET secrets": 5.3, "POST secrets": 1.0, "GET namespaces": 0.0},
                "total_per_cr": 13.6,
                "lease_per_cr": 0.01,
                "crs_run_again": 3,
            },
        },
        "notes": ["P2/P3: a remark of this run"],
        "wall": {"p1": 300.0, "p2+p3": 200.0},
        "total_seconds": 500.5,
    }  # fmt: skip


def rows_of(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split(" | ")]
        for line in text.splitlines()
        if line.startswith("| ")
    ]


def test_render_puts_each_figure_with_its_floor_and_ratio():
    rows = rows_of(report.render(results()))
    by_figure = {(r[0], r[1]): r[2:] for r in rows if len(r) == 5}
    assert by_figure[("P1 N = 1,000", "cold → all Ready, embedded")] == [
        "57.0 s",
        "floor 1 thread 28.5 s; 8 threads 15.0 s",
        "2.00\u00d7 / 3.80\u00d7",
    ]
    assert by_figure[("P1 N = 1,000", "cold → all Ready, scaled, 2 workers")][2] == (
        "1.50\u00d7 / 2.85\u00d7"
    )
    assert by_figure[("P1 N = 1,000", "cold → all Ready, scaled, 4 workers")][0] == (
        "30.0 s (reports all sent at 36.5 s)"
    )
    assert by_figure[("P1 N = 1,000", "cold → all Ready, scaled, 8 workers")][0] == (
        "30.0 s (reports not all sent)"
    )
    p2 = "P2 N = 1,000, resync 30 s, window 33 s"
    assert by_figure[(p2, "CRs not fetched in the window")][0] == "692 of 1,000"
    busy = "share of all cores busy in the window (every process, heartbeats included)"
    assert by_figure[(p2, busy)][0] == "0.61"
    writes = by_figure[(p2, "apiserver writes in the unchanged window (Leases apart)")]
    assert writes[0] == "0 (none); Lease writes 15"
    per_period = next(v for k, v in by_figure.items() if k[0] == p2 and "per resync" in k[1])
    assert per_period == ["0.31", "1 (every CR once)", "0.31\u00d7"]
    requests = next(v for k, v in by_figure.items() if k[0] == p2 and "per fetch" in k[1])
    assert requests[0] == "2,797; 3.00 per fetch: GET secrets 2, LIST hikyosecrets 1"
    reports = next(v for k, v in by_figure.items() if k[0] == p2 and "status reports" in k[1])
    assert reports[0] == "0.45"
    value = by_figure[("P3 N = 1,000", "value → Secret, p50 / p99 of 30 CRs")]
    assert value == ["20.0 s / 66.0 s", "resync \u00d7 1.1 = 33.0 s", "p99 2.00\u00d7"]
    p4 = by_figure[("P4 N = 1,000", "VmHWM per process, embedded (from P1)")]
    assert p4 == ["operator 139.0 MiB", "128 MiB each", "largest 1.09\u00d7"]
    # A run without pod figures (embedded from an older JSON) has no pod row.
    assert not any(
        k[0] == "P4 N = 1,000" and "embedded" in k[1] and "pod" in k[1] for k in by_figure
    )
    pods = next(v for k, v in by_figure.items() if k[0] == "P4 N = 1,000" and "per pod" in k[1])
    assert pods == [
        "operator 100.0 MiB; worker-1 192.0 MiB; worker-2 96.5 MiB",
        "128 MiB each (the chart's limit)",
        "largest 1.50\u00d7",
    ]
    p5 = next(v for k, v in by_figure.items() if k[0] == "P5 N = 300")
    assert p5 == ["38.0 s → 19.0 s → 10.0 s", "ideal 2\u00d7 / 4\u00d7", "2.00\u00d7 / 3.80\u00d7"]
    redis_figure = "Redis commands per CR until all Ready, 1 → 2 → 4 workers (Lua's own included)"
    redis_commands = by_figure[("P5 N = 300", redis_figure)]
    assert redis_commands[0] == "83.61 → 82.84 → 84.29"
    first = next(v for k, v in by_figure.items() if k[0] == "P5 N = 300" and "first" in k[1])
    assert first[0] == "2.10 s → 2.20 s → 2.40 s"
    cpu = next(v for k, v in by_figure.items() if k[0] == "P5 N = 300" and "CPU" in k[1])
    assert cpu[0] == "40% → 76% → 97%; kube-apiserver 8.2 s, celery workers 7.5 s"
    p7 = by_figure[
        (
            "P7 N = 1,000",
            "apiserver requests per reconcile, P1 embedded cold start (Leases, WATCHes apart)",
        )
    ]
    assert p7[2] == "6.80\u00d7"
    by_verb = by_figure[("P7 N = 1,000", "by verb and resource, per CR")]
    assert by_verb[0] == "GET secrets 5.3, POST secrets 1, GET namespaces <0.01"
    assert by_figure[("P7 N = 1,000", "CRs run more than once until all Ready")][0] == "3"


def test_render_lists_the_wall_times_notes_and_settings():
    text = report.render(results())
    rows = rows_of(text)
    assert ["p1", "300.0 s"] in rows
    assert ["p2+p3", "200.0 s"] in rows
    assert ["total", "500.5 s"] in rows
    assert "- P2/P3: a remark of this run" in text
    assert "HIKYO_OPERATOR_FETCH_QPS=1000 and _BURST=2000" in text
    assert "every delivery answer back 50 ms" in text
    assert "FAILED" not in text


def test_render_of_a_failed_run_says_so_and_keeps_what_was_measured():
    failed = results()
    failed["error"] = "TimeoutError: p1-embedded-1000: 900 of 1000 Ready after 1120 s"
    del failed["scenarios"]["p5"]
    text = report.render(failed)
    assert text.rstrip().endswith(
        "FAILED: TimeoutError: p1-embedded-1000: 900 of 1000 Ready after 1120 s"
    )
    assert "P5" not in text
    assert "cold → all Ready, embedded" in text


def test_write_json_creates_the_directory_and_round_trips(tmp_path: Path):
    path = tmp_path / "var" / "bench" / "latest.json"
    report.write_json(path, results())
    assert json.loads(path.read_text()) == results()


def test_overlapping_counts_only_runs_of_one_cr_that_overlap():
    from bench.scenarios import overlapping

    runs = [("a", 0.0, 2.0), ("a", 2.0, 3.0), ("b", 0.0, 5.0), ("a", 2.5, 4.0), ("b", 6.0, 7.0)]
    assert overlapping(runs) == 1  # a's third run began before its second ended
    assert overlapping([("a", 0.0, 1.0), ("b", 0.5, 1.5)]) == 0  # two CRs may run together


def test_runs_again_by_counts_crs_with_a_second_run_ended_by_then():
    from bench.scenarios import runs_again_by

    runs = [("a", 0.0, 1.0, "Ok"), ("a", 1.0, 2.0, "Ok"), ("b", 0.0, 1.0, "Ok")]
    runs += [("b", 5.0, 6.0, "Ok"), ("c", 0.0, 1.0, "Ok")]
    assert runs_again_by(runs, until=2.0) == 1  # b's second run ended after the cut
    assert runs_again_by(runs, until=6.0) == 2


def test_p8_rows_say_whether_the_takeover_kept_every_run_apart_and_every_cr_ready():
    p8 = {
        "n": 300,
        "shards": 3,
        "workers": 2,
        "cold": {"seconds": 12.0, "memory": [{"label": "operator-shard-0", "vmhwm_mib": 90.0}]},
        "crs_per_shard": {"0": 90, "1": 90, "2": 120},
        "takeover_seconds": 16.5,
        "edit_seconds": {"0": [0.4, 0.6], "1": [17.0, 18.2], "2": [0.5]},
        "overlapping_runs": 0,
        "runs": 640,
        "ready_after": 300,
        "total": 300,
    }
    rows = report.p8_rows(p8)
    text = report.markdown_table(["a", "b", "c", "d", "e"], rows)
    assert "takeover 16.5 s; shard 0: max 0.60 s; shard 1: max 18.2 s" in text
    assert "0 of 640 runs; 300 of 300 Ready" in text and rows[-1][-1] == "met"
    assert report.p8_rows({**p8, "overlapping_runs": 1})[-1][-1] == "NOT met"


def test_p9_rows_set_capacity_against_what_a_five_minute_resync_needs():
    run = {
        "mode": "embedded",
        "window_seconds": 60.0,
        "runs": 6000,
        "fetches": 6000,
        "reports": 120,
        "runs_per_second": 100.0,
        "needed_per_second": 66.7,
        "capacity_to_needed": 1.5,
        "apiserver_writes": {},
        "apiserver_per_run": {"GET secrets": 2.0, "GET hikyosecrets": 1.0},
        "apiserver_per_run_total": 3.0,
        "cpu_ms_per_run": {"kube-apiserver": 9.5, "run_operator": 8.0},
        "cores_busy": 0.97,
    }
    rows = report.p9_rows({"n": 20000, "runs": [run]})
    text = report.markdown_table(["a", "b", "c", "d", "e"], rows)
    assert "100/s (6,000 fetches, 120 status reports); needed 66.7/s" in text
    assert rows[0][-1] == "1.50\u00d7: met"
    assert "3: GET secrets 2, GET hikyosecrets 1; writes none" in text
    assert "kube-apiserver 9.5, run_operator 8" in text
    short = report.p9_rows({"n": 20000, "runs": [{**run, "capacity_to_needed": 1.49}]})
    assert short[0][-1] == "1.49\u00d7: NOT met"
    rates = {"reports_per_second": 32.5, "heartbeats_needed_per_second": 66.7}
    with_rates = report.p9_rows({"n": 20000, "runs": [{**run, **rates}]})
    assert "120 status reports, 32.5/s against 66.7/s of heartbeats); needed" in with_rates[0][2]


def test_p4_shows_the_steady_state_after_one_and_three_resync_periods_and_the_growth():
    """Issue 52: the columns after the first and the third resync period, and the RSS growth
    from the second period to the third against its 2 % bound."""
    from bench.report import p4_rows

    def point(count: int, rss: float) -> dict:
        row = {"label": "operator", "role": "main", "pid": 1, "vmhwm_mib": rss + 1}
        return {"periods": count, "processes": [{**row, "vmrss_now_mib": rss}], "pods": {}}

    p4 = {
        "sizes": [
            {
                "n": 1000,
                "resync_seconds": 30,
                "runs": [
                    {
                        "mode": "embedded",
                        "workers": 0,
                        "source": "own run",
                        "processes": [
                            {"label": "operator", "role": "main", "pid": 1, "vmhwm_mib": 95.0}
                        ],
                        "periods": [point(1, 95.0), point(2, 100.0), point(3, 103.0)],
                    }
                ],
            }
        ]
    }
    rows = {row[1]: row for row in p4_rows(p4)}
    after_first = rows["VmHWM per process after 1 resync period(s) of 30 s, embedded"]
    assert after_first[2] == "operator 96.0 MiB"
    assert "VmHWM per process after 2 resync period(s) of 30 s, embedded" not in rows
    growth = rows["VmRSS growth from the second resync period to the third, embedded"]
    assert growth[2:] == ["+3.0 %", "≤ 2 %", "not met"]
