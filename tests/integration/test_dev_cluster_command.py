"""`python -m localcluster up|status|down` for people, run from the checkout as they would (it
was `manage.py dev_cluster`; the local control plane is not in the wheel): `up` prints the
kubeconfig path, `status` lists the components, `down` stops them all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kubernetes import client, config

from localcluster import Binaries, read_state

REPO = Path(__file__).resolve().parents[2]


def localcluster(
    action: str, state_dir: Path, binaries: Binaries
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localcluster", action, "--state-dir", str(state_dir)],
        cwd=REPO,
        env={**os.environ, "KUBEBUILDER_ASSETS": str(binaries.etcd.parent)},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_up_status_down(binaries, tmp_path):
    state_dir = tmp_path / "cluster"
    up = localcluster("up", state_dir, binaries)
    assert up.returncode == 0, up.stderr
    kubeconfig = Path(up.stdout.strip())  # stdout is the path alone, for KUBECONFIG=$(...)
    try:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        names = {
            crd.metadata.name
            for crd in client.ApiextensionsV1Api(api).list_custom_resource_definition().items
        }
        api.close()
        assert {"hikyosecrets.hikyo.dev", "hikyoinstances.hikyo.dev"} <= names

        status = localcluster("status", state_dir, binaries)
        assert status.returncode == 0, status.stderr
        assert status.stdout.count(" running") == 3
        assert str(kubeconfig) in status.stdout

        again = localcluster("up", state_dir, binaries)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == str(kubeconfig)
        assert "already running" in again.stderr
    finally:
        state = read_state(state_dir)
        down = localcluster("down", state_dir, binaries)
    assert "kube-apiserver" in down.stdout
    assert state is not None
    for component in state["components"]:
        assert not Path(f"/proc/{component['pid']}/cmdline").exists() or (
            Path(f"/proc/{component['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        )
    gone = localcluster("status", state_dir, binaries)
    assert gone.returncode == 1
    assert gone.stderr.splitlines() == [
        f"error: no cluster in {state_dir}; run `python -m localcluster up`"
    ]
