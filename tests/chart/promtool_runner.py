"""promtool for the chart's alert tests: PROMTOOL names an installed binary, else
tools/build-promtool.sh builds it (a warm cache answers at once). Missing, the tests fail, unless
HIKYO_SKIP_PROMTOOL=1 says to skip them."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tools" / "build-promtool.sh"
PROMTOOL_TIMEOUT_SECONDS = 120


@functools.cache
def _built() -> str:
    built = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=1800
    )
    lines = built.stdout.strip().splitlines()
    if built.returncode != 0 or not lines:
        last = built.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(
            f"{BUILD_SCRIPT.name} failed: {last[0]} (HIKYO_SKIP_PROMTOOL=1 skips these tests)"
        )
    return lines[-1]


def promtool_binary() -> str:
    if os.environ.get("HIKYO_SKIP_PROMTOOL") == "1":
        pytest.skip("HIKYO_SKIP_PROMTOOL=1: the promtool tests are skipped")
    return _built()


def promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool_binary(), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_SECONDS,
        cwd=cwd,
    )
