"""Run the test suite as parallel lanes: ``python tools/lanes.py [--lanes N] [pytest args]``.

Most of the integration suite waits (for watches, Leases, reconciles, a browser) rather than
computes, so several pytest processes side by side finish sooner than one. Each lane is a
whole pytest session of its own: its own control plane, Redis, PostgreSQL and devserver, and
its own final canary sweep (tests/integration/test_zz_canary_sweep.py runs last in every
integration lane, over that lane's tests). Lane 0 holds the tests that need no service.

The integration test files are split into lanes by their measured seconds
(tests/lane_seconds.json, longest first onto the least loaded lane), so the split is the same
on every run: no test depends on which lane it landed in or on the machine's speed. A file the
table does not know counts as ``DEFAULT_SECONDS``. Each lane's output goes to var/lanes/; when
all are done every lane's summary line and slowest tests are printed, then one total line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

REPO = Path(__file__).resolve().parents[1]
SECONDS_TABLE = REPO / "tests" / "lane_seconds.json"
SWEEP = "tests/integration/test_zz_canary_sweep.py"
SERVICE_FREE = ["tests/unit", "tests/queue", "tests/chart", "tests/tooling", "tests/bench",
                "tests/devserver"]  # fmt: skip
# The one long service-free file (the mutants' run, ~3 min of two jobs): balanced with the
# integration files instead of lengthening lane 0 by all of it.
MUTANTS = "tests/tooling/test_mutants.py"
DEFAULT_SECONDS = 30.0
# CI keeps both cores busy, so each runnable process gets its share. Lane 0 is one process
# that only computes; an integration lane is mostly waits between short bursts of its
# processes (operators, apiserver). Lowered by this much, the integration lanes give lane 0
# more of a core, so it no longer runs alone, on one core, after they have finished.
INTEGRATION_NICENESS = 5
LANE_TIMEOUT_SECONDS = 3600  # a lane that hangs is stopped; pytest-timeout stops a test first
SUMMARY = re.compile(r"^=+ .*\b(passed|failed|error|errors|skipped|deselected)\b.* =+$")


def _lowered_priority() -> None:
    os.nice(INTEGRATION_NICENESS)


def integration_files() -> list[str]:
    found = (REPO / "tests" / "integration").rglob("test_*.py")
    files = sorted(str(path.relative_to(REPO)) for path in found)
    return [f for f in files if f != SWEEP]


def split(files: list[str], lanes: int, seconds: dict[str, float]) -> list[list[str]]:
    """Longest first onto the least loaded lane; ties by lane number, so it is deterministic."""
    loads = [0.0] * lanes
    chosen: list[list[str]] = [[] for _ in range(lanes)]
    for name in sorted(files, key=lambda f: (-seconds.get(f, DEFAULT_SECONDS), f)):
        lane = min(range(lanes), key=lambda i: (loads[i], i))
        chosen[lane].append(name)
        loads[lane] += seconds.get(name, DEFAULT_SECONDS)
    return [sorted(files) for files in chosen]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lanes", type=int, default=4, help="integration lanes (default 4)")
    parser.add_argument(
        "--record", action="store_true", help="write each file's measured seconds to the table"
    )
    options, pytest_args = parser.parse_known_args(argv)
    if not 1 <= options.lanes <= 8:
        parser.error("--lanes is between 1 and 8")
    seconds = json.loads(SECONDS_TABLE.read_text()) if SECONDS_TABLE.exists() else {}
    balanced = split([*integration_files(), MUTANTS], options.lanes, seconds)
    lanes = [[*SERVICE_FREE, f"--ignore={MUTANTS}"]] + [
        [*files, SWEEP] for files in balanced if files
    ]
    out = REPO / "var" / "lanes"
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    running = []
    for index, paths in enumerate(lanes):
        log = (out / f"lane-{index}.log").open("w")
        basetemp = out / f"tmp-{index}"
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                   f"--basetemp={basetemp}", f"--junitxml={out / f'lane-{index}.xml'}",
                   "--durations=25", *pytest_args, *paths]  # fmt: skip
        env = {**os.environ, "HIKYO_LANE": str(index)}
        lower = _lowered_priority if index else None  # no thread here: preexec_fn is safe
        process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   preexec_fn=lower)  # fmt: skip
        running.append((index, log, process))
    failed = False
    for index, log, process in running:
        left = LANE_TIMEOUT_SECONDS - (time.monotonic() - started)
        try:
            code = process.wait(timeout=max(1.0, left))
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
            print(f"lane {index}: stopped after {LANE_TIMEOUT_SECONDS} s")
        log.close()
        failed |= code != 0
        _report(index, out / f"lane-{index}.log", code)
    total = time.monotonic() - started
    print(f"==== {len(lanes)} lanes {'FAILED' if failed else 'passed'} in {total:.0f} s ====")
    if options.record and not failed:
        measured = file_seconds(sorted(out.glob("lane-*.xml")))
        SECONDS_TABLE.write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(measured)} files' seconds to {SECONDS_TABLE.relative_to(REPO)}")
    return 1 if failed else 0


def file_seconds(reports: list[Path]) -> dict[str, float]:
    """Seconds per integration test file (and MUTANTS), from the lanes' JUnit reports (setup
    included)."""
    totals: dict[str, float] = {}
    mutants = MUTANTS.removesuffix(".py").split("/")
    for report in reports:
        for case in ElementTree.parse(report).iter("testcase"):
            module = (case.get("classname") or "").split(".")
            if module[:2] != ["tests", "integration"] and module[:3] != mutants:
                continue
            path = "/".join(module[: next(
                (i + 1 for i, part in enumerate(module) if part.startswith("test_")), len(module)
            )]) + ".py"  # fmt: skip
            totals[path] = round(totals.get(path, 0.0) + float(case.get("time") or 0.0), 1)
    return totals


def _report(index: int, log: Path, code: int) -> None:
    """The lane's slowest tests, failures and summary line (the whole log on a failure)."""
    text = log.read_text(errors="replace")
    print(f"\n---- lane {index} (exit {code}; whole log: {log.relative_to(REPO)}) ----")
    if code != 0:
        print(text)
        return
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "slowest" in line and "durations" in line),
                 None)  # fmt: skip
    if start is not None:
        shown = lines[start + 1 : start + 26]
        print("\n".join([lines[start], *(line for line in shown if not SUMMARY.match(line))]))
    table = next((i for i, line in enumerate(lines) if line.startswith("fault matrix (")), None)
    if table is not None:  # what each fault cost, e.g. when a killed worker's keys re-ran
        rows = lines[table:]
        end = next((i for i, r in enumerate(rows) if not r.strip() or r.startswith("=")), None)
        print("\n".join(rows[:end]))
    mutants = next((line for line in lines if line.startswith("mutants: ")), None)
    if mutants is not None:  # the lane where MUTANTS ran the mutants' table
        print(mutants)
    summary = next((line for line in reversed(lines) if SUMMARY.match(line)), None)
    print(summary or (lines[-1] if lines else "(no output)"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
