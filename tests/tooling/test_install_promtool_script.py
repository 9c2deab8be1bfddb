"""tools/install-promtool.sh and the chart tests' promtool runner: a PROMTOOL that is set is used
as it is, with nothing installed; bad input is one clear line naming the way out."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.chart import promtool_runner

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "install-promtool.sh"


def _executable(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _run(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    # apt-get and sudo first on PATH are stand-ins that leave a mark: called, they would install.
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir(exist_ok=True)
    for name in ("apt-get", "sudo"):
        _executable(fake_bin / name, f'echo "$0 $*" >>"{tmp_path}/installed"; exit 1')
    env = {k: v for k, v in os.environ.items() if k != "PROMTOOL"}
    env["PATH"] = f"{fake_bin}:/usr/bin:/bin"
    env.update(extra)
    return subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60
    )


def test_a_promtool_that_is_set_is_used_as_it_is(tmp_path):
    binary = _executable(tmp_path / "promtool", "exit 0")
    result = _run(tmp_path, PROMTOOL=str(binary))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(binary)
    assert not (tmp_path / "installed").exists()


def test_a_promtool_that_is_not_executable_is_one_clear_line(tmp_path):
    result = _run(tmp_path, PROMTOOL=str(tmp_path / "missing"))
    assert result.returncode != 0 and result.stdout == ""
    assert "is not an executable file" in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "installed").exists()


def test_the_runner_uses_promtool_as_it_is(tmp_path, monkeypatch):
    binary = _executable(tmp_path / "promtool", "exit 0")
    monkeypatch.delenv("HIKYO_SKIP_PROMTOOL", raising=False)
    monkeypatch.setenv("PROMTOOL", str(binary))
    assert promtool_runner.promtool_binary() == str(binary)


def test_the_runner_fails_naming_the_fix_when_promtool_is_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("HIKYO_SKIP_PROMTOOL", raising=False)
    monkeypatch.setenv("PROMTOOL", str(tmp_path / "missing"))
    with pytest.raises(pytest.fail.Exception) as failed:
        promtool_runner.promtool_binary()
    assert "tools/install-promtool.sh" in str(failed.value)
    assert "HIKYO_SKIP_PROMTOOL=1" in str(failed.value)
