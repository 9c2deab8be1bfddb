"""A worker serves every shard (S4.1.8): a task's shard tag gives it a view of its runtime
that schedules where that shard does and shares everything else."""

from __future__ import annotations

import pytest
import redis

from k8s.gateway import KubeCluster
from workers.engine.settings import OperatorSettings
from workers.queue.memory import MemoryQueue
from workers.queue.redis import RedisQueue
from workers.runtime import Runtime


def redis_runtime() -> Runtime:
    client = redis.Redis()  # never connected: nothing here talks to Redis
    return Runtime(
        settings=OperatorSettings(operator_namespace="hikyo-system"),
        cluster=KubeCluster.__new__(KubeCluster),
        queue=RedisQueue(client, prefix="hikyo"),
        reports=RedisQueue(client, prefix="hikyo-reports"),
    )


def test_a_task_without_a_shard_runs_in_the_runtime_itself():
    runtime = redis_runtime()
    assert runtime.in_shard("") is runtime


def test_a_shard_tag_schedules_in_that_shard_and_shares_the_rest():
    runtime = redis_runtime()
    view = runtime.in_shard("s1of3")
    assert isinstance(view.queue, RedisQueue) and isinstance(view.reports, RedisQueue)
    assert (view.queue.scheduling, view.queue.prefix) == ("hikyo:s1of3", "hikyo")
    assert (view.reports.scheduling, view.reports.prefix) == (
        "hikyo-reports:s1of3",
        "hikyo-reports",
    )
    assert view.cluster is runtime.cluster and view.clients is runtime.clients
    assert view.recent_reads is runtime.recent_reads and view.recent_root is runtime.recent_root
    assert view.identity == runtime.identity
    assert runtime.in_shard("s1of3") is view  # one view per shard, kept


@pytest.mark.parametrize("tag", ["s3of3", "shard-1", "s1of3; DROP"])
def test_a_malformed_tag_fails_before_any_run(tag):
    with pytest.raises(ValueError, match="shard"):
        redis_runtime().in_shard(tag)


def test_an_embedded_runtime_has_no_shards():
    runtime = Runtime(
        settings=OperatorSettings(operator_namespace="hikyo-system"),
        cluster=KubeCluster.__new__(KubeCluster),
        queue=MemoryQueue(),
    )
    with pytest.raises(ValueError, match="Redis"):
        runtime.in_shard("s1of2")


def test_an_embedded_operator_refuses_more_than_one_shard_in_one_line():
    from workers.runtime import build_runtime

    settings = OperatorSettings(operator_namespace="hikyo-system", shards=2, shard=1)
    with pytest.raises(ValueError) as refused:
        build_runtime(settings, redis_url=None)
    assert str(refused.value) == (
        "HIKYO_OPERATOR_SHARDS=2 needs scaled mode (HIKYO_OPERATOR_REDIS_URL): an embedded"
        " operator is one shard"
    )
