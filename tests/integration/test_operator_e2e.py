"""The operator running by itself: `run_operator` (+ Celery workers on real Redis in scaled
mode), against the real apiserver and the devserver. S4.1, S4.17, S8.4, design.md."""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest
import redis

from tests.support.factories import GROUP, VERSION
from tests.support.kube import get_raw
from tests.support.processes import (
    RedisServer,
    Service,
    celery_worker,
    free_port,
    manage,
    wait_http_ok,
)
from tests.support.waiting import wait_for
from tests.support.world import CANARIES, World, canary

RUN_LINE = re.compile(r"run (\S+) uid=(\S+) start=([\d.]+) end=([\d.]+) outcome=(\w+)")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


class Operator:
    """run_operator and its workers as real processes, sharing one environment."""

    def __init__(self, tmp: Path, kubeconfig: Path, redis_url: str | None) -> None:
        self.tmp = tmp
        self.http_port = free_port()
        self.env = {
            "KUBECONFIG": str(kubeconfig),
            "HIKYO_OPERATOR_NAMESPACE": "hikyo-system",
            "HIKYO_OPERATOR_DATA_DIR": str(tmp / "data"),
            "HIKYO_OPERATOR_NATIVE_SECRET_TYPES": "true",
            "HIKYO_OPERATOR_HEALTH_ADDR": f"127.0.0.1:{self.http_port}",
            "HIKYO_LOG_LEVEL": "INFO",
            "PYTHONDONTWRITEBYTECODE": "1",
            "REDIS_URL": "",
            "HIKYO_OPERATOR_REDIS_URL": redis_url or "",
        }
        self.services: list[Service] = []
        subprocess.run(
            manage("migrate", "--noinput"),
            env={**_os_env(), **self.env},
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start_leader(self, name: str = "operator", port: int | None = None) -> Service:
        env = dict(self.env)
        if port is not None:
            env["HIKYO_OPERATOR_HEALTH_ADDR"] = f"127.0.0.1:{port}"
        service = Service(name, manage("run_operator"), self.tmp / f"{name}.log", env).start()
        self.services.append(service)
        wait_http_ok(f"http://{env['HIKYO_OPERATOR_HEALTH_ADDR']}/healthz")
        return service

    def start_worker(self, name: str) -> Service:
        service = Service(name, celery_worker(name), self.tmp / f"{name}.log", self.env).start()
        self.services.append(service)
        return service

    def stop(self) -> None:
        for service in reversed(self.services):
            service.stop()

    def logs(self) -> str:
        return "\n".join(service.log() for service in self.services)

    def runs(self) -> list[tuple[str, float, float, str]]:
        return [(m[2], float(m[3]), float(m[4]), m[5]) for m in RUN_LINE.finditer(self.logs())]


def _os_env() -> dict[str, str]:
    return dict(os.environ)


def _populate(world: World, count: int, **spec) -> None:
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL=canary("value"))
    world.grant()
    world.create_instance()
    world.create_credential()
    for index in range(count):
        world.create_cr(f"app-{index}", target={"name": f"app-env-{index}"}, **spec)


def _ready_count(world: World) -> int:
    listed = world.custom.list_namespaced_custom_object(
        GROUP, VERSION, world.namespace, "hikyosecrets"
    )
    return sum(
        1
        for item in listed["items"]
        for c in (item.get("status") or {}).get("conditions") or []
        if c["type"] == "Ready" and c["status"] == "True"
    )


def _assert_serialized(runs: list[tuple[str, float, float, str]]) -> None:
    """S4.1.4: per UID, no two runs overlap in time (across all worker processes)."""
    by_uid: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for uid, start, end, _ in runs:
        by_uid[uid].append((start, end))
    for uid, intervals in by_uid.items():
        intervals.sort()
        for (_, end), (start, _) in itertools.pairwise(intervals):
            assert start >= end, f"overlapping reconciles of {uid}"


def _write_requests(api_client) -> dict[str, float]:
    """apiserver_request_total for writes to what the operator writes, by resource."""
    text = get_raw(api_client, "/metrics", accept="text/plain").decode()
    totals: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if labels.get("verb") in {"CREATE", "UPDATE", "PATCH", "DELETE", "APPLY"} and labels.get(
            "resource"
        ) in {"secrets", "hikyosecrets", "events", "deployments"}:
            totals[f"{labels['verb']} {labels['resource']}"] += float(line.rsplit(" ", 1)[1])
    return dict(totals)


