"""`python -m bench` end to end at a tiny N (issue 13, deliverable 2): the cold starts against
the real local control plane, the devserver, Redis and PostgreSQL, the wait for every CR's
first status report, and P3's value change followed by a WATCH of Secrets. No figure is
asserted, only that each was measured and printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import REPO

N = 4


@pytest.mark.timeout(900)
def test_bench_p1_and_p3_run_and_print_every_figure(tmp_path: Path):
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "bench", "p1", "p3", "--n", str(N), "--resync", "10",
         "--p1-workers", "0,2", "--p3-samples", "2", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=840,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    results = json.loads(out.read_text())
    runs = results["scenarios"]["p1"]["sizes"][0]["runs"]
    # One scaled side is enough here: a third cold control plane would only repeat it.
    assert [(r["mode"], r["workers"]) for r in runs] == [("embedded", 0), ("scaled", 2)]
    for run in runs:  # all Ready, and every CR's first status report accepted
        assert run["seconds"] > 0 and run["reports_sent_seconds"] > 0
    value = results["scenarios"]["p3"]["value_change"]
    assert value["samples"] == N - 2  # every CR but the two spec-edited ones
    assert 0 < value["p50"] <= value["p99"]
    assert "reports all sent at" in result.stdout
    assert f"value → Secret, p50 / p99 of {N - 2} CRs" in result.stdout
