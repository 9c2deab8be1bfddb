"""``manage.py resync`` as a user runs it (a real process, its exit code and its two streams)
against the real apiserver, with the embedded operator handling the requests (issue 9 item 2
acceptance). Unit tests of the selection rules: tests/unit/test_force_sync_command.py."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from tests.support.factories import GROUP, VERSION, make_hikyosecret
from tests.support.kube import unreachable_kubeconfig
from tests.support.operator_harness import Operator, ready_count
from tests.support.processes import free_port, manage
from tests.support.waiting import wait_for
from tests.support.world import CANARIES, World, canary
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION

COUNT = 50
REQUESTED = re.compile(
    rf"^(\S+): resync requested \({re.escape(FORCE_SYNC_ANNOTATION)}=(resync-[0-9TZ]+-[0-9a-f]+)\)$"
)
OUTCOME = re.compile(r"^(\S+): (\w+) lifecycle=(\w+) fetched=(yes|no) wrote=(yes|no)$")


def resync(env: dict[str, str], *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        manage("resync", *argv),
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def command_env(kubeconfig: Path | str) -> dict[str, str]:
    return {
        "KUBECONFIG": str(kubeconfig),
        "HIKYO_OPERATOR_NAMESPACE": "hikyo-system",
        "HIKYO_OPERATOR_NAMESPACES": "",
    }


def one_line_error(done: subprocess.CompletedProcess, expected: str) -> None:
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert expected in lines[0], lines[0]


def deliveries_without_cursor(world: World) -> int:
    return sum(
        1
        for r in world.requests()
        if r.method == "GET" and r.path.endswith("/delivery") and not r.cursor_present
    )


def populate_labelled(world: World, count: int, label: str) -> None:
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL=canary("value"))
    world.grant()
    world.create_instance()
    world.create_credential()
    spec = {
        "instanceRef": {"name": world.instance},
        "scope": {"org": world.org, "project": world.project, "environment": world.environment},
        "auth": {"secretRef": {"name": world.credential}},
    }
    for index in range(count):
        body = make_hikyosecret(f"app-{index}", target={"name": f"app-env-{index}"}, **spec)
        body["metadata"]["labels"] = {"hikyo-test": label}
        world.custom.create_namespaced_custom_object(
            GROUP, VERSION, world.namespace, "hikyosecrets", body
        )
    world.create_cr("unlabelled", target={"name": "unlabelled-env"})  # not selected


@pytest.mark.timeout(900)
def test_resync_all_wait_over_50_objects(world, kubeconfig, tmp_path):
    """``resync --all -l ... --wait``: one request line and one outcome line per selected CR,
    exit 0 once all are handled, one cursor-less fetch each, nothing else asked."""
    label = uuid.uuid4().hex[:12]  # --all spans every namespace: the label keeps it to ours
    operator = Operator(tmp_path, kubeconfig, None)
    operator.env["HIKYO_OPERATOR_METRICS_ADDR"] = f"127.0.0.1:{free_port()}"
    try:
        populate_labelled(world, COUNT, label)
        operator.start_leader()
        wait_for(
            lambda: ready_count(world) == COUNT + 1,
            timeout=480,
            interval=2,
            what=f"{COUNT + 1} HikyoSecrets Ready",
        )
        before = deliveries_without_cursor(world)
        done = resync(
            command_env(kubeconfig),
            "--all",
            "-l",
            f"hikyo-test={label}",
            "--wait=400",
            timeout=480,
        )
        after = deliveries_without_cursor(world)
        statuses = [
            item.get("status") or {}
            for item in world.custom.list_namespaced_custom_object(
                GROUP, VERSION, world.namespace, "hikyosecrets"
            )["items"]
        ]
    finally:
        operator.stop()
    assert done.returncode == 0, done.stderr + done.stdout[-2000:]
    lines = done.stdout.splitlines()
    names = {f"{world.namespace}/app-{index}" for index in range(COUNT)}
    requested = [m for m in map(REQUESTED.match, lines) if m]
    outcomes = [m for m in map(OUTCOME.match, lines) if m]
    assert len(lines) == 2 * COUNT, lines
    assert {m[1] for m in requested} == names and len(requested) == COUNT
    assert len({m[2] for m in requested}) == 1  # one request value per command run
    assert {m[1] for m in outcomes} == names and len(outcomes) == COUNT
    for m in outcomes:
        assert (m[3], m[4], m[5]) == ("Synced", "yes", "no"), m[0]  # same content: no write
    assert after == before + COUNT
    value = requested[0][2]
    handled = [s for s in statuses if (s.get("lastForcedSync") or {}).get("value") == value]
    assert len(handled) == COUNT  # "unlabelled" was not asked
    shown = done.stdout + done.stderr
    for secret in CANARIES | {world.token}:
        assert secret not in shown
    for status in statuses:
        for field in ("cursor", "stamp"):
            assert not status.get(field) or status[field] not in shown
    assert "Traceback" not in operator.logs()


@pytest.mark.timeout(300)
def test_resync_errors_are_one_line_and_a_non_zero_exit(
    kubeconfig, crds, api_client, namespace, tmp_path
):
    env = command_env(kubeconfig)
    custom = client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "hikyosecrets", make_hikyosecret("app")
    )

    one_line_error(
        resync(env, f"{namespace}/nope", f"{namespace}/app"),
        f"HikyoSecret not found: {namespace}/nope",
    )
    assert FORCE_SYNC_ANNOTATION not in (
        custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "hikyosecrets", "app")[
            "metadata"
        ].get("annotations")
        or {}
    )  # nothing was asked when one name was wrong
    one_line_error(
        resync(env, "--all", "-l", "team in (payments"),
        "invalid label selector 'team in (payments': the apiserver refused it (HTTP 400",
    )
    one_line_error(
        resync(env, "-n", namespace, "-l", "team=nobody"),
        f"no HikyoSecret matched in namespace {namespace} with labels 'team=nobody'",
    )
    one_line_error(
        resync({**env, "KUBECONFIG": str(unreachable_kubeconfig(kubeconfig, tmp_path))}, "a/b"),
        "cannot reach the cluster",
    )
    one_line_error(
        resync({**env, "KUBECONFIG": str(tmp_path / "missing.kubeconfig")}, "a/b"),
        "no cluster configured",
    )
    one_line_error(resync(env, "--wait", f"{namespace}/app", "--all"), "not both")

    # Nobody handles it (no operator runs in this test): listed, and a non-zero exit.
    done = resync(env, f"{namespace}/app", "--wait=2")
    one_line_error(done, "1 of 1 HikyoSecrets did not handle the resync within 2 s")
    [asked, late] = done.stdout.splitlines()
    match = REQUESTED.match(asked)
    assert match and match[1] == f"{namespace}/app"
    assert late == f"{namespace}/app: not handled within 2 s"
    annotations = custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, "hikyosecrets", "app"
    )["metadata"]["annotations"]
    assert annotations[FORCE_SYNC_ANNOTATION] == match[2]
