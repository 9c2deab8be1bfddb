"""Scaled mode's published watched reads (workers/published_reads.py, workers/queue/published.py;
issue 13) on a real Redis: a worker trusts only what a live leader vouches for, an event is
visible before the router could enqueue its run, a leader that stops (or loses the pointer to
another) stops vouching, and nothing but instances, counts and R7's claimant UIDs is stored."""

from __future__ import annotations

import json
import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from hikyo.endpoint import normalize_base_url
from k8s.watch_cache import WatchedReads
from localcluster.ports import free_port
from tests.support.operator_harness import dump_redis
from tests.support.waiting import wait_for
from tests.support.watch_fakes import FakeWatcher, hikyosecret_object, instance_object
from workers.engine.errors import InvalidBaseUrl
from workers.engine.ports import DEPLOYMENT
from workers.published_reads import (
    CLAIMANTS,
    INSTANCES,
    WORKLOADS,
    PublishedReads,
    ReadsPublisher,
)
from workers.queue.lag import ScheduleLag
from workers.queue.memory import MemoryQueue
from workers.queue.published import PublishedStore
from workers.queue.redis import RedisQueue

STAMP_CANARY = "v1:stamp-canary-4b1d"


def _instance(name: str, uid: str = "i-1") -> dict:
    return instance_object(name, uid, managedFields=[{"manager": "kubectl"}])


def _deployment(name: str, namespace: str, opt_in: str | None) -> dict:
    annotations = {"hikyo.dev/secrets": opt_in} if opt_in else {}
    template = {"metadata": {"annotations": {"stamp.hikyo.dev/app-env": STAMP_CANARY}}}
    return {
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "generation": 1,
                     "annotations": annotations},
        "spec": {"template": template},
    }  # fmt: skip


class Leader:
    """One leader's term: its caches, fake watches, and the publisher the term starts."""

    def __init__(self, store: PublishedStore, **publisher_options) -> None:
        self.reads = WatchedReads()
        self.instance_watch, self.deployment_watch = FakeWatcher(), FakeWatcher()
        self.cr_watch = FakeWatcher()
        self.reads.fed_by(WatchedReads.INSTANCES, self.instance_watch)
        self.reads.fed_by(DEPLOYMENT, self.deployment_watch)
        self.reads.fed_by(WatchedReads.CLAIMANTS, self.cr_watch)
        self.stop = threading.Event()
        self.publisher = ReadsPublisher(store, self.reads, self.stop, **publisher_options)

    def instance_event(self, kind: str, obj: dict) -> None:
        """What the operator chains: the cache, then the publisher (then the router)."""
        self.reads.handler(WatchedReads.INSTANCES)(kind, obj, False)
        self.publisher.handler(WatchedReads.INSTANCES)(kind, obj, False)

    def deployment_event(self, kind: str, obj: dict) -> None:
        self.reads.handler(DEPLOYMENT)(kind, obj, False)
        self.publisher.handler(DEPLOYMENT)(kind, obj, False)

    def cr_event(self, kind: str, obj: dict) -> None:
        self.reads.handler(WatchedReads.CLAIMANTS)(kind, obj, False)
        self.publisher.handler(WatchedReads.CLAIMANTS)(kind, obj, False)


@pytest.fixture
def store(redis_client: redis.Redis, prefix: str) -> PublishedStore:
    return PublishedStore(redis_client, prefix=prefix)


@pytest.fixture
def worker(store: PublishedStore) -> PublishedReads:
    return PublishedReads(store)


# -- the store ---------------------------------------------------------------------------


def test_nothing_is_vouched_for_before_a_part_is_published(store: PublishedStore):
    assert store.read(INSTANCES, "main") == (False, None)


def test_a_published_part_answers_present_and_absent_fields(store: PublishedStore):
    store.replace(INSTANCES, "t1", {"main": "{}"}, ttl=10)
    assert store.read(INSTANCES, "main") == (True, "{}")
    assert store.read(INSTANCES, "other") == (True, None)
    assert store.read(WORKLOADS, "team") == (False, None)  # parts are vouched for apart


