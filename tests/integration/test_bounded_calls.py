"""Every call to the apiserver is bounded, and a run stuck on a silent apiserver does not hold
its key: at the 90 s deadline (shortened here) the key is released and another worker
reconciles it while the stuck run is still waiting (S4.1.4). Writes carry our field manager."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

import pytest
from kubernetes import client
from urllib3.exceptions import HTTPError

from k8s import client as k8s_client
from k8s.gateway import KubeCluster
from k8s.watch import Resource, Watcher
from tests.support.factories import GROUP, VERSION
from tests.support.silent_peer import SilentPeer
from tests.support.waiting import wait_for
from tests.support.world import canary
from workers import runner
from workers.keys import ObjectKey
from workers.queue.memory import MemoryQueue
from workers.runtime import Runtime


@pytest.mark.timeout(120)
def test_reads_and_relists_against_a_silent_apiserver_time_out(tmp_path):
    """Without the client's default timeouts these calls would wait for ever (the test's
    timeout would fail it)."""
    with SilentPeer() as peer:
        api = k8s_client.api_client(
            str(peer.kubeconfig(tmp_path)), connect_timeout=1.0, read_timeout=1.0
        )
        with pytest.raises(HTTPError):
            KubeCluster(api).get_secret("default", "anything")
        core = client.CoreV1Api(api)
        secrets = Resource("secrets", core.list_namespaced_secret, ("default",))
        watcher = Watcher(api, secrets, lambda *_: None, threading.Event())
        with pytest.raises(HTTPError):
            watcher._relist()


@pytest.mark.timeout(300)
def test_a_run_stuck_on_a_silent_apiserver_releases_its_key_at_the_deadline(
    world, kubeconfig, tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(runner, "DEADLINE_SECONDS", 2.0)
    monkeypatch.setattr(runner, "WRITE_GRACE_SECONDS", 1.0)
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL="info")
    world.grant()
    world.create_instance()
    world.create_credential()
    uid = world.create_cr()["metadata"]["uid"]
    key = ObjectKey(world.namespace, "app", uid)
    queue = MemoryQueue()
    queue.add(key)
    assert queue.take_due()
    settings = world.engine.settings
    with SilentPeer() as peer:
        # Worker A's apiserver accepts and never answers; its read timeout outlasts this test.
        silent = k8s_client.api_client(str(peer.kubeconfig(tmp_path)), read_timeout=600)
        stuck = Runtime(settings=settings, cluster=KubeCluster(silent), queue=queue)
        healthy = Runtime(
            settings=settings,
            cluster=KubeCluster(k8s_client.api_client(str(kubeconfig))),
            queue=queue,
        )
        outcome: list[object] = []
        worker_a = threading.Thread(
            target=lambda: outcome.append(runner.run_reconcile(stuck, key)), daemon=True
        )
        with caplog.at_level(logging.WARNING, logger="workers.runner"):
            worker_a.start()
            wait_for(lambda: peer.accepted, timeout=30, what="worker A's request to hang")
            assert runner.run_reconcile(healthy, key) is None  # A holds the key: B stands off

            def delivered_by_b():
                result = runner.run_reconcile(healthy, key)
                return result if result and result.outcome.reason == "Delivered" else None

            wait_for(delivered_by_b, timeout=120, interval=0.2, what="worker B to deliver")
            assert worker_a.is_alive()  # B did not wait for A's request to end
            peer.close()  # A's request fails now; its late end must change nothing
            worker_a.join(timeout=60)
    assert outcome == [None]
    assert "abandoned at its 2 s deadline" in caplog.text
    assert world.conditions()["Ready"] == ("True", "Reconciled")
    assert queue.failures(key) == 0  # B's success stands; A's late failure did not count


def test_writes_carry_the_operator_field_manager(world, kubeconfig):
    engine = replace(world.engine, cluster=KubeCluster(k8s_client.api_client(str(kubeconfig))))
    world.engine = engine
    world.ready()
    secret = client.CoreV1Api(world.api_client).read_namespaced_secret("app-env", world.namespace)
    managers = {entry.manager for entry in secret.metadata.managed_fields or []}
    assert managers == {k8s_client.FIELD_MANAGER}
    cr = client.CustomObjectsApi(world.api_client).get_namespaced_custom_object(
        GROUP, VERSION, world.namespace, "hikyosecrets", "app"
    )
    status_managers = {
        entry["manager"]
        for entry in cr["metadata"]["managedFields"]
        if entry.get("subresource") == "status"
    }
    assert status_managers == {k8s_client.FIELD_MANAGER}