@pytest.mark.timeout(900)
def test_scaled_mode_converges_200_hikyosecrets_one_run_per_key(
    world, kubeconfig, redis_server, tmp_path
):
    """200 CRs, run_operator + two Celery workers on real Redis: all Ready, never two runs of
    one CR at once, and the broker holds no values."""
    redis.Redis.from_url(redis_server.url).flushall()
    operator = Operator(tmp_path, kubeconfig, redis_server.url)
    try:
        _populate(world, 200)
        operator.start_leader()
        # Let the leader dispatch before any worker runs, then read the raw broker messages.
        wait_for(
            lambda: redis.Redis.from_url(redis_server.url).llen("celery") > 0,
            timeout=60,
            what="tasks on the broker",
        )
        raw = _dump_redis(redis_server.url)
        operator.start_worker("w1")
        operator.start_worker("w2")
        wait_for(
            lambda: _ready_count(world) == 200,
            timeout=600,
            interval=2,
            what="200 HikyoSecrets Ready",
        )
    finally:
        operator.stop()
    for secret in CANARIES | {world.token}:
        assert secret not in raw
    assert f"{world.namespace}" in raw  # the messages are there, carrying references
    runs = operator.runs()
    assert {uid for uid, *_ in runs} >= {
        item["metadata"]["uid"]
        for item in world.custom.list_namespaced_custom_object(
            GROUP, VERSION, world.namespace, "hikyosecrets"
        )["items"]
    }
    _assert_serialized(runs)


def _dump_redis(url: str) -> str:
    connection = redis.Redis.from_url(url)
    parts = []
    for key in connection.scan_iter():
        kind = connection.type(key).decode()
        if kind == "string":
            parts.append(repr(connection.get(key)))
        elif kind == "list":
            for item in connection.lrange(key, 0, -1):
                parts.append(repr(item))
                try:  # kombu wraps the task body in base64 JSON
                    body = json.loads(item)["body"]
                    parts.append(base64.b64decode(body).decode(errors="replace"))
                except (ValueError, KeyError, TypeError):
                    pass
        elif kind == "hash":
            parts.append(repr(connection.hgetall(key)))
        elif kind == "zset":
            parts.append(repr(connection.zrange(key, 0, -1, withscores=True)))
        elif kind == "set":
            parts.append(repr(connection.smembers(key)))
        parts.append(key.decode(errors="replace"))
    return "\n".join(parts)


@pytest.mark.timeout(600)
def test_embedded_mode_converges_and_an_unchanged_resync_writes_nothing(
    world, kubeconfig, api_client, tmp_path
):
    """Embedded mode, no Redis: CRs converge; then a full resync cycle makes zero writes to
    the apiserver (its own /metrics) and one conditional fetch per CR."""
    operator = Operator(tmp_path, kubeconfig, None)
    count = 20
    try:
        _populate(world, count, resyncInterval="10s")
        operator.start_leader()
        wait_for(
            lambda: _ready_count(world) == count, timeout=300, interval=1, what="HikyoSecrets Ready"
        )
        # Let every CR pass its first resync (Delivered -> Current is one status write).
        wait_for(lambda: _all_current(world), timeout=120, interval=1, what="Synced=Current")
        before = _write_requests(api_client)
        world.devserver.clear_requests()
        window_start = time.time()
        time.sleep(22)  # two resync periods of 10 s x [0.9, 1.1]
        after = _write_requests(api_client)
    finally:
        operator.stop()
    fetches = world.requests()
    assert after == before, {k: after.get(k, 0) - before.get(k, 0) for k in after}
    window = [run for run in operator.runs() if run[1] >= window_start]
    per_cr: dict[str, int] = defaultdict(int)
    for uid, _, _, outcome in window:
        assert outcome == "Current"
        per_cr[uid] += 1
    assert len(per_cr) == count and all(1 <= n <= 3 for n in per_cr.values()), per_cr
    # One conditional fetch per run (a run straddling the window start may add one).
    assert all(r.cursor_present for r in fetches)
    assert len(window) <= len(fetches) <= len(window) + 1
    assert "Traceback" not in operator.logs()


def _all_current(world: World) -> bool:
    listed = world.custom.list_namespaced_custom_object(
        GROUP, VERSION, world.namespace, "hikyosecrets"
    )
    return all(
        any(
            c["type"] == "Synced" and c["reason"] == "Current"
            for c in (item.get("status") or {}).get("conditions") or []
        )
        for item in listed["items"]
    )
