"""tools/build-node.sh and locate_node_binaries: HIKYO_NODE_BIN is used as it is, and a
missing part is one clear line naming it (the node's own set-up: localcluster/node.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from localcluster.binaries import (
    NODE_BINARIES,
    NODE_BUILD_SCRIPT,
    BinariesUnavailable,
    locate_node_binaries,
)
from localcluster.node import (
    NodeFailed,
    NodePaths,
    containerd_config,
    import_image,
    jumps_to_a_kube_chain,
    kubelet_config,
)


def _fake_binaries(directory: Path, names: tuple[str, ...] = NODE_BINARIES) -> None:
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)


def _run(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "HIKYO_NODE_BIN"} | env
    return subprocess.run(
        ["bash", str(NODE_BUILD_SCRIPT)], capture_output=True, text=True, env=clean, timeout=120
    )


def test_hikyo_node_bin_skips_the_build(tmp_path):
    _fake_binaries(tmp_path)
    result = _run(HIKYO_NODE_BIN=str(tmp_path), PATH="/usr/bin:/bin")  # no Go needed
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path)


def test_hikyo_node_bin_missing_a_binary_is_one_clear_line(tmp_path):
    _fake_binaries(tmp_path, ("kubelet",))
    result = _run(HIKYO_NODE_BIN=str(tmp_path), PATH="/usr/bin:/bin")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].endswith("has no executable kube-scheduler")


def test_locate_node_binaries_names_what_is_missing(tmp_path, monkeypatch):
    _fake_binaries(tmp_path, ("kubelet", "kube-scheduler"))
    monkeypatch.setenv("HIKYO_NODE_BIN", str(tmp_path))
    with pytest.raises(BinariesUnavailable, match="kube-proxy is missing"):
        locate_node_binaries(progress=None)


def test_a_missing_image_archive_is_one_clear_line(tmp_path):
    with pytest.raises(NodeFailed, match=r"image archive .*pause.oci.tar is missing"):
        import_image(NodePaths(tmp_path), tmp_path / "pause.oci.tar", "localhost/pause:local")


def test_containerd_never_asks_runc_for_a_lower_oom_score_adj(tmp_path):
    """Root here lacks CAP_SYS_RESOURCE: runc fails a sandbox whose oom_score_adj is -998."""
    config = containerd_config(NodePaths(tmp_path), 1234)
    assert "restrict_oom_score_adj = true" in config
    assert 'snapshotter = "overlayfs"' in config and "SystemdCgroup = false" in config


def test_the_kubelet_starts_on_cgroup_v1_with_the_cgroupfs_driver(tmp_path):
    pki = SimpleNamespace(
        kubelet_serving_cert=tmp_path / "k.crt",
        kubelet_serving_key=tmp_path / "k.key",
        client_ca=tmp_path / "ca.crt",
    )
    config = kubelet_config(NodePaths(tmp_path), pki, 10250, 10248)  # type: ignore[arg-type]
    assert config["failCgroupV1"] is False  # this machine is cgroup v1 (KEP-5573)
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["readOnlyPort"] == 0
    assert "syncFrequency" not in config  # the kubelet's default unless asked
    faster = kubelet_config(NodePaths(tmp_path), pki, 10250, 10248, sync_frequency="10s")  # type: ignore[arg-type]
    assert faster["syncFrequency"] == "10s"


def test_only_rules_that_jump_to_the_kubelets_chains_are_removed_from_others():
    assert jumps_to_a_kube_chain(["-A", "INPUT", "-j", "KUBE-FIREWALL"])
    assert jumps_to_a_kube_chain(["-A", "FORWARD", "-m", "comment", "-g", "KUBE-FORWARD"])
    assert not jumps_to_a_kube_chain(["-A", "INPUT", "-s", "10.0.0.0/8", "-j", "ACCEPT"])
    assert not jumps_to_a_kube_chain(
        ["-A", "INPUT", "-m", "comment", "--comment", "KUBE-note", "-j", "DROP"]
    )
