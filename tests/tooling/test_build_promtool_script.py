"""tools/build-promtool.sh: PROMTOOL skips the build; bad input is one clear last line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "build-promtool.sh"


def _run(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PROMTOOL"}
    env["HIKYO_DEV_CACHE"] = str(tmp_path / "cache")  # a cold cache: the stamp cannot short-cut
    env.update(extra)
    return subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120
    )


def test_an_installed_promtool_skips_the_build(tmp_path):
    binary = tmp_path / "promtool"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    result = _run(tmp_path, PROMTOOL=str(binary), PATH="/usr/bin:/bin")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(binary)


def test_a_promtool_that_is_not_executable_is_one_clear_line(tmp_path):
    result = _run(tmp_path, PROMTOOL=str(tmp_path / "missing"))
    assert result.returncode != 0 and result.stdout == ""
    assert "is not an executable file" in result.stderr.strip().splitlines()[-1]


def test_missing_go_toolchain_names_the_way_out(tmp_path):
    no_go = ":".join(p for p in os.environ["PATH"].split(":") if not (Path(p) / "go").exists())
    result = _run(tmp_path, PATH=no_go)
    assert result.returncode != 0 and result.stdout == ""
    last = result.stderr.strip().splitlines()[-1]
    assert "no Go toolchain" in last and "PROMTOOL" in last
