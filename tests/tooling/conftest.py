"""The tooling tests' session summary: the mutants' line (tools/lanes.py prints it for its lane)."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter) -> None:
    from tests.tooling.test_mutants import SUMMARY

    for line in SUMMARY:
        terminalreporter.write_line(line)
