"""R7 (S4.2): the same-target list is read at least as new as the CR's own R0 read
(``resourceVersionMatch=NotOlderThan`` its resourceVersion), on a real kube-apiserver.

A list without a resourceVersion is a consistent read: the apiserver serves it from its watch
cache only once that cache has confirmed etcd's newest revision, which after a write to any
other resource waits for a progress notification (~95 ms here, most of a first sync's time:
``bench/reconcile_cost.py``). The apiserver counts those reads in
``apiserver_watch_cache_consistent_read_total``, which tells the two kinds apart.

A CR that the leader's CR watch holds alone under its target is decided without the list
(issue 37), here with a real watch of a real apiserver."""

from __future__ import annotations

import re
import threading
from typing import Any

from kubernetes import client

from k8s.gateway import KubeCluster
from k8s.slim_api import CustomObjects
from k8s.watch import Resource, Watcher
from k8s.watch_cache import WatchedReads
from tests.support.factories import GROUP, VERSION, make_hikyosecret
from tests.support.kube import get_raw
from tests.support.waiting import wait_for
from tests.unit.decide_fixtures import SETTINGS
from workers.engine.observe import _Reader
from workers.engine.observed import Observed
from workers.engine.plan import Read
from workers.queue.memory import MemoryQueue

_CONSISTENT_READS = re.compile(
    r'^apiserver_watch_cache_consistent_read_total\{[^}]*group="hikyo\.dev"[^}]*'
    r'resource="hikyosecrets"[^}]*\} (\S+)$',
    re.MULTILINE,
)
LISTS = 10  # lists per block
BLOCKS = 4


def _consistent_hikyosecret_reads(api_client: client.ApiClient) -> float:
    text = get_raw(api_client, "/metrics", accept="text/plain").decode()
    return sum(float(value) for value in _CONSISTENT_READS.findall(text))


def _claimants_world(api_client: client.ApiClient, namespace: str) -> KubeCluster:
    """Two CRs on target ``shared-env`` and one on ``other-env``; then a Secret write, so that
    a consistent list would have to wait for the watch cache to confirm a newer revision."""
    custom = client.CustomObjectsApi(api_client)
    for name, target in (("first", "shared-env"), ("second", "shared-env"), ("third", "other-env")):
        body = make_hikyosecret(name, target={"name": target})
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "hikyosecrets", body)
    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="unrelated"))
    )
    return KubeCluster(api_client)


def _names(listed: list[dict]) -> set[str]:
    return {item["metadata"]["name"] for item in listed}


def test_the_same_target_list_is_not_a_consistent_read_and_holds_every_earlier_claimant(
    api_client, crds, namespace
):
    cluster = _claimants_world(api_client, namespace)
    # R0 reads the newest CR: both claimants were created before it last changed.
    cr = cluster.get_hikyosecret(namespace, "second")
    assert cr is not None
    read_at = cr["metadata"]["resourceVersion"]

    # Other clients list HikyoSecrets too (the namespace controller for every namespace an
    # earlier test deleted, the garbage collector), in bursts. So the two kinds of list are
    # counted in alternating blocks, where the same bursts fall on both, and compared.
    _wait_for_no_terminating_namespace(api_client)
    counted = {read_at: 0.0, "": 0.0}
    for _ in range(BLOCKS):
        for revision in (read_at, ""):  # NotOlderThan R0's revision, then a consistent list
            before = _consistent_hikyosecret_reads(api_client)
            for _ in range(LISTS):
                listed = cluster.list_hikyosecrets_for_target(namespace, "shared-env", revision)
                assert _names(listed) == {"first", "second"}
            counted[revision] += _consistent_hikyosecret_reads(api_client) - before
    ours, consistent = counted[read_at], counted[""]
    total = BLOCKS * LISTS
    assert consistent >= total  # the counter does count: each list without a revision
    assert consistent - ours >= total * 3 / 4, (
        f"{ours:g} consistent reads in {total} R7 lists, {consistent:g} in {total} consistent ones"
    )


def _wait_for_no_terminating_namespace(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    wait_for(
        lambda: not [ns for ns in core.list_namespace().items if ns.status.phase == "Terminating"],
        timeout=120,
        what="earlier tests' namespaces to be deleted",
    )


def test_a_revision_the_apiserver_has_not_reached_falls_back_to_the_consistent_list(
    api_client, crds, namespace
):
    """An apiserver behind the one that answered R0 (HA) waits 3 s for the revision, then
    answers 504 Too large resource version: the list is made consistently instead."""
    cluster = _claimants_world(api_client, namespace)
    cr = cluster.get_hikyosecret(namespace, "first")
    assert cr is not None
    ahead = str(int(cr["metadata"]["resourceVersion"]) + 10_000_000)

    before = _consistent_hikyosecret_reads(api_client)
    listed = cluster.list_hikyosecrets_for_target(namespace, "shared-env", ahead)
    assert _names(listed) == {"first", "second"}
    assert _consistent_hikyosecret_reads(api_client) >= before + 1


class _ListCounting(KubeCluster):
    def __init__(self, api_client: client.ApiClient) -> None:
        super().__init__(api_client)
        self.lists = 0

    def list_hikyosecrets_for_target(
        self, namespace: str, target: str, not_older_than: str
    ) -> list[dict[str, Any]]:
        self.lists += 1
        return super().list_hikyosecrets_for_target(namespace, target, not_older_than)


def _claimants(cluster: KubeCluster, namespace: str, name: str) -> set[str]:
    """R7's read for the CR ``name`` as a reconcile makes it: its R0 read, then CLAIMANTS."""
    cr = cluster.get_hikyosecret(namespace, name)
    assert cr is not None
    reader = _Reader(cluster, MemoryQueue(), SETTINGS, lambda instance: None)  # type: ignore[arg-type]
    observed = reader.read(Observed(namespace, name, cr=cr), Read.CLAIMANTS)
    assert isinstance(observed.claimants, list)
    return _names(observed.claimants)


def test_a_sole_claimant_is_decided_by_the_watch_and_a_second_one_lists_again(
    api_client, crds, namespace
):
    _claimants_world(api_client, namespace)
    cluster = _ListCounting(api_client)
    custom = client.CustomObjectsApi(api_client)
    stop, watched = threading.Event(), WatchedReads()
    lister = CustomObjects(api_client).list_namespaced_custom_object
    crs = Resource("hikyosecrets", lister, (GROUP, VERSION, namespace, "hikyosecrets"))
    watcher = Watcher(
        api_client, crs, watched.handler(WatchedReads.CLAIMANTS), stop, timeout_seconds=5
    )
    watched.fed_by(WatchedReads.CLAIMANTS, watcher)
    watcher.start()
    try:
        wait_for(watched.claimants.ready, timeout=30, what="the CR watch's first list")
        cluster.watched = watched
        assert _claimants(cluster, namespace, "third") == {"third"}
        assert cluster.lists == 0  # alone on other-env: no list, first sync or not
        assert _claimants(cluster, namespace, "first") == {"first", "second"}
        assert cluster.lists == 1  # contested: listed

        # target.name is immutable (S1.3): a newer CR naming it is how a target gets contested
        body = make_hikyosecret("fourth", target={"name": "other-env"})
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "hikyosecrets", body)
        wait_for(lambda: len(cluster.indexed_claimants(namespace, "other-env") or ()) == 2,
                 timeout=30, what="the new CR in the CR watch")  # fmt: skip
        assert _claimants(cluster, namespace, "third") == {"third", "fourth"}
        assert cluster.lists == 2  # contested now: listed
    finally:
        stop.set()
        watcher.join(timeout=30)
