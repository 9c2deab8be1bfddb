"""Run the curated mutants: ``python tools/mutants.py [--check] [--only NAME] [--jobs N]``.

Each row of tools/mutants_table.py changes one exact snippet of one product file into a wrong
one and names the tests that must notice. For every row the tool copies the tree (the files git
tracks or would track, as they are in the working tree now) into a temporary directory, applies
the mutant there, runs only the row's tests against that copy (``pytest -x -q -p
no:cacheprovider``, with the row's timeout) and reports it killed (a test failed) or survived
(every named test passed). The working tree is never written: other people edit and test it
meanwhile.

A row whose original snippet is not found exactly once in its file is a stale row (the code
was refactored under it): it is named on one line and the run fails. So does a survivor, and
a run whose tests could not run at all (pytest's usage errors, no test selected, a crash).
``--check`` runs each row's tests on the unmutated copy instead: they must pass, or a kill
would prove nothing.

Exit status 0 only when every mutant was killed (or, with ``--check``, every row's tests pass
unmutated) and no row is stale. The last line is ``mutants: N killed, M survived``.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from mutants_table import MUTANTS, Mutant  # noqa: E402  (tools/ is no package)

# pytest's exit codes: 1 is "tests ran and some failed"; every other non-zero code means the
# tests did not run as named (interrupted, internal error, usage error, nothing collected).
TESTS_FAILED = 1
# The packages a mutant may touch; the copy must import these, never the working tree's.
PRODUCT_PACKAGES = ("workers", "k8s", "hikyo", "controlplane")
# What a test that needs Django raises when pytest-django did not set it up (rows run without it).
DJANGO_NOT_SET_UP = re.compile(r"ImproperlyConfigured|AppRegistryNotReady")
OUTPUT_TAIL_LINES = 30


@dataclass(frozen=True)
class Verdict:
    mutant: Mutant
    state: str  # "killed", "survived", "passed" / "failed" (--check), or "error"
    seconds: float
    output: str = ""


def stale_rows(rows: Sequence[Mutant], root: Path) -> list[str]:
    """One line per row the tree no longer matches (or that would change nothing)."""
    problems = []
    for row in rows:
        path = root / row.file
        if not path.is_file():
            problems.append(f"stale row {row.name!r}: {row.file} does not exist")
            continue
        found = path.read_text().count(row.original)
        if found != 1:
            problems.append(
                f"stale row {row.name!r}: its original snippet is found {found} times in "
                f"{row.file}, not once"
            )
        elif row.original == row.mutated:
            problems.append(f"stale row {row.name!r}: the mutated snippet is the original")
    return problems


def _tree_files(root: Path) -> list[str]:
    """Tracked files and untracked ones git would not ignore (work in progress included)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted({name for name in listed.split("\0") if name})


def copy_tree(root: Path, destination: Path) -> None:
    for name in _tree_files(root):
        source = root / name
        if not source.is_file() and not source.is_symlink():
            continue  # deleted in the working tree, not yet in the index
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)


def _environment(copy: Path) -> dict[str, str]:
    # No bytecode: a mutant and its restored original can share a size and an mtime second,
    # and a stale .pyc would then run the wrong code.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(copy), env.get("PYTHONPATH")]))
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)  # rows run without Django, whoever started the tool
    return env


def _imports_the_copy(copy: Path) -> None:
    """An editable install must not win over the copy: the mutant would never run."""
    probe = "; ".join(
        [f"import {name}; print({name}.__file__)" for name in PRODUCT_PACKAGES]
    )  # fmt: skip
    shown = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=copy,
        env=_environment(copy),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    outside = [path for path in shown if not Path(path).resolve().is_relative_to(copy.resolve())]
    if outside:
        raise SystemExit(f"mutants: the copy imports {outside[0]}, not its own packages")


@contextmanager
def copies(root: Path, count: int) -> Iterator[queue.Queue[Path]]:
    """``count`` copies of the tree, one per job, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="hikyo-mutants-") as scratch:
        made: queue.Queue[Path] = queue.Queue()
        for index in range(count):
            copy = Path(scratch) / f"tree-{index}"
            copy_tree(root, copy)
            _imports_the_copy(copy)
            made.put(copy)
        yield made


def _pytest(row: Mutant, copy: Path) -> tuple[int | None, str, float]:
    """The row's tests in ``copy``: pytest's exit code (None: the row's timeout passed)."""
    # The table's 51 rows each start pytest once, so its start-up is most of the run: without
    # hypothesis' plugin (@given works without it) and pytest-django (no row's unit tests use
    # Django; its set-up imports the whole dashboard) a row costs 0.9 CPU s instead of 2.3.
    # pytest-django's ini key is then unknown, hence the warning filter.
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               "-p", "no:hypothesispytest", "-p", "no:django",
               "-W", "ignore::pytest.PytestConfigWarning",
               f"--basetemp={copy / '.pytest-tmp'}", *row.tests]  # fmt: skip
    if row.select:
        command += ["-k", row.select]
    started = time.monotonic()
    # A session of its own, so a timeout also stops what the tests started (renderer children).
    process = subprocess.Popen(
        command,
        cwd=copy,
        env=_environment(copy),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=row.timeout)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = None
    return code, output, time.monotonic() - started


