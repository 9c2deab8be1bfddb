"""S8.6 metrics (workers/metrics.py): what one run, a queue and the operator process put into
the exposition, read back from a fresh CollectorRegistry per test; no label or value carries a
key name, value, target, message, cursor or stamp (S0.4, S8.3)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.test_runner import KEY, Harness, _raising
from workers import metrics, runner
from workers.broker_window import WorkerSlots
from workers.engine.conditions import SYNCED, Condition
from workers.engine.outcome import Outcome, Requeue
from workers.engine.ports import Event
from workers.engine.reconcile import RunResult
from workers.keys import ObjectKey
from workers.metrics import Metrics, OperatorCollector
from workers.queue.base import Priority
from workers.queue.memory import MemoryQueue

REPO = Path(__file__).resolve().parents[2]
CANARY = "canary-5d1e-metrics-value"
KEY_NAME = "DATABASE_URL_CANARY"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def m(registry: CollectorRegistry) -> Metrics:
    return Metrics(registry)


def value(registry: CollectorRegistry, metric: str, **labels: str) -> float:
    found = registry.get_sample_value(metric, labels)
    return 0.0 if found is None else found


def run_result(
    reason: str = "Delivered",
    requeue: Requeue = Requeue.RESYNC,
    *,
    lifecycle: str | None = "Synced",
    namespace: str = "team-a",
    uid: str = "uid-1",
    instance: str = "",
    fetch_seconds: float | None = None,
    fetch_status: int | None = None,
    delay: float | None = None,
) -> RunResult:
    """A result as the engine makes them, with canaries wherever free text or values live."""
    message = f"{CANARY} {KEY_NAME} target app-env"
    return RunResult(
        outcome=Outcome(
            reason=reason,
            requeue=requeue,
            message=message,
            delay=delay,
            lifecycle=lifecycle,
            conditions={SYNCED: Condition(SYNCED, "True", "Delivered", message)},
            status={"cursor": CANARY, "stamp": CANARY, "keys": [KEY_NAME]},
            events=[Event("Normal", reason, message)],
        ),
        namespace=namespace,
        name="app",
        uid=uid,
        conditions_after=[{"type": SYNCED, "message": message}],
        events_emitted=[Event("Normal", reason, message)],
        instance=instance,
        fetch_seconds=fetch_seconds,
        fetch_status=fetch_status,
    )


# -- one run -> samples -----------------------------------------------------------------------


def test_a_delivery_counts_its_lifecycle_reason_result_time_and_fetch(m, registry):
    m.record_run(
        run_result(instance="hikyo-main", fetch_seconds=0.2, fetch_status=200),
        Requeue.RESYNC,
        0.3,
        "uid-1",
    )
    assert (
        value(registry, "hikyo_operator_reconcile_total", lifecycle="Synced", reason="Delivered")
        == 1
    )
    ctrl = {"controller": "hikyosecret"}
    assert value(registry, "controller_runtime_reconcile_total", **ctrl, result="success") == 1
    assert value(registry, "controller_runtime_reconcile_errors_total", **ctrl) == 0
    assert value(registry, "controller_runtime_reconcile_time_seconds_count", **ctrl) == 1
    assert value(
        registry, "controller_runtime_reconcile_time_seconds_sum", **ctrl
    ) == pytest.approx(0.3)
    fetch = {"hikyo_instance": "hikyo-main"}
    assert value(registry, "hikyo_operator_fetch_duration_seconds_count", **fetch) == 1
    assert value(registry, "hikyo_operator_fetch_duration_seconds_sum", **fetch) == pytest.approx(
        0.2
    )
    assert value(registry, "hikyo_operator_fetch_429_total", **fetch) == 0
    assert value(registry, "hikyo_operator_namespace_forbidden", namespace="team-a") == 0


@pytest.mark.parametrize(
    ("requeue", "result", "errors"),
    [
        (Requeue.RESYNC, "success", 0),
        (Requeue.NONE, "success", 0),
        (Requeue.AFTER, "requeue_after", 0),
        (Requeue.BACKOFF, "error", 1),
    ],
)
def test_the_settled_requeue_maps_to_controller_runtimes_result(
    m, registry, requeue, result, errors
):
    m.record_run(run_result("FetchFailed", requeue, lifecycle="Retained"), requeue, 0.1, "u")
    ctrl = {"controller": "hikyosecret"}
    assert value(registry, "controller_runtime_reconcile_total", **ctrl, result=result) == 1
    assert value(registry, "controller_runtime_reconcile_errors_total", **ctrl) == errors


@pytest.mark.parametrize(
    "reason", ["InstancePaused", "InstanceUnresponsive", "CredentialUnanswered"]
)
def test_a_run_that_waited_is_counted_per_instance_and_reason(m, registry, reason):
    m.record_run(
        run_result(reason, Requeue.AFTER, lifecycle=None, instance="inst-a", delay=1.0),
        Requeue.AFTER,
        0.01,
        "u1",
    )
    m.record_run(run_result("Current", instance="inst-a"), Requeue.RESYNC, 0.01, "u2")
    assert (
        value(registry, "hikyo_operator_fetch_waits_total", hikyo_instance="inst-a", reason=reason)
        == 1
    )
    for other in {"InstancePaused", "InstanceUnresponsive", "CredentialUnanswered", "Current"} - {
        reason
    }:
        assert value(
            registry, "hikyo_operator_fetch_waits_total", hikyo_instance="inst-a", reason=other
        ) in (0, None)


def test_a_429_is_counted_per_instance_and_a_run_without_a_fetch_observes_no_duration(m, registry):
    m.record_run(
        run_result("FetchFailed", Requeue.AFTER, lifecycle="Retained", instance="inst-a",
                   fetch_seconds=0.05, fetch_status=429, delay=30.0),
        Requeue.AFTER,
        0.1,
        "u1",
    )  # fmt: skip
    m.record_run(run_result("Current"), Requeue.RESYNC, 0.1, "u2")  # R14-stopped, no fetch
    assert value(registry, "hikyo_operator_fetch_429_total", hikyo_instance="inst-a") == 1
    assert (
        value(registry, "hikyo_operator_fetch_duration_seconds_count", hikyo_instance="inst-a") == 1
    )
    assert (
        value(registry, "hikyo_operator_fetch_duration_seconds_count", hikyo_instance="unknown")
        == 0
    )


def test_a_quiet_stop_keeps_the_lifecycle_unchanged_and_a_failed_run_is_an_error(m, registry):
    m.record_run(run_result("Gone", Requeue.NONE, lifecycle=None, uid=""), Requeue.NONE, 0.01, "u")
    m.record_failed_run(metrics.INTERRUPTED, 0.5)
    m.record_failed_run(metrics.DEADLINE_EXCEEDED, 91.0)
    total = "hikyo_operator_reconcile_total"
    assert value(registry, total, lifecycle="Unchanged", reason="Gone") == 1
    assert value(registry, total, lifecycle="Unchanged", reason="Interrupted") == 1
    assert value(registry, total, lifecycle="Unchanged", reason="DeadlineExceeded") == 1
    ctrl = {"controller": "hikyosecret"}
    assert value(registry, "controller_runtime_reconcile_total", **ctrl, result="error") == 2
    assert value(registry, "controller_runtime_reconcile_errors_total", **ctrl) == 2
    assert value(registry, "controller_runtime_reconcile_time_seconds_count", **ctrl) == 3


def test_labels_that_do_not_look_like_names_are_bucketed(m, registry):
    """Even an engine bug cannot put free text into a label."""
    m.record_run(
        run_result(f"{CANARY} broke", lifecycle=CANARY, namespace=f"NS {CANARY}",
                   instance=f"Inst/{CANARY}", fetch_seconds=0.1, fetch_status=200),
        Requeue.RESYNC,
        0.1,
        "u",
    )  # fmt: skip
    assert value(registry, "hikyo_operator_reconcile_total", lifecycle="Other", reason="Other") == 1
    assert (
        value(registry, "hikyo_operator_fetch_duration_seconds_count", hikyo_instance="invalid")
        == 1
    )
    assert value(registry, "hikyo_operator_namespace_forbidden", namespace="invalid") == 0
    assert CANARY not in generate_latest(registry).decode()


def test_namespace_forbidden_follows_the_latest_run_in_that_namespace(m, registry):
    """S8.1/S4.15: 1 while runs there are refused by RBAC, 0 once one gets through."""
    refused = run_result("NamespaceNotBound", Requeue.BACKOFF, lifecycle="Unreconciled")
    m.record_run(refused, Requeue.BACKOFF, 0.1, "u1")
    m.record_run(run_result(namespace="team-b"), Requeue.RESYNC, 0.1, "u2")
    assert value(registry, "hikyo_operator_namespace_forbidden", namespace="team-a") == 1
    assert value(registry, "hikyo_operator_namespace_forbidden", namespace="team-b") == 0
    m.record_run(run_result(), Requeue.RESYNC, 0.1, "u1")
    assert value(registry, "hikyo_operator_namespace_forbidden", namespace="team-a") == 0


def test_foreign_owner_counts_the_crs_standing_off_until_they_run_otherwise_or_expire(m, registry):
    """S4.1.7: a CR stands off while another live operator owns it; a later run of the CR
    here, or three rechecks without one (scaled mode: it ran elsewhere), ends that."""
    clock = Clock()
    m._clock = clock
    stand_off = run_result("ForeignOwner", Requeue.AFTER, lifecycle=None, delay=20.0)
    m.record_run(stand_off, Requeue.AFTER, 0.01, "u1")
    m.record_run(stand_off, Requeue.AFTER, 0.01, "u2")
    m.record_run(stand_off, Requeue.AFTER, 0.01, "u2")  # rechecked: still one CR
    assert value(registry, "hikyo_operator_foreign_owner") == 2
    m.record_run(run_result(), Requeue.RESYNC, 0.1, "u1")  # taken over
    assert value(registry, "hikyo_operator_foreign_owner") == 1
    clock.now += 3 * 60 + 1  # u2's entry: 3 x max(recheck, 60 s)
    m.record_run(run_result(), Requeue.RESYNC, 0.1, "u3")
    assert value(registry, "hikyo_operator_foreign_owner") == 0


def test_no_canary_reaches_the_exposition(m, registry):
    """Messages, status (cursor, stamp), events, conditions and key names stay out."""
    for reason, requeue, lifecycle in [
        ("Delivered", Requeue.RESYNC, "Synced"),
        ("FetchFailed", Requeue.BACKOFF, "Retained"),
        ("ForeignOwner", Requeue.AFTER, None),
        ("NamespaceNotBound", Requeue.BACKOFF, "Unreconciled"),
    ]:
        result = run_result(reason, requeue, lifecycle=lifecycle, instance="inst-a",
                            fetch_seconds=0.1, fetch_status=429, delay=5.0)  # fmt: skip
        m.record_run(result, requeue, 0.2, "uid-1")
    m.record_failed_run(metrics.INTERNAL_ERROR, 0.1)
    text = generate_latest(registry).decode()
    families = {f.name for f in text_string_to_metric_families(text)}
    assert {"hikyo_operator_reconcile", "controller_runtime_reconcile"} <= families
    for secret in (CANARY, KEY_NAME, "app-env", "uid-1"):
        assert secret not in text


# -- the queues -------------------------------------------------------------------------------


def test_a_memory_queue_reports_adds_once_per_waiting_key_due_waits_and_backoff_retries(registry):
    clock = Clock()
    queue = MemoryQueue(clock=clock)
    queue.observer = Metrics(registry).workqueue("hikyosecret")
    other = ObjectKey("ns", "other", "uid-2")
    name = {"name": "hikyosecret"}
    queue.add(KEY)
    queue.add(KEY, priority=Priority.FIRST)  # dedupe: already waiting
    queue.schedule(other, delay=10.0)
    assert value(registry, "workqueue_adds_total", **name) == 2
    clock.now += 4.0
    [ticket] = queue.take_due()  # KEY, due for 4 s
    assert ticket.key == KEY
    assert value(registry, "workqueue_queue_duration_seconds_count", **name) == 1
    assert value(registry, "workqueue_queue_duration_seconds_sum", **name) == pytest.approx(4.0)
    lock = queue.begin(KEY, "w")
    assert lock is not None
    queue.finish(lock, Requeue.BACKOFF)
    assert value(registry, "workqueue_retries_total", **name) == 1
    assert value(registry, "workqueue_adds_total", **name) == 3  # back in, with its backoff


def test_the_operator_collector_reads_leader_depths_and_lifecycles_at_scrape_time(registry):
    clock = Clock()
    queue = MemoryQueue(clock=clock)
    queue.add(KEY)  # due now
    queue.schedule(ObjectKey("ns", "b", "uid-b"), delay=300.0)  # a resync timer
    leading = {"now": False}
    lifecycles = {"Synced": 2, "Refused": 0, CANARY: 1, "": 1}
    registry.register(
        OperatorCollector(
            leader=lambda: leading["now"],
            queues=lambda: {"hikyosecret": queue},
            lifecycles=lambda: lifecycles,
        )
    )
    assert value(registry, "hikyo_operator_leader") == 0
    assert registry.get_sample_value("workqueue_depth", {"name": "hikyosecret"}) is None
    leading["now"] = True
    assert value(registry, "hikyo_operator_leader") == 1
    assert value(registry, "hikyo_operator_queue_depth") == 2  # waiting, due or scheduled
    assert value(registry, "workqueue_depth", name="hikyosecret") == 1  # due now
    assert value(registry, "hikyo_operator_secrets", lifecycle="Synced") == 2
    assert value(registry, "hikyo_operator_secrets", lifecycle="Refused") == 0
    assert value(registry, "hikyo_operator_secrets", lifecycle="Other") == 1
    # None yet: Unreconciled, the name docs/operations.md and the dashboard use (issue 35).
    assert value(registry, "hikyo_operator_secrets", lifecycle="Unreconciled") == 1
    assert registry.get_sample_value("hikyo_operator_secrets", {"lifecycle": "Unset"}) is None
    assert CANARY not in generate_latest(registry).decode()


def test_the_scaled_leader_serves_the_live_worker_slots(registry):
    """0 says no worker is running: the leader hands out only its spare round of keys."""
    queue = MemoryQueue()
    leading = {"now": True}
    registry.register(
        OperatorCollector(
            leader=lambda: leading["now"],
            queues=lambda: {"hikyosecret": queue},
            lifecycles=lambda: {},
            worker_slots=WorkerSlots(queue, read_every=0.0).slots,
        )
    )
    assert value(registry, "hikyo_operator_worker_slots") == 0
    queue.advertise_slots("celery@a", 2, ttl=30)
    queue.advertise_slots("celery@b", 4, ttl=30)
    assert value(registry, "hikyo_operator_worker_slots") == 6
    leading["now"] = False
    assert registry.get_sample_value("hikyo_operator_worker_slots") is None


def test_the_embedded_leader_serves_no_worker_slots(registry):
    registry.register(
        OperatorCollector(leader=lambda: True, queues=lambda: {}, lifecycles=lambda: {})
    )
    assert "hikyo_operator_worker_slots" not in generate_latest(registry).decode()


class BrokenStore(MemoryQueue):
    def depth(self) -> int:
        raise ConnectionError(f"redis down {CANARY}")

    def due_count(self) -> int:
        raise ConnectionError(f"redis down {CANARY}")


def test_a_store_error_leaves_the_depths_out_and_the_scrape_works(registry):
    def no_router() -> Any:
        raise AttributeError("no router yet")

    registry.register(
        OperatorCollector(
            leader=lambda: True,
            queues=lambda: {"hikyosecret": BrokenStore(), "statusreport": MemoryQueue()},
            lifecycles=no_router,
        )
    )
    text = generate_latest(registry).decode()
    assert CANARY not in text
    assert value(registry, "hikyo_operator_leader") == 1
    assert registry.get_sample_value("hikyo_operator_queue_depth") is None
    assert registry.get_sample_value("workqueue_depth", {"name": "hikyosecret"}) is None
    assert value(registry, "workqueue_depth", name="statusreport") == 0


# -- the runner counts every run once -----------------------------------------------------------


@pytest.fixture
def fresh(monkeypatch, registry) -> CollectorRegistry:
    """The process's metrics (``metrics.current()``) on a fresh registry for one test."""
    monkeypatch.setattr(metrics, "_current", Metrics(registry))
    return registry