def test_a_write_under_a_token_the_pointer_no_longer_names_is_refused(store: PublishedStore):
    store.replace(INSTANCES, "t1", {}, ttl=10)
    assert store.put(INSTANCES, "t1", "main", "{}")
    store.replace(INSTANCES, "t2", {}, ttl=10)  # another leader, or this one anew
    assert not store.put(INSTANCES, "t1", "late", "{}")
    assert store.read(INSTANCES, "late") == (True, None)
    assert store.read(INSTANCES, "main") == (True, None)  # t2's hash does not hold t1's write


def test_a_field_written_into_an_empty_part_lives_only_as_long_as_the_pointer(
    store: PublishedStore, redis_client: redis.Redis, prefix: str
):
    store.replace(WORKLOADS, "t1", {}, ttl=10)
    assert store.put(WORKLOADS, "t1", "team", "2")
    assert 0 < redis_client.pttl(f"{prefix}:view:{WORKLOADS}:t1") <= 10_000
    assert store.put(WORKLOADS, "t1", "team", None)
    assert store.read(WORKLOADS, "team") == (True, None)


def test_refresh_renews_only_the_token_the_pointer_names(
    store: PublishedStore, redis_client: redis.Redis, prefix: str
):
    store.replace(INSTANCES, "t1", {"main": "{}"}, ttl=1)
    assert store.refresh(INSTANCES, "t1", ttl=60)
    assert redis_client.pttl(f"{prefix}:view:{INSTANCES}") > 1_000
    assert redis_client.pttl(f"{prefix}:view:{INSTANCES}:t1") > 1_000
    assert not store.refresh(INSTANCES, "t0", ttl=60)


def test_a_part_nobody_refreshes_expires_on_the_server(
    store: PublishedStore, redis_client: redis.Redis, prefix: str
):
    store.replace(INSTANCES, "t1", {"main": "{}"}, ttl=0.2)
    wait_for(lambda: store.read(INSTANCES, "main") == (False, None), timeout=5, interval=0.05,
             what="the pointer's expiry")  # fmt: skip
    assert not redis_client.exists(f"{prefix}:view:{INSTANCES}:t1")


def test_a_part_is_never_replaced_over_a_newer_term_s_pointer(store: PublishedStore):
    assert store.next_term() < store.next_term()
    assert store.replace(INSTANCES, "2.b", {"main": "2"}, ttl=10)
    assert not store.replace(INSTANCES, "1.a", {"main": "1"}, ttl=10)
    assert store.read(INSTANCES, "main") == (True, "2")
    assert store.replace(INSTANCES, "2.c", {"main": "2c"}, ttl=10)  # the same term: its own
    assert store.replace(INSTANCES, "10.d", {"main": "10"}, ttl=10)  # numbers, not text
    assert not store.replace(INSTANCES, "9.e", {}, ttl=10)
    assert store.read(INSTANCES, "main") == (True, "10")


def test_withdrawing_an_old_token_leaves_the_new_one(store: PublishedStore):
    store.replace(INSTANCES, "t1", {"main": "{}"}, ttl=10)
    store.replace(INSTANCES, "t2", {"main": "{}"}, ttl=10)
    store.withdraw(INSTANCES, "t1")
    assert store.read(INSTANCES, "main") == (True, "{}")
    store.withdraw(INSTANCES, "t2")
    assert store.read(INSTANCES, "main") == (False, None)


def test_the_store_shares_the_queue_s_redis_and_prefix(redis_client: redis.Redis, prefix: str):
    beside = PublishedStore.beside(RedisQueue(redis_client, prefix=prefix))
    beside.replace(INSTANCES, "t1", {"main": "{}"}, ttl=10)
    assert PublishedStore(redis_client, prefix=prefix).read(INSTANCES, "main") == (True, "{}")


# -- the leader's publisher and a worker's reads -----------------------------------------


