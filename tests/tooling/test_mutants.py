"""The curated mutants (tools/mutants.py, tools/mutants_table.py; issue 51 item 6): the table
still matches the tree, a stale row is named on one line, and every mutant is killed by its
named tests. The last test runs the whole table (2 jobs, each row only its own tests) and hands
its summary line to this session's terminal summary (tests/tooling/conftest.py), so the CI
lane it runs in prints it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import mutants  # noqa: E402
from mutants_table import MUTANTS, Mutant  # noqa: E402

# The table's run, for the terminal summary (empty until the run test ran).
SUMMARY: list[str] = []
# Every row's own timeout bounds the run; this only stops a run that hangs as a whole.
RUN_TIMEOUT_SECONDS = 840


def test_every_row_matches_the_tree_and_names_tests_that_exist():
    assert mutants.stale_rows(MUTANTS, REPO) == []
    names = [row.name for row in MUTANTS]
    assert len(names) == len(set(names)), "row names are unique (--only picks by name)"
    for row in MUTANTS:
        assert row.breaks and row.tests, row.name
        for test in row.tests:
            assert (REPO / test.split("::")[0]).is_file(), f"{row.name}: {test} does not exist"


def test_a_row_whose_snippet_is_gone_or_repeated_is_named_on_one_line(tmp_path):
    (tmp_path / "module.py").write_text("a = 1\nb = 1\n")
    rows = [
        Mutant("gone", "module.py", "c = 1\n", "c = 2\n", "nothing", ("tests",)),
        Mutant("twice", "module.py", " = 1\n", " = 2\n", "nothing", ("tests",)),
        Mutant("fine", "module.py", "a = 1\n", "a = 2\n", "nothing", ("tests",)),
        Mutant("missing", "absent.py", "a", "b", "nothing", ("tests",)),
    ]
    assert mutants.stale_rows(rows, tmp_path) == [
        "stale row 'gone': its original snippet is found 0 times in module.py, not once",
        "stale row 'twice': its original snippet is found 2 times in module.py, not once",
        "stale row 'missing': absent.py does not exist",
    ]


def test_a_row_whose_tests_fail_for_want_of_django_is_an_error_not_a_kill(tmp_path):
    # Rows run without pytest-django: a test that needs it fails whatever the mutant does.
    (tmp_path / "module.py").write_text("a = 1\n")
    (tmp_path / "test_needs_django.py").write_text(
        "from django.conf import settings\n\n\n"
        "def test_it():\n    assert settings.DEBUG is not None\n"
    )
    row = Mutant("django", "module.py", "a = 1\n", "a = 2\n", "nothing", ("test_needs_django.py",))
    verdict = mutants.run_row(row, tmp_path, check=False)
    assert verdict.state == "error", verdict.output
    assert verdict.output.startswith("the row's tests need Django")
    assert (tmp_path / "module.py").read_text() == "a = 1\n"  # restored


@pytest.mark.timeout(RUN_TIMEOUT_SECONDS + 60)
def test_every_mutant_in_the_table_is_killed():
    run = subprocess.run(
        [sys.executable, str(REPO / "tools" / "mutants.py"), "--jobs", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    lines = run.stdout.strip().splitlines()
    summary = lines[-1] if lines else "(no output)"
    SUMMARY.append(summary)
    assert run.returncode == 0, run.stdout + run.stderr
    assert summary.startswith(f"mutants: {len(MUTANTS)} killed, 0 survived"), run.stdout
