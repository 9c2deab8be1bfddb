"""promtool for the chart's alert tests: PROMTOOL names a binary, else Debian's /usr/bin/promtool
(package prometheus; tools/test.sh and .ci/run install it with tools/install-promtool.sh).
Missing, the tests fail naming the fix, unless HIKYO_SKIP_PROMTOOL=1 says to skip them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

DEBIAN_PROMTOOL = Path("/usr/bin/promtool")
PROMTOOL_TIMEOUT_SECONDS = 120


def promtool_binary() -> str:
    if os.environ.get("HIKYO_SKIP_PROMTOOL") == "1":
        pytest.skip("HIKYO_SKIP_PROMTOOL=1: the promtool tests are skipped")
    binary = Path(os.environ.get("PROMTOOL") or DEBIAN_PROMTOOL)
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        # Installing is the set-up's job (it may need root), not a test's.
        pytest.fail(
            f"no promtool at {binary}: run tools/install-promtool.sh (Debian's prometheus "
            "package) or set PROMTOOL to a promtool binary; HIKYO_SKIP_PROMTOOL=1 skips these tests"
        )
    return str(binary)


def promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool_binary(), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_SECONDS,
        cwd=cwd,
    )