def test_a_worker_reads_nothing_until_the_watches_listed_and_the_publisher_ran(
    store: PublishedStore, worker: PublishedReads
):
    leader = Leader(store)
    leader.instance_watch.synced.clear()
    leader.instance_event("ADDED", _instance("main"))
    leader.publisher.tick()
    assert worker.instances.lookup("main") == (False, None)  # the watch has not listed
    assert worker.workloads.lookup("team") == []  # the workload watch has, with nothing
    leader.instance_watch.synced.set()
    leader.publisher.tick()
    known, instance = worker.instances.lookup("main")
    assert known and instance["metadata"]["uid"] == "i-1" and instance["spec"]["url"]
    assert "managedFields" not in instance["metadata"]
    assert worker.instances.lookup("gone") == (True, None)  # listed: it does not exist


def test_an_event_is_published_before_the_router_could_enqueue_its_run(
    store: PublishedStore, worker: PublishedReads
):
    leader = Leader(store)
    leader.instance_event("ADDED", _instance("main"))
    leader.publisher.tick()
    leader.instance_event("DELETED", _instance("main"))  # no tick: the handler wrote it
    assert worker.instances.lookup("main") == (True, None)
    leader.instance_event("ADDED", _instance("main", uid="i-2"))  # recreated: a new instance
    assert worker.instances.lookup("main")[1]["metadata"]["uid"] == "i-2"
    assert worker.workloads.lookup("team") == []
    leader.deployment_event("ADDED", _deployment("web", "team", opt_in="app-env"))
    assert worker.workloads.lookup("team") is None  # one opted in: the worker lists them
    leader.deployment_event("MODIFIED", _deployment("web", "team", opt_in=None))
    assert worker.workloads.lookup("team") == []  # it stopped opting in


def test_the_leader_s_own_wiring_publishes_an_event_before_its_router_sees_it(
    redis_client: redis.Redis, prefix: str, worker: PublishedReads, monkeypatch
):
    """OperatorProcess._lead, not a helper: a scaled leader on Redis chains each instance
    event to its cache, then the publisher, then the router, so a run the router enqueues at
    once already reads what the event brought. Its watches, CRD check and dispatchers are
    stand-ins (they need an apiserver); the router records what a worker reads as it is called."""
    from workers.leader import dispatcher, executors
    from workers.leader import process as operator_process
    from workers.shards import layout_of

    seen: list[tuple[bool, dict | None]] = []
    claimed: list[tuple[str, ...] | None] = []
    watches: dict[str, Any] = {}

    class RecordingRouter:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def on_instance(self, kind: str, obj: dict, initial: bool) -> None:
            seen.append(worker.instances.lookup(obj["metadata"]["name"]))

        def on_secret(self, kind: str, obj: dict, initial: bool) -> None:
            claimed.append(worker.claimants.lookup("team", obj["spec"]["target"]["name"]))

        on_workload = on_instance

    class ListedWatch(FakeWatcher):
        def __init__(self, api_client: Any, resource: Any, handler: Any, stop: Any) -> None:
            super().__init__()
            self.handler = handler
            watches[resource.description] = self

        def start(self) -> None:
            pass

    class Idle:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.problem, self.store_error = None, None

        def start(self) -> None:
            pass

        def wake(self) -> None:
            pass

    monkeypatch.setattr(operator_process, "EventRouter", RecordingRouter)
    monkeypatch.setattr(operator_process, "Watcher", ListedWatch)
    monkeypatch.setattr(operator_process, "ServedCrdCheck", Idle)
    monkeypatch.setattr(dispatcher, "Dispatcher", Idle)
    settings = SimpleNamespace(
        operator_namespace="hikyo-system",
        trigger_rollouts=False,
        status_reporting=False,
        namespaces=(),
        shard=0,
        shards=1,
    )
    runtime = SimpleNamespace(
        queue=RedisQueue(redis_client, prefix=prefix),
        reports=MemoryQueue(),
        settings=settings,
        cluster=SimpleNamespace(api_client=None, watched=None),
        schedule_lag=ScheduleLag(),
    )
    scaled = executors.CeleryExecutor(runtime, layout_of(settings), send_task=lambda t: None)
    process = operator_process.OperatorProcess(runtime, scaled, leader_election=False)
    process.start()
    try:
        wait_for(lambda: worker.instances.lookup("main") == (True, None), timeout=10,
                 interval=0.05, what="the first publication of the listed instances")  # fmt: skip
        watches["hikyoinstances"].handler("ADDED", _instance("main"), False)
        wait_for(lambda: worker.claimants.lookup("team", "app-env") == (), timeout=10,
                 interval=0.05, what="the first publication of the claimants")  # fmt: skip
        watches["hikyosecrets"].handler("ADDED", hikyosecret_object("a", "uid-a", "app-env"), False)
    finally:
        process.stop()
    assert claimed == [("uid-a",)]  # the CR watch feeds the index, published before the router
    assert len(seen) == 1
    known, instance = seen[0]
    assert known and instance is not None and instance["metadata"]["uid"] == "i-1"
    assert worker.instances.lookup("main") == (False, None)  # withdrawn as the term ended


