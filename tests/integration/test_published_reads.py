"""Scaled mode reads what the leader watches from the keyed-queue store (issue 13,
workers/published_reads.py): against the real apiserver, Redis and Celery workers, a cold start
makes no instance GET and no workload LIST from the workers, and a workload that opts in later
is still rolled and judged: once its count is published, the workers list the namespace again."""

from __future__ import annotations

import time
from collections import Counter

import pytest
import redis
from kubernetes import client

from bench.apiserver import request_totals
from tests.support.operator_harness import Operator, dump_redis, populate, ready_count
from tests.support.waiting import wait_for
from tests.support.world import CANARIES, canary
from workers.published_reads import INSTANCES, WORKLOADS
from workers.queue.published import PublishedStore
from workers.runtime import build_queue

from .test_rollouts import _deployment

N = 30
WORKLOAD_LISTS = (("LIST", "deployments"), ("LIST", "statefulsets"), ("LIST", "daemonsets"))


@pytest.mark.timeout(900)
def test_scaled_workers_read_the_instance_and_workload_counts_the_leader_published(
    world, kubeconfig, redis_server, tmp_path
):
    redis.Redis.from_url(redis_server.url).flushall()
    operator = Operator(tmp_path, kubeconfig, redis_server.url)
    store = PublishedStore.beside(build_queue(redis_server.url))
    apps = client.AppsV1Api(world.api_client)
    try:
        populate(world, 0)  # the instance, the credential and the values; no CR yet
        operator.start_leader()
        wait_for(
            lambda: (
                store.read(INSTANCES, world.instance)[1] is not None
                and store.read(WORKLOADS, world.namespace) == (True, None)
            ),
            timeout=120,
            what="the leader's published instance and workload counts",
        )
        # The counters are the whole apiserver's: the namespace controller LISTs every kind
        # in a namespace it deletes (earlier tests' teardowns), so wait until it has none.
        _wait_until_no_namespace_terminates(world.api_client)
        before = request_totals(world.api_client)
        for index in range(N):
            world.create_cr(f"app-{index}", target={"name": f"app-env-{index}"})
        operator.start_worker("w1")
        wait_for(lambda: ready_count(world) == N, timeout=600, interval=2, what="all Ready")
        delta = Counter(request_totals(world.api_client))
        delta.subtract(before)
        assert delta[("GET", "hikyosecrets")] >= N  # the workers did read (R0, uncached)
        assert delta[("GET", "hikyoinstances")] == 0, delta
        assert {lists: delta[lists] for lists in WORKLOAD_LISTS} == dict.fromkeys(
            WORKLOAD_LISTS, 0
        ), _terminating_namespaces(world.api_client)

        # A workload opting in now: the leader publishes its count, so a worker lists the
        # namespace again. A spec edit changes app-0's content, and its reconcile stamps the
        # Deployment (S6); then a pause is judged by the workload event's rollout-only
        # evaluation (S4.1.1, S6.5), which lists it too.
        apps.create_namespaced_deployment(world.namespace, _deployment("web", opt_in="app-env-0"))
        wait_for(
            lambda: store.read(WORKLOADS, world.namespace) == (True, "1"),
            timeout=60,
            what="the published count of opted-in workloads",
        )
        world.patch_cr("app-0", {"mapping": [{"key": "DATABASE_URL"}]})
        stamp = wait_for(lambda: _template_stamp(apps, world), timeout=120, what="a stamp")
        apps.patch_namespaced_deployment("web", world.namespace, {"spec": {"paused": True}})
        wait_for(
            lambda: world.conditions("app-0").get("Rollout") == ("False", "Stalled"),
            timeout=120,
            what="Rollout=False/Stalled from a worker's rollout-only evaluation",
        )
        raw = dump_redis(redis_server.url)
    finally:
        operator.stop()
    assert world.instance in raw  # the published instance is there, and nothing secret
    for secret in CANARIES | {world.token, stamp}:
        assert secret not in raw
    assert store.read(INSTANCES, world.instance) == (False, None)  # withdrawn at the stop


def _synced_message(world, name: str) -> str:
    conditions = (world.cr(name).get("status") or {}).get("conditions") or []
    return next((c.get("message", "") for c in conditions if c["type"] == "Synced"), "")


def _template_stamp(apps, world) -> str | None:
    deployment = apps.read_namespaced_deployment("web", world.namespace)
    return (deployment.spec.template.metadata.annotations or {}).get("stamp.hikyo.dev/app-env-0")


def _wait_until_no_namespace_terminates(api_client, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while terminating := _terminating_namespaces(api_client):
        assert time.monotonic() < deadline, f"terminating after {timeout:.0f} s: {terminating}"
        time.sleep(1)


def _terminating_namespaces(api_client) -> list[str]:
    """Each namespace still terminating, with what its conditions say holds it."""
    listed = client.CoreV1Api(api_client).list_namespace(_request_timeout=30)
    return [
        f"{ns.metadata.name}: "
        + "; ".join(c.message for c in ns.status.conditions or [] if c.status == "True")
        for ns in listed.items
        if ns.status.phase == "Terminating"
    ]


@pytest.mark.timeout(600)
def test_a_hostile_instance_url_s_password_reaches_no_store_log_or_metric(
    world, kubeconfig, redis_server, tmp_path
):
    """S0.4, S3.1 (issue 33 item 4): a HikyoInstance whose URL carries ``user:password@`` is
    refused at fetch time by the scaled worker, and its password is in neither Redis, the
    leader's and the worker's logs, nor their /metrics."""
    redis.Redis.from_url(redis_server.url).flushall()
    password = canary("urlpassword")
    host = world.devserver.url.split("://", 1)[1]
    world.grant()
    world.create_instance(url=f"https://operator:{password}@{host}")
    world.create_credential()
    world.create_cr("app-0", target={"name": "app-env-0"})
    operator = Operator(tmp_path, kubeconfig, redis_server.url)
    store = PublishedStore.beside(build_queue(redis_server.url))
    try:
        operator.start_leader()
        operator.start_worker("w1")
        wait_for(
            lambda: "userinfo" in _synced_message(world, "app-0"),
            timeout=180,
            what="the worker refuses the instance URL (S3.1)",
        )
        published = store.read(INSTANCES, world.instance)[1]
        assert published is not None and "redacted@" in published
        raw = dump_redis(redis_server.url)
        metrics = operator.scrape("operator") + operator.scrape("w1")
    finally:
        operator.stop()
    assert world.instance in raw
    for place, text in (("redis", raw), ("logs", operator.logs()), ("metrics", metrics)):
        assert password not in text, place
