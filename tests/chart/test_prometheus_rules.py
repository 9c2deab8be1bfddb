"""The chart's alerts and Grafana board (issue 35 item 6): `promtool check rules` and `promtool
test rules` on files/alerts.yaml with tests/chart/promtool/alerts_test.yaml, where every alert
fires on one series and stays silent on another; the PrometheusRule and the dashboard ConfigMap
render those files; and every metric either names is one the operator exports, read from a
metrics registry the operator's own code fills (workers/metrics.py), not from a list here."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from tests.support.helm import CHART, one, operator_values
from workers.metrics import Metrics, OperatorCollector

from .promtool_runner import promtool
from .test_chart_render import FULLNAME, render

ALERTS = CHART / "files" / "alerts.yaml"
BOARD = CHART / "files" / "grafana-dashboard.json"
UNIT_TESTS = CHART.parents[1] / "tests" / "chart" / "promtool" / "alerts_test.yaml"


def _rules() -> list[dict[str, Any]]:
    return [
        rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]
    ]


def test_promtool_checks_the_rules():
    checked = promtool("check", "rules", ALERTS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in checked.stdout


def test_promtool_unit_tests_of_every_alert_pass():
    tested = promtool("test", "rules", UNIT_TESTS)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_is_tested_firing_and_silent():
    firing: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    alerts = {rule["alert"] for rule in _rules()}
    assert alerts == firing == silent


LIVE_TEST = CHART.parents[1] / "tests" / "integration" / "test_real_node_scaled.py"


def test_the_live_test_fires_and_clears_every_alert():
    """The real node's live scrape (marker node) has a case for each alert of the chart: a
    new alert needs a cause there too."""
    source = LIVE_TEST.read_text()
    fired = set(re.findall(r'fires\("(\w+)"', source))
    cleared = set(re.findall(r'clears\("(\w+)"', source))
    assert {rule["alert"] for rule in _rules()} == fired == cleared


RUNBOOKS = CHART.parents[1] / "docs" / "alerts.md"
RUNBOOK_URL = "https://github.com/hikyo-org/hikyo-operator/blob/main/docs/alerts.md"


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to -."""
    headings = re.findall(r"^#+\s+(.+?)\s*$", markdown, flags=re.M)
    return {re.sub(r"[^a-z0-9 _-]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_alert_links_its_own_runbook_section():
    anchors = github_anchors(RUNBOOKS.read_text())
    for rule in _rules():
        url = rule["annotations"].get("runbook_url", "")
        page, _, anchor = url.partition("#")
        assert page == RUNBOOK_URL and anchor == rule["alert"].lower(), (rule["alert"], url)
        assert anchor in anchors, f"docs/alerts.md has no section for {rule['alert']}"


def test_the_prometheus_rule_is_the_tested_file(tmp_path):
    rendered = render(
        tmp_path, operator_values(prometheusRule={"enabled": True, "labels": {"release": "kps"}})
    )
    rule = one(rendered, "PrometheusRule", FULLNAME)
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"] == yaml.safe_load(ALERTS.read_text())
    written = tmp_path / "rendered-rules.yaml"
    written.write_text(yaml.safe_dump(rule["spec"]))
    checked = promtool("check", "rules", written)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_board_is_a_configmap_for_grafanas_sidecar(tmp_path):
    rendered = render(
        tmp_path,
        operator_values(
            grafanaDashboard={"enabled": True, "annotations": {"grafana_folder": "Ops"}}
        ),
    )
    config_map = one(rendered, "ConfigMap", f"{FULLNAME}-dashboard-json")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Ops"}
    board = json.loads(config_map["data"]["hikyo-operator.json"])
    assert board == json.loads(BOARD.read_text())
    assert board["uid"] == "hikyo-operator" and board["panels"]


def test_neither_renders_by_default(tmp_path):
    kinds = {d["kind"] for d in render(tmp_path, operator_values())}
    assert not kinds & {"PrometheusRule", "ConfigMap"}


# -- every metric named is exported --------------------------------------------------------

_KEYWORDS = {"by", "without", "and", "or", "unless", "on", "ignoring", "bool", "offset"}
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects: identifiers that are not functions
    (followed by "("), keywords, label matchers ({...}), grouping lists or durations."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr
    )  # grouping and matching lists
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges and subqueries
    names = re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", expr)
    return {name for name in names if name not in _KEYWORDS and not re.fullmatch(r"[0-9e]+", name)}


def exported_series() -> set[str]:
    """Every series name the operator's processes expose: the metrics of workers/metrics.py and
    the scrape-time families of the leader (scaled mode's included), by their types."""
    registry = CollectorRegistry()
    Metrics(registry)
    registry.register(
        OperatorCollector(
            leader=lambda: True,
            queues=dict,
            lifecycles=dict,
            readiness=dict,
            credential_expiry=dict,
            worker_slots=lambda: 0,
        )
    )
    return {
        family.name + suffix
        for family in registry.collect()
        for suffix in _SUFFIXES.get(family.type, ("",))
    }


def test_metric_names_are_read_from_promql():
    expr = (
        'histogram_quantile(0.95, sum by (le, instance) (rate(a_seconds_bucket{x="y"}[5m])))'
        " / b_total or vector(0)"
    )
    assert metric_names(expr) == {"a_seconds_bucket", "b_total"}


def exported_label_names() -> dict[str, tuple[str, ...]]:
    """Each exported family's label names: the metrics of workers/metrics.py and the leader's
    scrape-time families (scaled mode's included)."""
    wrappers = vars(Metrics(CollectorRegistry())).values()
    found = {w._name: tuple(w._labelnames) for w in wrappers if isinstance(w, MetricWrapperBase)}
    collector = OperatorCollector(
        leader=lambda: True, queues=dict, lifecycles=dict, worker_slots=lambda: 0
    )
    found |= {family.name: tuple(family._labelnames) for family in collector.describe()}
    return found


def test_no_metric_has_a_label_prometheus_sets_on_every_target():
    """`instance` and `job` are the scrape's own: a metric label so named is stored as
    `exported_instance` unless the scrape honours labels (docs/alerts.md). The HikyoInstance is
    `hikyo_instance`."""
    labelled = exported_label_names()
    assert "hikyo_instance" in labelled["hikyo_operator_fetch_429"]
    assert {name: labels for name, labels in labelled.items()
            if {"instance", "job"} & set(labels)} == {}  # fmt: skip


def test_hikyo_instance_is_grouped_by_only_over_metrics_that_carry_it():
    """A board line or an alert grouped by `hikyo_instance` is a HikyoInstance only where every
    metric of its expression has that label."""
    labelled = exported_label_names()
    board = json.loads(BOARD.read_text())
    exprs = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    exprs += [rule["expr"] for rule in _rules()]
    grouped = [e for e in exprs if re.search(r"\b(by|on)\s*\([^)]*\bhikyo_instance\b", e)]
    assert len(grouped) >= 3  # the board's fetch time and 429s, HikyoInstanceRateLimited
    carriers = tuple(name for name, labels in labelled.items() if "hikyo_instance" in labels)
    for expr in grouped:
        assert all(name.startswith(carriers) for name in metric_names(expr)), expr


def test_every_metric_in_the_board_and_the_rules_is_exported():
    board = json.loads(BOARD.read_text())
    exprs = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    exprs += [rule["expr"] for rule in _rules()]
    named = set().union(*map(metric_names, exprs))
    exported = exported_series()
    assert {"hikyo_operator_secrets_ready", "workqueue_work_duration_seconds_bucket"} <= named
    assert named - exported == set()


def test_the_live_tests_rules_keep_every_expression_with_each_window_60_times_shorter():
    """tests/support/prometheus.rules_at_test_speed (the real node's live alerts): only the
    ranges, subquery steps and offsets change, each to a sixtieth; `for` goes."""
    from tests.support.prometheus import SPEED_UP, _faster

    def seconds(text: str) -> list[int]:
        units = {"s": 1, "m": 60, "h": 3600}
        return [int(n) * units[u] for n, u in re.findall(r"(\d+)([smh])\b", text)]

    for rule in _rules():
        expr = rule["expr"]
        faster = _faster(expr)
        assert re.sub(r"\d+[smh]\b", "D", faster) == re.sub(r"\d+[smh]\b", "D", expr)
        assert seconds(faster) == [max(s // SPEED_UP, 1) for s in seconds(expr)]
    assert _faster("rate(x[5m]) unless y offset 15m") == "rate(x[5s]) unless y offset 15s"
