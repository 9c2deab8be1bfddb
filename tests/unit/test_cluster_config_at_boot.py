"""Issue 33 item 5: no usable Kubernetes configuration (a missing or malformed KUBECONFIG, or
none at all outside a pod) stops run_operator, the other commands that need the cluster and a
Celery worker with ONE line on stderr naming where it looked, a non-zero exit and no traceback;
the kubeconfig's text (it holds credentials) is never echoed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.unit.test_invalid_settings_at_boot import _clean_environ, _run

TOKEN = "tok-5be1d"  # a canary in the malformed kubeconfig: must never be printed
MALFORMED = f"users: [{{name: u, user: {{token: {TOKEN}}}}}\nclusters: [\n"
COMMANDS = [
    pytest.param(["run_operator"], id="run_operator"),
    pytest.param(["status"], id="status"),
    pytest.param(["explain", "team/app"], id="explain"),
    pytest.param(["reconcile", "team/app"], id="reconcile"),
]


def _environ(tmp_path: Path, kubeconfig: str | None) -> dict[str, str]:
    env = {
        **_clean_environ(tmp_path),
        "HOME": str(tmp_path),  # no ~/.kube/config
        "HIKYO_OPERATOR_NAMESPACE": "hikyo-system",
        "HIKYO_OPERATOR_HEALTH_ADDR": "127.0.0.1:1",  # never bound: the start stops before
        "HIKYO_OPERATOR_METRICS_ADDR": "127.0.0.1:1",
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)  # not in a pod
    env.pop("KUBECONFIG", None)
    if kubeconfig is not None:
        env["KUBECONFIG"] = kubeconfig
    return env


def _malformed(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(MALFORMED)
    return str(path)


def _the_one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_kubeconfig_is_one_line(tmp_path, command):
    missing = str(tmp_path / "nowhere.yaml")
    result = _run([sys.executable, "manage.py", *command], _environ(tmp_path, missing))
    assert result.returncode == 1, result
    assert _the_one_line(result.stderr) == (
        f"hikyo-operator: no cluster configured: KUBECONFIG={missing!r} does not exist"
    )


@pytest.mark.parametrize("command", COMMANDS[:2])
def test_a_malformed_kubeconfig_is_one_line_without_its_text(tmp_path, command):
    path = _malformed(tmp_path)
    result = _run([sys.executable, "manage.py", *command], _environ(tmp_path, path))
    assert result.returncode == 1, result
    line = _the_one_line(result.stderr)
    assert line == (
        f"hikyo-operator: no cluster configured: KUBECONFIG={path!r} "
        "is not a usable kubeconfig (ParserError)"
    )
    assert TOKEN not in result.stdout + result.stderr


def test_no_configuration_at_all_names_each_place_looked(tmp_path):
    result = _run([sys.executable, "manage.py", "run_operator"], _environ(tmp_path, None))
    assert result.returncode == 1, result
    assert _the_one_line(result.stderr) == (
        "hikyo-operator: no cluster configured: KUBECONFIG is not set, in-cluster configuration"
        " failed (Service host/port is not set.) and ~/.kube/config does not exist"
    )


def test_a_celery_worker_stops_at_its_start_in_one_line(tmp_path):
    """Before its pool starts, not at each task. Only the one line is ours: as root, Celery
    warns about the user first (that warning is not an error and is left alone)."""
    path = _malformed(tmp_path)
    result = _run(
        [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "--pool", "solo"],
        _environ(tmp_path, path),
    )
    assert result.returncode == 1, result
    ours = [line for line in result.stderr.splitlines() if line.startswith("hikyo-operator:")]
    assert ours == [
        f"hikyo-operator: no cluster configured: KUBECONFIG={path!r} "
        "is not a usable kubeconfig (ParserError)"
    ], result.stderr[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert TOKEN not in result.stdout + result.stderr