def run_row(row: Mutant, copy: Path, *, check: bool) -> Verdict:
    """Mutate ``row.file`` in ``copy`` (unless ``check``), run the tests, restore the file."""
    path = copy / row.file
    original = path.read_text()
    if not check:
        path.write_text(original.replace(row.original, row.mutated, 1))
    try:
        code, output, seconds = _pytest(row, copy)
    finally:
        path.write_text(original)
    if code is None:
        # A mutant that makes its tests hang is noticed too, but say so: a slow host looks alike.
        state = "failed" if check else "killed"
        return Verdict(row, state, seconds, f"timed out after {row.timeout:.0f} s\n{output}")
    if code == 0:
        return Verdict(row, "passed" if check else "survived", seconds, output)
    if code == TESTS_FAILED and DJANGO_NOT_SET_UP.search(output):
        # Failed for want of Django, not because of the mutant: no verdict on it.
        return Verdict(row, "error", seconds, f"the row's tests need Django\n{output}")
    if code == TESTS_FAILED:
        return Verdict(row, "failed" if check else "killed", seconds, output)
    return Verdict(row, "error", seconds, f"pytest exit status {code}\n{output}")


def _tail(output: str) -> str:
    lines = output.rstrip().splitlines()[-OUTPUT_TAIL_LINES:]
    return "\n".join("    " + line for line in lines)


def report(verdict: Verdict, *, check: bool, show: bool = False) -> None:
    row = verdict.mutant
    print(f"{verdict.state:<9} {row.name:<38} {verdict.seconds:5.1f} s  {row.file}: {row.breaks}")
    unexpected = {"survived", "error"} | ({"failed"} if check else set())
    if verdict.state in unexpected or show:
        print(f"    tests: {' '.join(row.tests)}{f' -k {row.select!r}' if row.select else ''}")
        print(_tail(verdict.output))
    elif verdict.output.startswith("timed out"):
        print(f"    ({verdict.output.splitlines()[0]})")
    sys.stdout.flush()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="run each row's tests unmutated: they must pass"
    )
    parser.add_argument(
        "--only", action="append", default=[], metavar="NAME", help="only this row (repeatable)"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="rows run at once, each in its own copy of the tree (default 2)",
    )
    parser.add_argument("--list", action="store_true", help="print the table and stop")
    parser.add_argument(
        "--show", action="store_true", help="print every row's test output (which test killed it)"
    )
    options = parser.parse_args(argv)
    unknown = sorted(set(options.only) - {row.name for row in MUTANTS})
    if unknown:
        parser.error(f"no row named {', '.join(unknown)}")
    rows = [row for row in MUTANTS if not options.only or row.name in options.only]
    if options.list:
        for row in rows:
            print(f"{row.name}: {row.file}: {row.breaks}\n    tests: {' '.join(row.tests)}"
                  + (f" -k {row.select!r}" if row.select else ""))  # fmt: skip
        return 0
    started = time.monotonic()
    problems = stale_rows(rows, REPO)
    for line in problems:
        print(f"mutants: {line}")
    runnable = [row for row in rows if not stale_rows([row], REPO)]
    verdicts: list[Verdict] = []
    jobs = max(1, min(options.jobs, len(runnable)))
    with copies(REPO, jobs if runnable else 0) as free, ThreadPoolExecutor(jobs) as pool:

        def job(row: Mutant) -> Verdict:
            copy = free.get()
            try:
                return run_row(row, copy, check=options.check)
            finally:
                free.put(copy)

        for verdict in pool.map(job, runnable):
            report(verdict, check=options.check, show=options.show)
            verdicts.append(verdict)
    count = {state: sum(v.state == state for v in verdicts) for state in
             ("killed", "survived", "passed", "failed", "error")}  # fmt: skip
    errors = count["error"] + len(problems)
    elapsed = f"in {time.monotonic() - started:.0f} s"
    if options.check:
        print(f"mutants --check: {count['passed']} rows pass unmutated, {count['failed']} fail"
              + (f", {errors} errors" if errors else "") + f" ({elapsed})")  # fmt: skip
        return 0 if count["failed"] == 0 and errors == 0 else 1
    print(f"mutants: {count['killed']} killed, {count['survived']} survived"
          + (f", {errors} errors" if errors else "") + f" ({elapsed})")  # fmt: skip
    return 0 if count["survived"] == 0 and errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
