"""Bad input to tools/build-control-plane.sh ends in one clear line, naming the way out."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from localcluster.binaries import BUILD_SCRIPT, BinariesUnavailable, locate_binaries


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, env=env, timeout=120
    )


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBEBUILDER_ASSETS"}
    env["HIKYO_DEV_CACHE"] = str(tmp_path / "cache")  # a cold cache: the stamp cannot short-cut
    env.update(extra)
    return env


def test_missing_go_toolchain_is_one_clear_line(tmp_path):
    no_go = ":".join(p for p in os.environ["PATH"].split(":") if not (Path(p) / "go").exists())
    result = _run(_clean_env(tmp_path, PATH=no_go))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "no Go toolchain" in last and "KUBEBUILDER_ASSETS" in last
    assert result.stdout == ""


def test_unreachable_module_proxy_is_one_clear_line(tmp_path):
    assert shutil.which("go"), "this test needs the Go toolchain"
    result = _run(_clean_env(tmp_path, GOPROXY="http://127.0.0.1:9", GONOSUMDB="*"))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "cannot download Go modules" in last and "KUBEBUILDER_ASSETS" in last


def test_kubebuilder_assets_skips_the_build(tmp_path):
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl"):
        fake = tmp_path / name
        fake.write_text("#!/bin/sh\n")
        fake.chmod(0o755)
    result = _run(_clean_env(tmp_path, KUBEBUILDER_ASSETS=str(tmp_path), PATH="/usr/bin:/bin"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path)


def test_kubebuilder_assets_missing_a_binary_names_it(tmp_path, monkeypatch):
    (tmp_path / "etcd").write_text("#!/bin/sh\n")
    (tmp_path / "etcd").chmod(0o755)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    with pytest.raises(BinariesUnavailable, match="kube-apiserver is missing"):
        locate_binaries()
