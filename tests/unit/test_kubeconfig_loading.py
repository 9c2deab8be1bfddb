"""No usable kubeconfig at a start (issue 33 item 5): in a pod whose token file cannot be
read, the fallback to ~/.kube/config still ends in one KubeconfigUnusable line, not the
PermissionError's traceback; a Celery worker stops at its start with that line."""

from __future__ import annotations

import sys

import pytest
from kubernetes import client, config

from k8s import client as k8s_client
from tests.support.processes import free_port
from tests.unit.test_invalid_settings_at_boot import _clean_environ, _run


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


def test_a_celery_worker_without_a_usable_kubeconfig_stops_at_its_start(tmp_path):
    """One line naming KUBECONFIG and exit 1, before any task; the file's text (a token here)
    is never echoed. As root, Celery warns about the user first: that line is not ours."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("users: [{name: u, user: {token: tok-5be1d}}]\nclusters: [\n")
    env = {
        **_clean_environ(tmp_path),
        "KUBECONFIG": str(kubeconfig),
        "HIKYO_OPERATOR_METRICS_ADDR": f"127.0.0.1:{free_port()}",
    }
    result = _run(
        [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "--pool", "solo"],
        env,
    )
    assert result.returncode == 1, result
    output = result.stdout + result.stderr
    ours = [line for line in output.splitlines() if "KUBECONFIG" in line]
    assert len(ours) == 1, output[-3000:]
    assert ours[0].endswith(
        f"CRITICAL workers.celery_app KUBECONFIG={str(kubeconfig)!r} is not a usable kubeconfig"
        " (ParserError)"
    )
    assert "Traceback" not in output and "tok-5be1d" not in output


def test_a_bounded_client_keeps_a_connection_for_every_thread_of_a_process():
    """k8s/client.py: whatever the node's CPU count makes the library's default, the pool keeps
    CONNECTION_POOL_SIZE idle connections, more than a process's watches, reconcile and report
    threads and Lease use at once, so none is closed only to be opened again."""
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = 2
    api = k8s_client.bounded(client.ApiClient(configuration), 1.0, 1.0)
    pool = api.rest_client.pool_manager.connection_from_host("127.0.0.1", 6443, "https")
    assert pool.pool.maxsize == k8s_client.CONNECTION_POOL_SIZE == 32
