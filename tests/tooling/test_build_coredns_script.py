"""tools/build-coredns.sh: a COREDNS that is set is used as it is, with nothing built; what stops
a build is one clear last line naming the way out (COREDNS); the pin in tools/versions.env and
tools/coredns/go.mod are the same release."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"
SCRIPT = TOOLS / "build-coredns.sh"


def _executable(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _run(tmp_path: Path, script: Path = SCRIPT, **extra: str) -> subprocess.CompletedProcess[str]:
    # A go first on PATH that is too old and leaves a mark if it is asked to build anything.
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir(exist_ok=True)
    _executable(
        fake_bin / "go",
        f'echo "$*" >>"{tmp_path}/go-calls"\n[ "$*" = "env GOVERSION" ] && echo go1.20.1',
    )
    env = {k: v for k, v in os.environ.items() if k != "COREDNS"}
    env |= {"PATH": f"{fake_bin}:/usr/bin:/bin", "HIKYO_DEV_CACHE": str(tmp_path / "cache")}
    env.update(extra)
    return subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, timeout=60
    )


def test_a_coredns_that_is_set_is_used_as_it_is(tmp_path):
    binary = _executable(tmp_path / "coredns", "exit 0")
    result = _run(tmp_path, COREDNS=str(binary))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(binary)
    assert not (tmp_path / "go-calls").exists()


def test_a_coredns_that_is_not_executable_is_one_clear_line(tmp_path):
    result = _run(tmp_path, COREDNS=str(tmp_path / "missing"))
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == (
        f"build-coredns: COREDNS={tmp_path / 'missing'} is not an executable file"
    )


def test_a_go_too_old_is_one_line_naming_coredns(tmp_path):
    result = _run(tmp_path)
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == (
        "build-coredns: Go go1.20.1 is too old (need go >= 1.26); "
        "or set COREDNS to a built coredns binary and skip the build"
    )
    assert (tmp_path / "go-calls").read_text().splitlines() == ["env GOVERSION"]


def _pin() -> str:
    (pin,) = re.findall(r"^COREDNS_VERSION=(\S+)$", (TOOLS / "versions.env").read_text(), re.M)
    return pin


def test_the_pin_and_the_module_agree():
    required = re.findall(
        r"^(?:require )?\s*github\.com/coredns/coredns (\S+)$",
        (TOOLS / "coredns" / "go.mod").read_text(),
        re.M,
    )
    assert required == [_pin()]


def test_a_pin_the_module_does_not_require_is_one_clear_line(tmp_path):
    # A copy of the script beside a versions.env that names another release.
    copy = tmp_path / "tools"
    (copy / "coredns").mkdir(parents=True)
    for name in ("build-coredns.sh", "go-build.sh"):
        shutil.copy(TOOLS / name, copy / name)
    shutil.copy(TOOLS / "coredns" / "go.mod", copy / "coredns" / "go.mod")
    text = (TOOLS / "versions.env").read_text()
    (copy / "versions.env").write_text(text.replace(f"={_pin()}", "=v1.0.0"))
    result = _run(tmp_path, script=copy / "build-coredns.sh")
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == (
        "build-coredns: tools/coredns/go.mod does not require "
        "github.com/coredns/coredns v1.0.0 (tools/versions.env)"
    )
    assert not (tmp_path / "go-calls").exists()