def test_a_crs_target_is_published_as_it_changes_and_a_status_write_writes_nothing(
    store: PublishedStore, worker: PublishedReads, monkeypatch
):
    """R7's candidates (issue 37): a worker sees each CR under the target it names, in the
    handler, before the router could enqueue the run the event starts."""
    leader = Leader(store)
    leader.cr_event("ADDED", hikyosecret_object("first", "uid-a", "app-env"))
    assert worker.claimants.lookup("team", "app-env") is None  # not published yet
    leader.publisher.tick()
    assert worker.claimants.lookup("team", "app-env") == ("uid-a",)
    assert worker.claimants.lookup("team", "other-env") == ()
    leader.cr_event("ADDED", hikyosecret_object("second", "uid-b", "app-env"))  # no tick
    assert worker.claimants.lookup("team", "app-env") == ("uid-a", "uid-b")
    leader.cr_event("MODIFIED", hikyosecret_object("second", "uid-b", "other-env"))
    assert worker.claimants.lookup("team", "app-env") == ("uid-a",)
    assert worker.claimants.lookup("team", "other-env") == ("uid-b",)
    puts: list[str] = []
    monkeypatch.setattr(store, "put", lambda part, token, field, value: puts.append(field))
    status_write = {**hikyosecret_object("first", "uid-a", "app-env"), "status": {"keyCount": 2}}
    leader.cr_event("MODIFIED", status_write)
    assert puts == []
    monkeypatch.undo()
    leader.cr_event("DELETED", hikyosecret_object("first", "uid-a", "app-env"))
    assert worker.claimants.lookup("team", "app-env") == ()
    leader.cr_watch.alive = False
    leader.publisher.tick()
    assert worker.claimants.lookup("team", "other-env") is None  # withdrawn


def test_claimants_changed_by_a_relist_are_not_published_until_it_ends(
    store: PublishedStore, worker: PublishedReads
):
    """A relist's pages come in name order: a new CR of an early page published before an
    older one of a later page could win R7 without its list. The hash stays as it was, then
    is withdrawn, then written whole once the list ends."""
    leader = Leader(store)
    leader.cr_event("ADDED", hikyosecret_object("first", "uid-a", "app-env"))
    leader.publisher.tick()
    leader.cr_watch.listing = True
    leader.cr_event("ADDED", hikyosecret_object("new", "uid-b", "app-env"))
    assert worker.claimants.lookup("team", "app-env") == ("uid-a",)  # as before the relist
    leader.publisher.tick()
    assert worker.claimants.lookup("team", "app-env") is None  # withdrawn while it lists
    leader.cr_watch.listing = False
    leader.publisher.tick()
    assert worker.claimants.lookup("team", "app-env") == ("uid-a", "uid-b")


