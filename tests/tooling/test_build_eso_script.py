"""tools/build-eso.sh: a prebuilt binary skips the build; bad input is one clear last line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "build-eso.sh"


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120
    )


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ESO", "ESO_CRDS")}
    env["HIKYO_DEV_CACHE"] = str(tmp_path / "cache")  # a cold cache: the stamp cannot short-cut
    env.update(extra)
    return env


def _fake_binary(directory: Path, with_crds: bool) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "external-secrets"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    if with_crds:
        (directory / "crds").mkdir()
        (directory / "crds" / "external-secrets.io_externalsecrets.yaml").write_text("{}\n")
    return binary


def test_prebuilt_binary_skips_the_build(tmp_path):
    binary = _fake_binary(tmp_path / "eso", with_crds=True)
    result = _run(_env(tmp_path, ESO=str(binary), PATH="/usr/bin:/bin"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(binary)


def test_prebuilt_binary_without_crds_names_the_way_out(tmp_path):
    binary = _fake_binary(tmp_path / "eso", with_crds=False)
    result = _run(_env(tmp_path, ESO=str(binary)))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "external-secrets.io_externalsecrets.yaml" in last and "ESO_CRDS" in last
    assert result.stdout == ""


def test_eso_that_is_not_executable_is_one_clear_line(tmp_path):
    result = _run(_env(tmp_path, ESO=str(tmp_path / "missing")))
    assert result.returncode != 0
    assert "is not an executable file" in result.stderr.strip().splitlines()[-1]


def test_missing_go_toolchain_is_one_clear_line(tmp_path):
    no_go = ":".join(p for p in os.environ["PATH"].split(":") if not (Path(p) / "go").exists())
    result = _run(_env(tmp_path, PATH=no_go))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "no Go toolchain" in last and "ESO" in last
    assert result.stdout == ""
