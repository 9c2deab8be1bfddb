"""R7 (S4.2): the same-target list is read at least as new as the CR's own R0 read
(``resourceVersionMatch=NotOlderThan`` its resourceVersion), on a real kube-apiserver.

A list without a resourceVersion is a consistent read: the apiserver serves it from its watch
cache only once that cache has confirmed etcd's newest revision, which after a write to any
other resource waits for a progress notification (~95 ms here, most of a first sync's time:
``bench/reconcile_cost.py``). The apiserver counts those reads in
``apiserver_watch_cache_consistent_read_total``, which tells the two kinds apart."""

from __future__ import annotations

import re

from kubernetes import client

from k8s.gateway import KubeCluster
from tests.support.factories import GROUP, VERSION, make_hikyosecret
from tests.support.kube import get_raw
from tests.support.waiting import wait_for

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