def test_the_runner_counts_a_run_after_settling_it_and_a_failed_run_as_an_error(monkeypatch, fresh):
    h = Harness(monkeypatch)
    h.fake(lambda engine: run_result(uid=KEY.uid))
    h.run()
    h.fake(_raising(ConnectionError("the store went away")))  # an OSError: interrupted
    h.run()
    h.fake(_raising(RuntimeError("a bug")))
    h.run()
    total = "hikyo_operator_reconcile_total"
    assert value(fresh, total, lifecycle="Synced", reason="Delivered") == 1
    assert value(fresh, total, lifecycle="Unchanged", reason="Interrupted") == 1
    assert value(fresh, total, lifecycle="Unchanged", reason="InternalError") == 1
    ctrl = {"controller": "hikyosecret"}
    assert value(fresh, "controller_runtime_reconcile_total", **ctrl, result="success") == 1
    assert value(fresh, "controller_runtime_reconcile_errors_total", **ctrl) == 2
    assert value(fresh, "controller_runtime_active_workers", **ctrl) == 0


def test_a_gone_cr_counts_as_success_whatever_its_outcome_asked(monkeypatch, fresh):
    h = Harness(monkeypatch)
    h.fake(lambda engine: run_result("Gone", Requeue.RESYNC, lifecycle=None, uid=""))
    h.run()
    ctrl = {"controller": "hikyosecret"}
    assert value(fresh, "controller_runtime_reconcile_total", **ctrl, result="success") == 1


