"""run_operator and Celery workers as real processes for end-to-end tests, and what those
tests read back: readiness of the CRs, run intervals from the logs, the raw Redis contents."""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import signal
import subprocess
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path

import redis

from tests.support.factories import GROUP, VERSION
from tests.support.kube import request_totals
from tests.support.processes import (
    Service,
    celery_worker,
    free_port,
    manage,
    session_postgres,
    wait_http_ok,
)
from tests.support.world import World, canary

SERVICE_LOGS: list[str] = []  # logs of every operator and worker process the tests ran
RUN_LINE = re.compile(r"run (\S+) uid=(\S+) start=([\d.]+) end=([\d.]+) outcome=(\w+)")
_MIGRATED: set[str] = set()  # PostgreSQL DSNs already migrated this session


def scaled_database_url() -> str:
    """S8.1: scaled mode keeps observations in PostgreSQL: the session's server."""
    return session_postgres(os.environ.get("HIKYO_SKIP_INTEGRATION") == "1").url


class Operator:
    """run_operator and its workers as real processes, sharing one environment."""

    def __init__(
        self,
        tmp: Path,
        kubeconfig: Path,
        redis_url: str | None,
        database_url: str | None = None,
    ) -> None:
        """Scaled mode (a ``redis_url``) gets the session's PostgreSQL unless told otherwise;
        embedded mode its own SQLite under ``tmp``."""
        self.tmp = tmp
        self.http_port = free_port()
        if redis_url and database_url is None:
            database_url = scaled_database_url()
        self.env = {
            "KUBECONFIG": str(kubeconfig),
            "HIKYO_OPERATOR_NAMESPACE": "hikyo-system",
            "HIKYO_OPERATOR_DATA_DIR": str(tmp / "data"),
            "HIKYO_OPERATOR_NATIVE_SECRET_TYPES": "true",
            "HIKYO_OPERATOR_HEALTH_ADDR": f"127.0.0.1:{self.http_port}",
            "HIKYO_LOG_LEVEL": os.environ.get("HIKYO_TEST_OPERATOR_LOG_LEVEL", "INFO"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "REDIS_URL": "",
            "HIKYO_OPERATOR_REDIS_URL": redis_url or "",
            "DATABASE_URL": "",
            "HIKYO_OPERATOR_DATABASE_URL": database_url or "",
        }
        self.services: list[Service] = []
        self.metrics_ports: dict[str, int] = {}  # service name -> its /metrics port (S8.6)
        if database_url in _MIGRATED:
            return  # a shared server is migrated once per session
        subprocess.run(
            manage("migrate", "--noinput"),
            env={**os_env(), **self.env},
            check=True,
            capture_output=True,
            timeout=120,
        )
        if database_url:
            _MIGRATED.add(database_url)

    def start_leader(self, name: str = "operator", **extra_env: str) -> Service:
        """A run_operator process; the first gets ``http_port``, any further one its own.
        ``extra_env`` is this process's own (a shard leader's HIKYO_OPERATOR_SHARD)."""
        env = {**self.env, **extra_env}
        if any(s.argv == manage("run_operator") for s in self.services):
            env["HIKYO_OPERATOR_HEALTH_ADDR"] = f"127.0.0.1:{free_port()}"
        env["HIKYO_OPERATOR_METRICS_ADDR"] = self._metrics_addr(name)
        service = Service(name, manage("run_operator"), self.tmp / f"{name}.log", env).start()
        self.services.append(service)
        wait_http_ok(f"http://{env['HIKYO_OPERATOR_HEALTH_ADDR']}/healthz", alive=service.alive)
        return service

    def start_worker(self, name: str, pool: str = "threads") -> Service:
        env = {**self.env, "HIKYO_OPERATOR_METRICS_ADDR": self._metrics_addr(name)}
        service = Service(name, celery_worker(name, pool), self.tmp / f"{name}.log", env)
        service.stacks_signal = signal.SIGUSR1  # celery's "cry" handler
        service.start()
        self.services.append(service)
        return service

    def _metrics_addr(self, name: str) -> str:
        """Every process serves /metrics (S8.6): each its own free port."""
        self.metrics_ports[name] = free_port()
        return f"127.0.0.1:{self.metrics_ports[name]}"

    def scrape(self, name: str = "operator") -> str:
        """The /metrics text of the service called ``name``."""
        url = f"http://127.0.0.1:{self.metrics_ports[name]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode()

    def stop(self) -> None:
        for service in reversed(self.services):
            service.stop()
        SERVICE_LOGS.append(self.logs())  # for the final canary sweep

    def logs(self) -> str:
        return "\n".join(service.log() for service in self.services)

    def runs(self) -> list[tuple[str, float, float, str]]:
        return [(m[2], float(m[3]), float(m[4]), m[5]) for m in RUN_LINE.finditer(self.logs())]


def os_env() -> dict[str, str]:
    return dict(os.environ)


def populate(world: World, count: int, **spec) -> None:
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL=canary("value"))
    world.grant()
    world.create_instance()
    world.create_credential()
    for index in range(count):
        world.create_cr(f"app-{index}", target={"name": f"app-env-{index}"}, **spec)


def ready_count(world: World) -> int:
    listed = world.custom.list_namespaced_custom_object(
        GROUP, VERSION, world.namespace, "hikyosecrets"
    )
    return sum(
        1
        for item in listed["items"]
        for c in (item.get("status") or {}).get("conditions") or []
        if c["type"] == "Ready" and c["status"] == "True"
    )


def assert_serialized(runs: list[tuple[str, float, float, str]]) -> None:
    """S4.1.4: per UID, no two runs overlap in time (across all worker processes)."""
    by_uid: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for uid, start, end, _ in runs:
        by_uid[uid].append((start, end))
    for uid, intervals in by_uid.items():
        intervals.sort()
        for (_, end), (start, _) in itertools.pairwise(intervals):
            assert start >= end, f"overlapping reconciles of {uid}"


def write_requests(api_client) -> dict[str, float]:
    """apiserver_request_total for writes to what the operator writes, by resource."""
    verbs = {"POST", "PUT", "PATCH", "DELETE", "APPLY"}
    resources = {"secrets", "hikyosecrets", "events", "deployments"}
    return request_totals(api_client, verbs, resources, by_subresource=False)


def dump_redis(url: str) -> str:
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


def all_current(world: World) -> bool:
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


def readyz(port: int) -> tuple[int, str]:
    """The operator's /readyz as (HTTP status, body); (0, error class) when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=3) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, type(error).__name__
