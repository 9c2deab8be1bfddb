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

import yaml

from tests.support.helm import CHART
from tests.support.processes import Service, free_port
from tests.support.real_node import skip_or_fail, wait

PROMETHEUS = "/usr/bin/prometheus"  # Debian's prometheus package (tools/install-promtool.sh)
ALERTS = CHART / "files" / "alerts.yaml"


@dataclass
class Prometheus:
    url: str
    targets: Path

    def scrape(self, *addresses: str) -> None:
        """File service discovery: what the chart's ServiceMonitor would find, by pod IP."""
        found = [{"targets": list(addresses), "labels": {"job": "hikyo-operator"}}]
        self.targets.write_text(json.dumps(found))

    def query(self, expr: str) -> list[dict]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            found = json.load(answer)
        assert found["status"] == "success", found
        return found["data"]["result"]


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


SPEED_UP = 30  # a minute of the chart's windows is 2 s of the test's
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
