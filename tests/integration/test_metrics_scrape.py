"""S8.6 /metrics from every process kind, scraped from the running processes and parsed with
prometheus_client's parser: the embedded operator, and in scaled mode run_operator plus a
Celery worker (prefork, multiprocess mode). After K reconciles the counters say K; no canary
value, token or key name appears anywhere in a scrape (S0.4, S8.3)."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.support.operator_harness import (
    RUN_LINE,
    SERVICE_LOGS,
    Operator,
    populate,
    ready_count,
)
from tests.support.waiting import wait_for
from tests.support.world import CANARIES, World

Samples = dict[str, list[tuple[dict[str, str], float]]]
CONTROLLER = {"controller": "hikyosecret"}
QUEUE = {"name": "hikyosecret"}
SYNCED = {"Delivered", "Current"}  # the reasons that leave lifecycle Synced (S5.3)


def parse(text: str) -> Samples:
    samples: Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name].append((sample.labels, sample.value))
    return samples


def total(samples: Samples, metric: str, **labels: str) -> float:
    """The sum of ``metric`` over the samples whose labels include ``labels``."""
    return sum(
        value
        for have, value in samples.get(metric, [])
        if all(have.get(k) == v for k, v in labels.items())
    )


def run_lines(log: str) -> int:
    return len(RUN_LINE.findall(log))


def logged_reasons(log: str) -> Counter[str]:
    """Each run's outcome reason, from its one log line (workers/runner.py)."""
    return Counter(match[4] for match in RUN_LINE.findall(log))


def counted_reasons(samples: Samples) -> Counter[str]:
    counted: Counter[str] = Counter()
    for labels, value in samples.get("hikyo_operator_reconcile_total", []):
        counted[labels["reason"]] += int(value)
    return +counted


def assert_counts_every_run(samples: Samples, log: str, count: int) -> int:
    """After K reconciles the counters say K: per reason, exactly the runs the logs show (a
    first sync may also meet a stamp root another run is creating: that run says so)."""
    runs = run_lines(log)
    assert counted_reasons(samples) == logged_reasons(log)
    assert logged_reasons(log)["Delivered"] == count  # each CR delivered once
    synced = sum(n for reason, n in logged_reasons(log).items() if reason in SYNCED)
    assert total(samples, "hikyo_operator_reconcile_total", lifecycle="Synced") == synced
    results = {
        labels["result"]: value
        for labels, value in samples["controller_runtime_reconcile_total"]
        if labels["controller"] == "hikyosecret"
    }
    assert sum(results.values()) == runs and results.get("error", 0) == 0, results
    assert results["success"] >= count
    assert total(samples, "controller_runtime_reconcile_errors_total", **CONTROLLER) == 0
    assert total(samples, "controller_runtime_reconcile_time_seconds_count", **CONTROLLER) == runs
    return runs


def settled_scrape(operator: Operator, name: str, logs: list[str]) -> str | None:
    """A scrape whose reconcile counter matches the run lines logged between it and the one
    before (a run is counted just before its line is written; runs may still be finishing).
    The log kept is the one read between them: a run that ends after the second scrape (a
    status write's own watch event) would be in a later read but not in the samples."""
    first = operator.scrape(name)
    log = operator.logs()
    second = operator.scrape(name)
    counted = total(parse(second), "hikyo_operator_reconcile_total")
    if counted != total(parse(first), "hikyo_operator_reconcile_total"):
        return None
    if counted != run_lines(log):
        return None
    logs.append(log)
    return second


def assert_value_free(text: str, world: World) -> None:
    SERVICE_LOGS.append(text)  # the final canary sweep reads the scrapes too
    for secret in CANARIES | {world.token, "DATABASE_URL", "LOG_LEVEL"}:
        assert secret not in text, f"{secret!r} in /metrics"
    for target in (f"app-env-{n}" for n in range(3)):
        assert f'"{target}"' not in text


def namespaced(operator: Operator, world: World) -> None:
    """Only this test's namespace: the counts are this test's alone."""
    operator.env["HIKYO_OPERATOR_NAMESPACES"] = f"{world.namespace}, hikyo-system"