def test_a_failing_metric_never_fails_the_run(monkeypatch, fresh):
    class Broken(Metrics):
        def record_run(self, *args: Any) -> None:
            raise OSError("disk full under the multiprocess directory")

    monkeypatch.setattr(metrics, "_current", Broken(CollectorRegistry()))
    h = Harness(monkeypatch)
    h.fake(lambda engine: run_result(uid=KEY.uid))
    _, result = h.run()
    assert result is not None and h.queue.finished == [Requeue.RESYNC]


def test_an_abandoned_run_is_counted_once_as_deadline_exceeded(monkeypatch, fresh):
    """S4.1.4: the guard settles the key; the late result is counted, never recorded."""
    monkeypatch.setattr(runner, "DEADLINE_SECONDS", 0.05)
    monkeypatch.setattr(runner, "WRITE_GRACE_SECONDS", 0.05)
    h = Harness(monkeypatch)

    def slow(engine: Any) -> RunResult:
        import time

        deadline = time.monotonic() + 5
        while h.queue.finished == [] and time.monotonic() < deadline:
            time.sleep(0.01)  # until the guard abandoned the run
        return run_result(uid=KEY.uid)

    h.fake(slow)
    _, result = h.run()
    assert result is None
    total = "hikyo_operator_reconcile_total"
    assert value(fresh, total, lifecycle="Unchanged", reason="DeadlineExceeded") == 1
    assert value(fresh, total, lifecycle="Synced", reason="Delivered") == 0


