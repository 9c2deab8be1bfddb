"""k8s.client's start without a kubeconfig (issue 33 item 5): in a pod whose token file cannot
be read, the fallback to ~/.kube/config still ends in one KubeconfigUnusable line, not the
PermissionError's traceback."""

from __future__ import annotations

import pytest
from kubernetes import config

from k8s import client as k8s_client


def test_an_unreadable_in_cluster_token_falls_back_to_one_line(monkeypatch, tmp_path):
    def unreadable_token(**_: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(config, "load_incluster_config", unreadable_token)
    monkeypatch.setattr(config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "config"))
    with pytest.raises(k8s_client.KubeconfigUnusable) as raised:
        k8s_client.api_client(None)
    assert str(raised.value) == (
        f"KUBECONFIG is not set, this is not a pod, and {str(tmp_path / 'config')!r} "
        "cannot be read: No such file or directory"
    )
