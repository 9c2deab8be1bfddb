"""S8.1 for HIKYO_OPERATOR_METRICS_ADDR at the process edge: a bad address, or one that
cannot be bound, stops run_operator and a Celery worker with one line and a non-zero exit."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from tests.support.kube import unreached_kubeconfig
from tests.unit.test_invalid_settings_at_boot import (
    _assert_one_line_refusal,
    _clean_environ,
    _run,
)


@pytest.mark.parametrize("value", ["notaport", ":0", "host:99999", "a b:8080"])
def test_run_operator_refuses_a_bad_metrics_address_in_one_line(tmp_path, value):
    env = {**_clean_environ(tmp_path), "HIKYO_OPERATOR_METRICS_ADDR": value}
    result = _run([sys.executable, "manage.py", "run_operator"], env)
    _assert_one_line_refusal(result, "HIKYO_OPERATOR_METRICS_ADDR")


def test_run_operator_refuses_a_bad_metrics_addr_option(tmp_path):
    result = _run(
        [sys.executable, "manage.py", "run_operator", "--metrics-addr", "nowhere"],
        _clean_environ(tmp_path),
    )
    _assert_one_line_refusal(result, "--metrics-addr")


def test_celery_worker_refuses_a_bad_metrics_address_in_one_line(tmp_path):
    env = {**_clean_environ(tmp_path), "HIKYO_OPERATOR_METRICS_ADDR": "8080"}
    result = _run([sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker"], env)
    _assert_one_line_refusal(result, "HIKYO_OPERATOR_METRICS_ADDR")


def _kubeconfig(tmp_path: Path) -> str:
    return str(unreached_kubeconfig(tmp_path))


def test_run_operator_stops_in_one_line_when_the_metrics_port_is_taken(tmp_path):
    """Like controller-runtime's manager: no metrics server, no operator."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            **_clean_environ(tmp_path),
            "HIKYO_OPERATOR_NAMESPACE": "hikyo-system",
            "KUBECONFIG": _kubeconfig(tmp_path),
            "HIKYO_OPERATOR_METRICS_ADDR": f"127.0.0.1:{port}",
        }
        result = _run([sys.executable, "manage.py", "run_operator"], env)
    assert result.returncode != 0, result
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("CommandError: cannot serve metrics on"), result.stderr
    assert "Traceback" not in result.stderr


def test_a_celery_worker_stops_in_one_line_when_its_metrics_port_is_taken(tmp_path):
    """Checked at worker_init, before the pool forks (workers/celery_app.py)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**_clean_environ(tmp_path), "HIKYO_OPERATOR_METRICS_ADDR": f"127.0.0.1:{port}"}
        result = _run(
            [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "--pool",
             "solo", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            env,
        )  # fmt: skip
    assert result.returncode != 0, result
    output = result.stdout + result.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in output, output[-3000:]
    assert "Traceback" not in output
