"""Issue 50: what an alert needs in the exposition before anything has happened. Counters an
alert takes increase() of are served at 0 from the start (a series born at 1 is no increase,
so the first panic would never page), and every run_operator names every shard of its layout
(so an alert can name a shard none of whose processes is left)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from workers.metrics import Metrics, OperatorCollector

CTRL = {"controller": "hikyosecret"}


def exposed(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(sample name, labels) -> value, parsed back from the text a scrape reads."""
    text = generate_latest(registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_the_counters_alerts_read_are_served_at_zero_before_the_first_run():
    registry = CollectorRegistry()
    Metrics(registry)
    samples = exposed(registry)
    for name, labels in [
        ("controller_runtime_reconcile_panics_total", CTRL),
        ("controller_runtime_reconcile_errors_total", CTRL),
        ("controller_runtime_reconcile_total", {**CTRL, "result": "success"}),
        ("controller_runtime_reconcile_total", {**CTRL, "result": "error"}),
        ("controller_runtime_reconcile_total", {**CTRL, "result": "requeue_after"}),
        ("hikyo_operator_reconcile_total", {"lifecycle": "Unchanged", "reason": "InternalError"}),
    ]:
        assert samples[(name, frozenset(labels.items()))] == 0.0, (name, labels)


def test_the_first_panic_raises_the_served_series_from_zero_to_one():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    key = ("controller_runtime_reconcile_panics_total", frozenset(CTRL.items()))
    before = exposed(registry)[key]
    metrics.record_failed_run("InternalError", 0.1)
    assert (before, exposed(registry)[key]) == (0.0, 1.0)


def test_every_operator_process_names_every_shard_of_its_layout():
    registry = CollectorRegistry()
    registry.register(
        OperatorCollector(leader=lambda: False, queues=dict, lifecycles=dict, shard=(1, 3))
    )
    samples = exposed(registry)
    expected = {
        dict(labels)["shard"]
        for (name, labels), value in samples.items()
        if name == "hikyo_operator_shard_expected" and value == 1.0
    }
    assert expected == {"0", "1", "2"}
    assert samples[("hikyo_operator_shard_info", frozenset({"shard": "1", "shards": "3"}.items()))]
