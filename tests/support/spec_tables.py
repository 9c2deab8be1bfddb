"""Tables the tests read from the spec itself (docs/operator-spec.md), so a rule added there
without code fails a test."""

from __future__ import annotations

import re
from pathlib import Path

SPEC = Path(__file__).parents[2] / "docs" / "operator-spec.md"


def spec_text() -> str:
    assert SPEC.is_file(), f"the operator spec is missing: {SPEC}"
    return SPEC.read_text(encoding="utf-8")


def spec_reasons() -> set[str]:
    """Every condition reason: the S5.1 table's and those S11.5 adds to it (the backticked
    names of each table's second column)."""
    text = spec_text()
    s5_1 = text.split("### S5.1", 1)[1].split("No other reasons exist", 1)[0]
    s11_5 = text.split("### S11.5", 1)[1].split("\n\n", 2)[1]  # the table under the heading
    reasons: set[str] = set()
    for line in (s5_1 + "\n" + s11_5).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        reasons |= set(re.findall(r"`([A-Za-z]+)`", cells[1]))
    assert len(reasons) > 20, "the S5.1 table was not found"
    assert {"InvalidTemplate", "MergeTargetMissing"} <= reasons, "the S11.5 table was not found"
    return reasons
