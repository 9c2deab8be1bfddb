"""promtool for the chart's alert tests: PROMTOOL names an installed binary, else
tools/build-promtool.sh builds it (a warm cache answers at once). Missing, the tests fail, unless
HIKYO_SKIP_PROMTOOL=1 says to skip them."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.helm import REPO_ROOT, built_binary

BUILD_SCRIPT = REPO_ROOT / "tools" / "build-promtool.sh"
PROMTOOL_TIMEOUT_SECONDS = 120


@functools.cache
def _built() -> str:
    return built_binary(BUILD_SCRIPT, " (HIKYO_SKIP_PROMTOOL=1 skips these tests)")


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