def test_a_watch_that_stops_withdraws_its_part(store: PublishedStore, worker: PublishedReads):
    leader = Leader(store)
    leader.instance_event("ADDED", _instance("main"))
    leader.publisher.tick()
    leader.deployment_watch.alive = False
    leader.publisher.tick()
    assert worker.workloads.lookup("team") is None
    assert worker.instances.lookup("main")[0]  # the instance watch still runs


def test_the_end_of_the_term_withdraws_everything(store: PublishedStore, worker: PublishedReads):
    leader = Leader(store)
    leader.instance_event("ADDED", _instance("main"))
    leader.publisher.start()
    wait_for(lambda: worker.instances.lookup("main")[0], timeout=5, interval=0.05,
             what="the first publication")  # fmt: skip
    leader.stop.set()
    leader.publisher.join(timeout=10)
    assert not leader.publisher.is_alive()
    assert worker.instances.lookup("main") == (False, None)
    assert worker.workloads.lookup("team") is None


def test_a_leader_that_lost_the_pointer_publishes_anew_and_misses_nothing(
    store: PublishedStore, worker: PublishedReads, redis_client: redis.Redis, prefix: str
):
    old = Leader(store, refresh_every=0)
    old.instance_event("ADDED", _instance("main"))
    old.publisher.tick()
    redis_client.delete(f"{prefix}:view:{INSTANCES}")  # say Redis restarted empty
    assert store.replace(INSTANCES, "someone-else", {}, ttl=10)  # a token of no term: 0
    old.instance_event("ADDED", _instance("second"))  # refused: the pointer is not its
    assert worker.instances.lookup("second") == (True, None)
    old.publisher.tick()  # the whole part again, under a new token
    assert worker.instances.lookup("main")[0] and worker.instances.lookup("second")[1]


def test_in_a_lease_handover_the_old_leader_never_takes_the_part_back(
    store: PublishedStore, worker: PublishedReads, caplog
):
    """Until the old leader sees its term end (the Lease's renew deadline), it still ticks and
    gets events; the newer term's view stays the one workers read, and the old one takes over
    only once nobody newer vouches."""
    old = Leader(store, refresh_every=0)
    old.instance_event("ADDED", _instance("main", uid="old-view"))
    old.publisher.tick()
    new = Leader(store, refresh_every=0)
    new.instance_event("ADDED", _instance("main", uid="new-view"))
    new.publisher.tick()
    assert (old.publisher.term or 0) < (new.publisher.term or 0)
    with caplog.at_level(logging.INFO, logger="workers.published_reads"):
        for _ in range(3):
            old.instance_event("MODIFIED", _instance("main", uid="old-view"))
            old.publisher.tick()
            assert worker.instances.lookup("main")[1]["metadata"]["uid"] == "new-view"
    said = [r.getMessage() for r in caplog.records if "newer leader" in r.getMessage()]
    assert said == ["a newer leader publishes the watched reads; leaving them to it"]  # once
    new.stop.set()
    new.publisher.withdraw()  # the new term ended first (say it lost Redis): none is newer
    old.publisher.tick()
    assert worker.instances.lookup("main")[1]["metadata"]["uid"] == "old-view"


@pytest.mark.parametrize("counted_by", ["lease", "redis"])
def test_a_redis_that_lost_everything_still_ranks_the_lease_s_newer_holder_first(
    store: PublishedStore, worker: PublishedReads, redis_client: redis.Redis, counted_by: str
):
    """Terms numbered by the Lease's leaseTransitions survive a Redis that restarted empty
    (the bundled Redis keeps nothing on disk): the new holder still outranks the old one
    that has not seen its term end. Numbered by Redis's own counter, the new holder would
    start again below it, and the old one would take the part back."""
    by_lease = counted_by == "lease"
    old = Leader(store, refresh_every=0, **({"lease_term": lambda: 4} if by_lease else {}))
    old.instance_event("ADDED", _instance("main", uid="old-view"))
    for _ in range(3):  # earlier terms took numbers from the counter too
        store.next_term()
    old.publisher.tick()
    redis_client.flushdb()
    new = Leader(store, refresh_every=0, **({"lease_term": lambda: 5} if by_lease else {}))
    new.instance_event("ADDED", _instance("main", uid="new-view"))
    new.publisher.tick()
    old.instance_event("MODIFIED", _instance("main", uid="old-view"))
    old.publisher.tick()
    read = worker.instances.lookup("main")[1]["metadata"]["uid"]
    assert read == ("new-view" if by_lease else "old-view")
    assert (old.publisher.term, new.publisher.term) == ((4, 5) if by_lease else (4, 1))