@pytest.mark.timeout(300)
def test_the_embedded_operators_metrics_count_its_reconciles_and_hold_no_value(
    world, kubeconfig, tmp_path
):
    count = 3
    operator = Operator(tmp_path, kubeconfig, None)
    namespaced(operator, world)
    logs: list[str] = []
    try:
        populate(world, count)
        operator.start_leader()
        wait_for(lambda: ready_count(world) == count, timeout=180, interval=1, what="all Ready")
        text = wait_for(
            lambda: settled_scrape(operator, "operator", logs),
            timeout=60,
            interval=1,
            what="/metrics to count every logged run",
        )
        # The leader's view (its watch) catches up with the status writes it made.
        wait_for(
            lambda: (
                total(parse(operator.scrape()), "hikyo_operator_secrets", lifecycle="Synced")
                == count
            ),
            timeout=60,
            interval=1,
            what="hikyo_operator_secrets{lifecycle=Synced} to count every CR",
        )
    finally:
        operator.stop()
    samples = parse(text)
    runs = assert_counts_every_run(samples, logs[-1], count)
    fetched = total(
        samples, "hikyo_operator_fetch_duration_seconds_count", hikyo_instance=world.instance
    )
    assert count <= fetched <= runs
    assert total(samples, "hikyo_operator_fetch_429_total") == 0
    assert total(samples, "hikyo_operator_leader") == 1
    assert total(samples, "hikyo_operator_foreign_owner") == 0
    assert total(samples, "hikyo_operator_namespace_forbidden", namespace=world.namespace) == 0
    assert "hikyo_operator_queue_depth" in samples
    assert ({"name": "hikyosecret"}, 0.0) in samples["workqueue_depth"]
    # Each run was taken from the queue once; each CR entered it at least once.
    assert total(samples, "workqueue_queue_duration_seconds_count", **QUEUE) == runs
    assert total(samples, "workqueue_adds_total", **QUEUE) >= count
    assert total(samples, "workqueue_retries_total", **QUEUE) == 0
    assert_value_free(text, world)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_in_scaled_mode_the_celery_worker_serves_its_pools_reconciles(
    world, kubeconfig, redis_server, tmp_path, pool
):
    """The worker serves what its pool ran: prefork sums its two children's samples, threads
    (the chart's default) writes them from the worker's one process. The leader, which runs
    no reconcile here, shows the leader gauge and the queue it dispatches from."""
    redis.Redis.from_url(redis_server.url).flushall()
    count = 4
    operator = Operator(tmp_path, kubeconfig, redis_server.url)
    namespaced(operator, world)
    logs: list[str] = []
    try:
        populate(world, count)
        operator.start_leader()
        operator.start_worker("w1", pool=pool)
        wait_for(lambda: ready_count(world) == count, timeout=300, interval=1, what="all Ready")
        worker = wait_for(
            lambda: settled_scrape(operator, "w1", logs),
            timeout=60,
            interval=1,
            what="the worker's /metrics to count every logged run",
        )
        leader = operator.scrape("operator")
    finally:
        operator.stop()
    samples = parse(worker)
    runs = assert_counts_every_run(samples, logs[-1], count)
    fetched = total(
        samples, "hikyo_operator_fetch_duration_seconds_count", hikyo_instance=world.instance
    )
    assert count <= fetched <= runs
    assert total(samples, "controller_runtime_active_workers", **CONTROLLER) == 0
    assert_value_free(worker, world)

    on_leader = parse(leader)
    assert total(on_leader, "hikyo_operator_leader") == 1
    assert total(on_leader, "hikyo_operator_reconcile_total") == 0  # the workers ran them
    assert total(on_leader, "workqueue_queue_duration_seconds_count", **QUEUE) >= count
    assert total(on_leader, "workqueue_adds_total", **QUEUE) >= count
    assert "hikyo_operator_queue_depth" in on_leader
    assert_value_free(leader, world)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_each_pool_builds_its_runtime_before_its_first_task(
    world, kubeconfig, redis_server, tmp_path, pool
):
    """Issue 13: a prefork child builds its runtime as it starts, and a threads worker as it
    is ready, not inside the first task. With no leader, no task ever arrives, yet the
    worker's /metrics shows the keyed-queue counters that only a runtime makes."""
    redis.Redis.from_url(redis_server.url).flushall()
    operator = Operator(tmp_path, kubeconfig, redis_server.url)
    namespaced(operator, world)
    try:
        operator.start_worker("w1", pool=pool)

        def with_queue_counters() -> str | None:
            try:
                text = operator.scrape("w1")
            except OSError:  # not serving yet
                return None
            return text if "workqueue_adds_total{" in text else None

        text = wait_for(
            with_queue_counters,
            timeout=120,
            interval=1,
            what=f"the {pool} pool's queue counters on the worker's /metrics",
        )
    finally:
        operator.stop()
    samples = parse(text)
    assert any(labels == QUEUE for labels, _ in samples["workqueue_adds_total"])
    assert total(samples, "workqueue_adds_total", **QUEUE) == 0  # and no task ran
    assert "Traceback" not in operator.logs()