# -- a Celery prefork pool: multiprocess mode --------------------------------------------------

PREFORK = textwrap.dedent(
    """
    import multiprocessing, os, sys
    from prometheus_client import generate_latest
    from workers import metrics
    from workers.engine.outcome import Outcome, Requeue
    from workers.engine.reconcile import RunResult

    path = metrics.enable_multiprocess(sys.argv[1])  # the worker's main process, before forking

    def child(n):
        result = RunResult(
            outcome=Outcome(reason="Delivered", requeue=Requeue.RESYNC, lifecycle="Synced",
                            message="CANARYMSG"),
            namespace="ns", name="app", uid=f"uid-{n}", instance="inst", fetch_seconds=0.1,
            fetch_status=200)
        with metrics.running():
            metrics.record_run(result, Requeue.RESYNC, 0.2, f"uid-{n}")
        metrics.process_exited(os.getpid())

    context = multiprocessing.get_context("fork")
    children = [context.Process(target=child, args=(n,)) for n in range(3)]
    for p in children:
        p.start()
    for p in children:
        p.join()
    sys.stdout.write(generate_latest(metrics.multiprocess_registry()).decode())
    """
)


def test_prefork_children_are_summed_by_the_main_process(tmp_path):
    """The Celery worker's choice (workers/metrics.py): pool children write files, the main
    process serves their sum. Run in a child interpreter: the mode is per process."""
    stale = tmp_path / "counter_1.db"
    stale.write_bytes(b"left by an earlier run")
    done = subprocess.run(
        [sys.executable, "-c", PREFORK, str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={"DJANGO_SETTINGS_MODULE": "controlplane.settings", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not stale.exists()  # emptied at start
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(done.stdout)
        for s in family.samples
    }
    ctrl = (("controller", "hikyosecret"),)
    assert (
        samples[
            ("hikyo_operator_reconcile_total", (("lifecycle", "Synced"), ("reason", "Delivered")))
        ]
        == 3
    )
    assert samples[("controller_runtime_reconcile_total", (*ctrl, ("result", "success")))] == 3
    assert (
        samples[("hikyo_operator_fetch_duration_seconds_count", (("hikyo_instance", "inst"),))] == 3
    )
    assert samples.get(("controller_runtime_active_workers", ctrl), 0) == 0  # exited children
    assert "CANARYMSG" not in done.stdout


def test_every_operator_process_says_which_shard_it_serves(registry):
    """S4.1.8: with hikyo_operator_leader, each shard's leader; a standby says it too."""
    registry.register(
        OperatorCollector(
            leader=lambda: False, queues=lambda: {}, lifecycles=lambda: {}, shard=(2, 3)
        )
    )
    assert value(registry, "hikyo_operator_shard_info", shard="2", shards="3") == 1
    assert value(registry, "hikyo_operator_leader") == 0
