"""The leader's watch caches (k8s/watch_cache.py, issues 13 and 37): HikyoInstances, opted-in
workloads and R7's claimants per target answer a reconcile's reads only while every watch
feeding them has listed and still runs; otherwise the gateway makes the request as before."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any

from kubernetes import client

from k8s.gateway import KubeCluster
from k8s.watch import Resource, Watcher
from k8s.watch_cache import WatchedReads, chain
from tests.support.watch_fakes import FakeWatcher, hikyosecret_object, instance_object
from workers.engine.ports import DEPLOYMENT, STATEFUL_SET


def _deployment(name: str, uid: str, annotations: dict[str, str] | None) -> dict:
    return {
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": uid,
            "generation": 2,
            "annotations": annotations or {},
        },
        "spec": {
            "replicas": 3,
            "template": {"metadata": {"annotations": {"stamp.hikyo.dev/app-env": "v1:abc"}}},
        },
        "status": {"observedGeneration": 2, "updatedReplicas": 3},
    }


def _counting_cluster(asked: list[str]) -> KubeCluster:
    """A gateway whose instance GETs and workload lists are recorded, not sent."""
    cluster = KubeCluster(client.ApiClient(client.Configuration()))

    def get_instance(group: str, version: str, plural: str, name: str) -> dict:
        asked.append(f"get {name}")
        return instance_object(name, uid="from-the-apiserver")

    cluster.custom.get_cluster_custom_object = get_instance  # type: ignore[method-assign]
    return cluster


def test_instances_are_known_only_once_the_watch_listed_and_while_it_runs():
    watched = WatchedReads()
    watcher = FakeWatcher(synced=False)
    watched.fed_by(WatchedReads.INSTANCES, watcher)
    feed = watched.handler(WatchedReads.INSTANCES)
    feed("ADDED", instance_object("main"), True)
    assert watched.instances.lookup("main") == (False, None)  # not listed yet
    watcher.synced.set()
    known, found = watched.instances.lookup("main")
    assert known and found == instance_object("main")
    assert watched.instances.lookup("other") == (True, None)  # listed: it does not exist
    watcher.alive = False  # leadership ended, or the watch thread died
    assert watched.instances.lookup("main") == (False, None)


def test_an_instance_deleted_and_recreated_is_seen_as_such():
    watched = WatchedReads()
    watched.fed_by(WatchedReads.INSTANCES, FakeWatcher())
    feed = watched.handler(WatchedReads.INSTANCES)
    feed("ADDED", instance_object("main", uid="old"), True)
    feed("DELETED", {"metadata": {"name": "main", "uid": "old"}}, False)  # a tombstone
    assert watched.instances.lookup("main") == (True, None)
    feed("ADDED", instance_object("main", uid="new"), False)
    assert watched.instances.lookup("main")[1]["metadata"]["uid"] == "new"


def test_a_caller_changing_its_instance_does_not_change_the_cache():
    watched = WatchedReads()
    watched.fed_by(WatchedReads.INSTANCES, FakeWatcher())
    watched.handler(WatchedReads.INSTANCES)("ADDED", instance_object("main"), True)
    _, mine = watched.instances.lookup("main")
    mine["spec"]["url"] = "https://changed.example"
    assert watched.instances.lookup("main")[1]["spec"]["url"] == "https://hikyo.example"


def test_workloads_keep_only_opted_in_objects_reduced_like_the_list():
    watched = WatchedReads()
    for kind in (DEPLOYMENT, STATEFUL_SET):
        watched.fed_by(kind, FakeWatcher())
    feed = watched.handler(DEPLOYMENT)
    feed("ADDED", _deployment("web", "d-1", {"hikyo.dev/secrets": "app-env"}), True)
    feed("ADDED", _deployment("batch", "d-2", None), True)  # not opted in: not kept
    [web] = watched.workloads.lookup("team")
    assert (web.kind, web.name, web.targets, web.stamps) == (
        DEPLOYMENT,
        "web",
        frozenset({"app-env"}),
        {"app-env": "v1:abc"},
    )
    assert web.replicas == 3 and web.observed_generation == 2
    assert watched.workloads.lookup("elsewhere") == []
    feed("MODIFIED", _deployment("web", "d-1", None), False)  # opted out
    assert watched.workloads.lookup("team") == []
    feed("ADDED", _deployment("web", "d-1", {"hikyo.dev/secrets": "app-env"}), False)
    feed("DELETED", {"metadata": {"name": "web", "namespace": "team", "uid": "d-1"}}, False)
    assert watched.workloads.lookup("team") == []


def test_workloads_wait_for_every_workload_watch():
    watched = WatchedReads()
    slow = FakeWatcher(synced=False)
    watched.fed_by(DEPLOYMENT, FakeWatcher())
    watched.fed_by(STATEFUL_SET, slow)
    assert watched.workloads.lookup("team") is None
    slow.synced.set()
    assert watched.workloads.lookup("team") == []


def test_the_gateway_asks_the_caches_first_and_the_apiserver_otherwise():
    asked: list[str] = []
    cluster = _counting_cluster(asked)
    watched = WatchedReads()
    watcher = FakeWatcher()
    watched.fed_by(WatchedReads.INSTANCES, watcher)
    watched.fed_by(DEPLOYMENT, watcher)
    watched.handler(WatchedReads.INSTANCES)("ADDED", instance_object("main"), True)
    cluster.watched = watched
    assert cluster.get_instance("main") == instance_object("main")
    assert cluster.get_instance("gone") is None
    assert cluster.list_workloads("team") == []
    assert asked == []  # all three answered by the watches
    watcher.alive = False
    assert cluster.get_instance("main")["metadata"]["uid"] == "from-the-apiserver"
    cluster.watched = None  # a follower, or a scaled worker
    cluster.get_instance("main")
    assert asked == ["get main", "get main"]


def test_chain_calls_the_cache_before_the_router():
    calls: list[str] = []
    handler = chain(
        lambda kind, obj, initial: calls.append(f"cache {kind}"),
        lambda kind, obj, initial: calls.append(f"router {kind}"),
    )
    handler("ADDED", {}, False)
    assert calls == ["cache ADDED", "router ADDED"]


def test_the_claimant_index_follows_adds_retargets_and_deletes_once_the_watch_listed():
    watched = WatchedReads()
    watcher = FakeWatcher(synced=False)
    watched.fed_by(WatchedReads.CLAIMANTS, watcher)
    feed = watched.handler(WatchedReads.CLAIMANTS)
    changed: list[tuple[str, ...]] = []
    watched.claimants.listen(changed.append)
    second = hikyosecret_object("second", "uid-b", "app-env")
    feed("ADDED", second, True)
    assert watched.claimants.lookup("team", "app-env") is None  # not listed yet
    watcher.synced.set()
    feed("ADDED", hikyosecret_object("first", "uid-a", "app-env"), False)
    assert watched.claimants.lookup("team", "app-env") == ("uid-a", "uid-b")
    assert watched.claimants.lookup("other-team", "app-env") == ()  # per namespace
    feed("MODIFIED", {**second, "status": {"lifecycle": "Synced"}}, False)  # a status write
    feed("MODIFIED", hikyosecret_object("second", "uid-b", "other-env"), False)  # a retarget
    assert watched.claimants.lookup("team", "app-env") == ("uid-a",)
    assert watched.claimants.lookup("team", "other-env") == ("uid-b",)
    # a relist's DELETED carries the metadata only
    feed("DELETED", {"metadata": {"name": "first", "namespace": "team", "uid": "uid-a"}}, True)
    assert watched.claimants.lookup("team", "app-env") == ()
    assert changed == [
        ("team/app-env",),
        ("team/app-env",),
        ("team/app-env", "team/other-env"),  # the status write changed no target
        ("team/app-env",),
    ]
    watcher.alive = False
    assert watched.claimants.lookup("team", "other-env") is None


def test_the_gateway_asks_the_claimant_index_only_while_a_watch_vouches():
    cluster = KubeCluster(client.ApiClient(client.Configuration()))
    assert cluster.indexed_claimants("team", "app-env") is None  # no watch: the caller lists
    watched = WatchedReads()
    watched.fed_by(WatchedReads.CLAIMANTS, FakeWatcher())
    feed = watched.handler(WatchedReads.CLAIMANTS)
    feed("ADDED", hikyosecret_object("a", "uid-a", "app-env"), True)
    cluster.watched = watched
    assert cluster.indexed_claimants("team", "app-env") == ("uid-a",)


def test_the_claimant_index_answers_nothing_while_a_relist_hands_out_its_pages():
    """A list's pages come in name order, not creation order: the index that R7 trusts to
    hold every earlier CR (workers.engine.observe) says nothing until the list ends."""
    watched = WatchedReads()
    answers: list[tuple[str, ...] | None] = []

    def listed(*args: Any, **kwargs: Any) -> SimpleNamespace:
        answers.append(watched.claimants.lookup("team", "app-env"))  # mid-list
        items = [hikyosecret_object("a", "uid-a", "app-env")]
        body = {"kind": "HikyoSecretList", "items": items, "metadata": {"resourceVersion": "7"}}
        return SimpleNamespace(data=json.dumps(body).encode())

    feed = watched.handler(WatchedReads.CLAIMANTS)
    watcher = Watcher(None, Resource("hikyosecrets", listed), feed, threading.Event())
    watched.fed_by(WatchedReads.CLAIMANTS, watcher)
    watcher.synced.set()  # as after a first list: this is a relist
    watcher.is_alive = lambda: True  # type: ignore[method-assign]  # not started: no thread
    assert watched.claimants.lookup("team", "app-env") == ()
    watcher._relist()
    assert answers == [None]
    assert watched.claimants.lookup("team", "app-env") == ("uid-a",)
