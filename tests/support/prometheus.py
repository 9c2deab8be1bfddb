"""A real Prometheus for the real node's tests: Debian's server (the `prometheus` package, as
tools/install-promtool.sh installs it) scraping pods by file discovery, with the chart's rules."""

from __future__ import annotations

import contextlib
import json
import os
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from tests.support.helm import CHART, helm
from tests.support.processes import Service, free_port
from tests.support.real_node import selects, skip_or_fail, wait

PROMETHEUS = "/usr/bin/prometheus"  # Debian's prometheus package (tools/install-promtool.sh)
ALERTS = CHART / "files" / "alerts.yaml"


@dataclass
class Prometheus:
    url: str
    targets: Path

    def scrape(self, *addresses: str) -> None:
        """File service discovery: these pod addresses, as a hand-written scrape config."""
        self._discovered([{"targets": list(addresses), "labels": {"job": "hikyo-operator"}}])

    def scrape_as(self, monitor: dict[str, Any], api: client.ApiClient) -> None:
        """File service discovery: what prometheus-operator finds for ``monitor`` (a rendered
        ServiceMonitor) now: the ready endpoints of each Service it selects, on its endpoint's
        port and path, labelled as prometheus-operator labels them."""
        self._discovered(monitor_targets(monitor, api))

    def _discovered(self, groups: list[dict[str, Any]]) -> None:
        """The targets file, replaced whole (Prometheus must never read half of it) and only
        when it changes (each write makes it read the file again)."""
        text = json.dumps(groups, sort_keys=True)
        if self.targets.read_text() != text:
            partial = self.targets.with_suffix(".partial")
            partial.write_text(text)
            partial.replace(self.targets)

    def query(self, expr: str) -> list[dict]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            found = json.load(answer)
        assert found["status"] == "success", found
        return found["data"]["result"]


def service_monitor(node_tmp: Path, kubeconfig: Path, release: str, namespace: str) -> dict:
    """The chart's ServiceMonitor for ``release`` as installed (its values, the monitor on).
    The node has no prometheus-operator, so it is rendered, not installed."""
    values = helm("get", "values", release, "--namespace", namespace, "--all", "--output",
                  "yaml", kubeconfig=kubeconfig)  # fmt: skip
    assert values.returncode == 0, values.stderr
    path = node_tmp / f"{release}-values.yaml"
    path.write_text(values.stdout)
    rendered = helm(
        "template", release, str(CHART), "--namespace", namespace, "--values", str(path),
        "--set", "operator.metrics.serviceMonitor.enabled=true",
        "--show-only", "templates/servicemonitor.yaml",
    )  # fmt: skip
    (monitor,) = rendered.manifests()
    return monitor


def monitor_targets(monitor: dict[str, Any], api: client.ApiClient) -> list[dict[str, Any]]:
    """File-SD groups for ``monitor``'s endpoints: per selected Service, its EndpointSlices'
    ready addresses on the endpoint's named port; job = the Service's name, with its namespace,
    pod and endpoint, as prometheus-operator's relabelling sets them."""
    spec = monitor["spec"]
    namespaces = spec.get("namespaceSelector", {}).get(
        "matchNames", [monitor["metadata"]["namespace"]]
    )
    core, discovery = client.CoreV1Api(api), client.DiscoveryV1Api(api)
    groups = []
    for namespace in namespaces:
        for service in core.list_namespaced_service(namespace).items:
            if not selects(spec["selector"], service.metadata.labels):
                continue
            slices = discovery.list_namespaced_endpoint_slice(
                namespace, label_selector=f"kubernetes.io/service-name={service.metadata.name}"
            ).items
            for endpoint in spec["endpoints"]:
                for piece in slices:
                    ports = [p.port for p in piece.ports or [] if p.name == endpoint["port"]]
                    for found in piece.endpoints or []:
                        if not ports or not (found.conditions and found.conditions.ready):
                            continue
                        pod = found.target_ref.name if found.target_ref else ""
                        groups.append({
                            "targets": [f"{a}:{ports[0]}" for a in found.addresses],
                            "labels": {
                                "__metrics_path__": endpoint.get("path", "/metrics"),
                                "job": service.metadata.name,
                                "namespace": namespace,
                                "service": service.metadata.name,
                                "pod": pod,
                                "endpoint": endpoint["port"],
                            },
                        })  # fmt: skip
    return groups


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def running_prometheus(
    directory: Path, rules: Path, honor_labels: bool = True
) -> Iterator[Prometheus]:
    """Debian's Prometheus server scraping what ``Prometheus.scrape`` names every second, with
    ``rules`` loaded; ``honor_labels`` as the chart's ServiceMonitor's default, or False as a
    hand-written scrape config's."""
    if not os.access(PROMETHEUS, os.X_OK):
        skip_or_fail(f"{PROMETHEUS} is missing (apt-get install prometheus)")
    directory.mkdir()
    targets = directory / "targets.json"
    targets.write_text("[]")
    settings = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "hikyo-operator",
                "honor_labels": honor_labels,
                "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}],
            }
        ],
    }
    config_file = directory / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(settings))
    port = free_port()
    server = Service(
        "prometheus",
        [PROMETHEUS, f"--config.file={config_file}", f"--storage.tsdb.path={directory / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        directory / "prometheus.log",
    ).start()  # fmt: skip
    try:
        ready = f"http://127.0.0.1:{port}/-/ready"
        wait("Prometheus ready", lambda: server.alive() and answers(ready), 60)
        yield Prometheus(f"http://127.0.0.1:{port}", targets)
    finally:
        server.stop()


SPEED_UP = 60  # a minute of the chart's windows is a second (one scrape) of the test's
_DURATION = re.compile(r"(\d+)([smh])")
_WINDOWS = re.compile(r"\[[^\]]+\]|offset\s+\d+[smh]")


def _faster(expr: str) -> str:
    """``expr`` with each range, subquery step and offset divided by SPEED_UP."""

    def seconds(duration: re.Match[str]) -> str:
        value = int(duration[1]) * {"s": 1, "m": 60, "h": 3600}[duration[2]]
        return f"{max(value // SPEED_UP, 1)}s"

    return _WINDOWS.sub(lambda window: _DURATION.sub(seconds, window[0]), expr)


def rules_at_test_speed(directory: Path) -> Path:
    """The chart's rules with every ``for`` at 0s and every window SPEED_UP times shorter, so
    a test sees each alert fire and clear in seconds rather than in 5 to 30 minutes. The
    expressions, labels and annotations are otherwise the chart's; promtool runs them unchanged
    on virtual time (tests/chart/promtool/alerts_test.yaml)."""
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("for", None)
            rule["expr"] = _faster(rule["expr"])
    path = directory / "alerts-at-test-speed.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return path


def firing(prometheus: Prometheus, alert: str) -> list[dict[str, str]]:
    """The label sets ``alert`` fires with now."""
    found = prometheus.query(f'ALERTS{{alertname="{alert}", alertstate="firing"}}')
    return [series["metric"] for series in found]
