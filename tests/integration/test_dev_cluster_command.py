"""`manage.py dev_cluster up|status|down` for people: prints the kubeconfig, stops cleanly."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from kubernetes import client, config

from k8s.localcluster import read_state


def test_up_status_down(binaries, tmp_path):
    state_dir = tmp_path / "cluster"
    out = StringIO()
    call_command("dev_cluster", "up", state_dir=state_dir, stdout=out, stderr=StringIO())
    kubeconfig = Path(out.getvalue().strip())
    try:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        names = {
            crd.metadata.name
            for crd in client.ApiextensionsV1Api(api).list_custom_resource_definition().items
        }
        api.close()
        assert {"hikyosecrets.hikyo.dev", "hikyoinstances.hikyo.dev"} <= names

        status = StringIO()
        call_command("dev_cluster", "status", state_dir=state_dir, stdout=status)
        assert status.getvalue().count(" running") == 3
        assert str(kubeconfig) in status.getvalue()

        again = StringIO()
        call_command("dev_cluster", "up", state_dir=state_dir, stdout=again, stderr=StringIO())
        assert again.getvalue().strip() == str(kubeconfig)
    finally:
        state = read_state(state_dir)
        down = StringIO()
        call_command("dev_cluster", "down", state_dir=state_dir, stdout=down)
    assert "kube-apiserver" in down.getvalue()
    assert state is not None
    for component in state["components"]:
        assert not Path(f"/proc/{component['pid']}/cmdline").exists() or (
            Path(f"/proc/{component['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        )
    with pytest.raises(CommandError, match="no cluster"):
        call_command("dev_cluster", "status", state_dir=state_dir, stdout=StringIO())