def test_a_refresh_that_finds_another_token_takes_the_part_back(
    store: PublishedStore, worker: PublishedReads
):
    leader = Leader(store, refresh_every=0)
    leader.instance_event("ADDED", _instance("main"))
    leader.publisher.tick()
    store.withdraw(INSTANCES, leader.publisher.instances.token or "")  # e.g. Redis restarted
    assert worker.instances.lookup("main") == (False, None)
    leader.publisher.tick()
    assert worker.instances.lookup("main")[1]["metadata"]["name"] == "main"


def test_redis_holds_instances_counts_and_claimants_never_a_stamp(
    store: PublishedStore, redis_server, redis_client: redis.Redis, prefix: str
):
    leader = Leader(store)
    leader.instance_event("ADDED", _instance("main"))
    leader.deployment_event("ADDED", _deployment("web", "team", opt_in="app-env"))
    leader.cr_event("ADDED", {**hikyosecret_object("first", "uid-a", "app-env"),
                              "status": {"stamp": STAMP_CANARY}})  # fmt: skip
    leader.publisher.tick()
    raw = dump_redis(redis_server.url)
    assert f"{prefix}:view:{WORKLOADS}" in raw and "https://hikyo.example" in raw
    assert f"{prefix}:view:{CLAIMANTS}" in raw and "team/app-env" in raw and "uid-a" in raw
    assert STAMP_CANARY not in raw and "managedFields" not in raw


def test_an_instance_url_s_password_never_reaches_redis_and_the_worker_still_refuses_it(
    store: PublishedStore, redis_server, worker: PublishedReads
):
    """S0.4 (issue 33 item 4): an instance whose URL carries ``user:password@`` (refused at
    fetch time, S3.1) is published without it, and without kubectl's last-applied copy."""
    password = "url-password-canary-5e2a"
    url = f"https://operator:{password}@hikyo.example:8443/base"
    hostile = _instance("hostile")
    hostile["spec"]["url"] = url
    hostile["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps({"spec": {"url": url}})
    }
    leader = Leader(store)
    leader.instance_event("ADDED", hostile)
    leader.publisher.tick()
    raw = dump_redis(redis_server.url)
    assert "hostile" in raw and "hikyo.example:8443/base" in raw
    assert password not in raw and "operator:" not in raw
    published_url = worker.instances.lookup("hostile")[1]["spec"]["url"]
    with pytest.raises(InvalidBaseUrl) as refused:
        normalize_base_url(url)
    with pytest.raises(InvalidBaseUrl) as refused_as_published:
        normalize_base_url(published_url)
    assert str(refused_as_published.value) == str(refused.value)  # the same S3.1 refusal


def test_an_unreachable_redis_is_said_once_without_its_url_and_workers_read_the_apiserver(
    caplog: pytest.LogCaptureFixture,
):
    password = "redis-password-canary-93f1"
    unreachable = redis.Redis.from_url(
        f"redis://:{password}@127.0.0.1:{free_port()}/0", socket_timeout=1
    )
    store = PublishedStore(unreachable)
    leader = Leader(store)
    leader.instance_event("ADDED", _instance("main"))  # not published yet: nothing to write
    with caplog.at_level(logging.DEBUG, logger="workers.published_reads"):
        leader.publisher.tick()
        leader.publisher.tick()
        reads = PublishedReads(store)
        assert reads.instances.lookup("main") == (False, None)
        assert reads.workloads.lookup("team") is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "ConnectionError" in warnings[0].getMessage()
    assert password not in caplog.text and "127.0.0.1" not in caplog.text
