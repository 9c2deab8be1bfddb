"""S8.1 at the process edge: every bad value stops `manage.py run_operator`, any other
manage.py command and a Celery worker with ONE line on stderr naming the variable, a non-zero
exit and no traceback; a credential in a URL is never echoed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "pw-9f3c2"  # a canary: must never be printed


def _clean_environ(tmp_path: Path) -> dict[str, str]:
    """The test process's environment without any setting under test."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HIKYO_", "DJANGO_")) and k not in {"REDIS_URL", "DATABASE_URL"}
    }
    return {
        **environ,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "HIKYO_OPERATOR_DATA_DIR": str(tmp_path / "data"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


BAD_VALUES = [
    pytest.param("HIKYO_OPERATOR_FETCH_QPS", "nan", id="qps-nan"),
    pytest.param("HIKYO_OPERATOR_FETCH_QPS", "inf", id="qps-inf"),
    pytest.param("HIKYO_OPERATOR_NAMESPACE", "Bad Namespace", id="namespace"),
    pytest.param(
        "HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS", '{"Bad NS": ["sa"]}', id="designated-ns"
    ),
    pytest.param("HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS", '{"ns": [""]}', id="designated-sa"),
    pytest.param(
        "HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS", "[" * 100_000, id="designated-deep-json"
    ),
    pytest.param("DJANGO_DEBUG", "maybe", id="django-debug"),
    pytest.param("HIKYO_OPERATOR_HEALTH_ADDR", "notaport", id="health-addr"),
    pytest.param("HIKYO_OPERATOR_TRIGGER_ROLLOUTS", "perhaps", id="bool"),
    pytest.param("HIKYO_LOG_LEVEL", "loud", id="log-level"),
    pytest.param("HIKYO_OPERATOR_REDIS_URL", f"http://:{PASSWORD}@r:6379/0", id="redis-scheme"),
    pytest.param("DATABASE_URL", f"mysql://hikyo:{PASSWORD}@db/hikyo", id="database-scheme"),
]


def _assert_one_line_refusal(result: subprocess.CompletedProcess[str], variable: str) -> None:
    assert result.returncode != 0, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert variable in lines[0], lines
    assert "Traceback" not in result.stderr + result.stdout
    assert PASSWORD not in result.stderr + result.stdout


@pytest.mark.parametrize(("variable", "value"), BAD_VALUES)
def test_run_operator_refuses_a_bad_value_in_one_line(tmp_path, variable, value):
    env = {**_clean_environ(tmp_path), variable: value}
    result = _run([sys.executable, "manage.py", "run_operator"], env)
    _assert_one_line_refusal(result, variable)


def test_scaled_mode_without_postgresql_refuses_to_start(tmp_path):
    """S8.1: a Redis URL makes scaled mode, which needs HIKYO_OPERATOR_DATABASE_URL = a
    PostgreSQL DSN: unset and SQLite are one clear line each."""
    redis = {"HIKYO_OPERATOR_REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:1/0"}
    for database in ({}, {"HIKYO_OPERATOR_DATABASE_URL": f"sqlite:///{tmp_path}/x.sqlite3"}):
        env = {**_clean_environ(tmp_path), **redis, **database}
        result = _run([sys.executable, "manage.py", "run_operator"], env)
        _assert_one_line_refusal(result, "HIKYO_OPERATOR_DATABASE_URL")
        assert "PostgreSQL" in result.stderr and "scaled mode" in result.stderr


@pytest.mark.parametrize("command", [["migrate", "--noinput"], ["help"], ["resync", "a/b"]])
def test_every_manage_command_refuses_the_same_way(tmp_path, command):
    env = {**_clean_environ(tmp_path), "HIKYO_OPERATOR_FETCH_QPS": "nan"}
    result = _run([sys.executable, "manage.py", *command], env)
    _assert_one_line_refusal(result, "HIKYO_OPERATOR_FETCH_QPS")


def test_run_operator_refuses_a_bad_http_addr_option(tmp_path):
    result = _run(
        [sys.executable, "manage.py", "run_operator", "--http-addr", "nowhere"],
        _clean_environ(tmp_path),
    )
    _assert_one_line_refusal(result, "--http-addr")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        pytest.param("HIKYO_OPERATOR_FETCH_QPS", "inf", id="qps-inf"),
        pytest.param("DJANGO_DEBUG", "maybe", id="django-debug"),
    ],
)
def test_celery_worker_refuses_a_bad_value_in_one_line(tmp_path, variable, value):
    """The worker loads Django settings through workers/celery_app.py: same one line."""
    env = {**_clean_environ(tmp_path), variable: value}
    result = _run([sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker"], env)
    _assert_one_line_refusal(result, variable)


KUBECONFIG_CASES = [
    pytest.param(None, "cannot be read: No such file or directory", id="missing"),
    pytest.param("clusters: [unclosed\n", "is not a usable kubeconfig (", id="not-yaml"),
    pytest.param(
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user: {token: " + PASSWORD + "}\n",
        "is not a usable kubeconfig: Invalid kube-config file.",
        id="no-context",
    ),
]


@pytest.mark.parametrize("command", [["run_operator"], ["status"]])
@pytest.mark.parametrize(("content", "reason"), KUBECONFIG_CASES)
def test_an_unusable_kubeconfig_is_one_line_naming_it(tmp_path, command, content, reason):
    """Issue 33 item 5: KUBECONFIG missing or invalid stops a command with one line naming
    KUBECONFIG and the reason, a non-zero exit, no traceback and none of the file's text."""
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    env = {
        **_clean_environ(tmp_path),
        "KUBECONFIG": str(path),
        "HIKYO_OPERATOR_NAMESPACE": "hikyo-system",
    }
    result = _run([sys.executable, "manage.py", *command], env)
    _assert_one_line_refusal(result, f"KUBECONFIG='{path}'")
    assert reason in result.stderr, result.stderr


def test_no_kubeconfig_anywhere_is_one_line_naming_kubeconfig(tmp_path):
    """Unset KUBECONFIG, not in a pod, no ~/.kube/config: one line that says all three."""
    env = {**_clean_environ(tmp_path), "HOME": str(tmp_path), "HIKYO_OPERATOR_NAMESPACE": "ops"}
    for variable in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        env.pop(variable, None)
    result = _run([sys.executable, "manage.py", "run_operator"], env)
    _assert_one_line_refusal(result, "KUBECONFIG is not set, this is not a pod")
    assert f"'{tmp_path}/.kube/config' cannot be read" in result.stderr
