"""The operator under test as real processes: embedded (one ``manage.py run_operator``, SQLite) or
scaled (``run_operator`` plus N ``celery -A workers.celery_app worker`` processes on a private
Redis, PostgreSQL for the observation store), started with tests/support's harness; and their
memory, sampled over the whole process tree."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis as redis_client

from bench.memory import TreeSampler, descendants, parent_pids
from tests.support.operator_harness import Operator
from tests.support.processes import (
    PostgresServer,
    RedisServer,
    Service,
    celery_worker,
    free_port,
    locate_postgres,
    locate_redis_server,
    wait_http_ok,
)
from tests.support.waiting import wait_for

T = TypeVar("T")
LOG_TAIL_LINES = 40
WORKER_BOOT_TIMEOUT = 180.0


def outside_pytest(call: Callable[[], T]) -> T:
    """tests/support reports a missing tool with pytest.fail (a BaseException); here it is an
    ordinary error with the same message."""
    try:
        return call()
    except pytest.fail.Exception as failure:
        raise RuntimeError(str(failure)) from None


class Databases:
    """One PostgreSQL server for the whole bench run, started on first use; a fresh database
    for every scaled side, so no side sees another's observations."""

    def __init__(self, cleanup: contextlib.ExitStack) -> None:
        self._cleanup = cleanup
        self._server: PostgresServer | None = None
        self._count = 0

    def fresh(self) -> str:
        if self._server is None:
            server = PostgresServer(outside_pytest(lambda: locate_postgres(False)))
            self._cleanup.callback(server.stop)  # also after a failed start
            outside_pytest(server.start)
            self._server = server
        self._count += 1
        name = f"bench_{self._count}_{secrets.token_hex(3)}"
        with self._server.connect("postgres") as connection:
            connection.execute(f"CREATE DATABASE {name} OWNER {PostgresServer.ROLE}")
        return self._server.url.rsplit("/", 1)[0] + f"/{name}"


def worker_argv(name: str, concurrency: int, loglevel: str, pool: str = "threads") -> list[str]:
    """tests/support's worker command with this run's pool, pool size and log level."""
    argv = celery_worker(name, pool)
    for option, value in (("--concurrency", str(concurrency)), ("--loglevel", loglevel)):
        argv[argv.index(option) + 1] = value
    return argv


class Fleet:
    """run_operator, and in scaled mode ``workers`` celery workers, sharing one environment."""

    def __init__(
        self,
        tmp: Path,
        kubeconfig: Path,
        workers: int,
        concurrency: int,
        env: dict[str, str],
        databases: Databases,
        cleanup: contextlib.ExitStack,
        pool: str = "threads",
        shards: int = 1,
    ) -> None:
        self.workers, self.concurrency, self.pool = workers, concurrency, pool
        self.shards = shards  # scaled: one run_operator per shard (S4.1.8)
        redis_url = database_url = None
        if workers:
            binary = outside_pytest(lambda: locate_redis_server(False))
            redis = RedisServer(tmp / "redis", binary)
            cleanup.callback(redis.stop)
            redis.start()
            redis_url, database_url = redis.url, databases.fresh()
        # migrates the observation store (SQLite under tmp, or the fresh database)
        self.operator = Operator(tmp, kubeconfig, redis_url, database_url)
        self.operator.env.update(env)
        self.redis_url = redis_url
        cleanup.callback(self.stop)
        self.sampler = TreeSampler()
        self._stopped = False

    @property
    def mode(self) -> str:
        if self.shards > 1:
            return "sharded"
        return "scaled" if self.workers else "embedded"

    def start_workers(self, timeout: float = WORKER_BOOT_TIMEOUT) -> None:
        """The celery workers, returning once each serves /metrics (its worker_init ran) and,
        with the prefork pool, has forked its children; they then wait for tasks."""
        self.sampler.start()
        loglevel = self.operator.env.get("HIKYO_LOG_LEVEL", "WARNING")
        booting = []
        for index in range(1, self.workers + 1):
            name, port = f"worker-{index}", free_port()
            env = {**self.operator.env, "HIKYO_OPERATOR_METRICS_ADDR": f"127.0.0.1:{port}"}
            argv = worker_argv(name, self.concurrency, loglevel, self.pool)
            service = Service(name, argv, self.operator.tmp / f"{name}.log", env).start()
            self.operator.services.append(service)
            self.sampler.add(name, service.pid)
            booting.append((service, port))
        deadline = time.monotonic() + timeout
        for service, port in booting:
            left = max(1.0, deadline - time.monotonic())
            wait_http_ok(f"http://127.0.0.1:{port}/metrics", timeout=left, alive=service.alive)
            if self.pool != "prefork":
                continue  # a threads pool starts its threads in the worker process itself
            wait_for(
                lambda service=service: (
                    len(descendants(service.pid, parent_pids())) >= self.concurrency
                ),
                timeout=max(1.0, deadline - time.monotonic()),
                interval=0.2,
                what=f"{service.name}'s {self.concurrency} pool processes",
            )

    def start_leader(self) -> None:
        """run_operator (one per shard); returns once each answers /healthz."""
        if not self.sampler.is_alive():
            self.sampler.start()
        for shard in range(self.shards):
            self.start_shard_leader(shard)

    def start_shard_leader(self, shard: int, label: str | None = None) -> Service:
        """A run_operator of ``shard`` (the only one, unsharded): the shard's leader, or a
        standby when another already holds its Lease."""
        name = label or self.leader_label(shard)
        env = {}
        if self.shards > 1:
            env = {"HIKYO_OPERATOR_SHARDS": str(self.shards), "HIKYO_OPERATOR_SHARD": str(shard)}
        leader = self.operator.start_leader(name, **env)
        self.sampler.add(name, leader.pid)
        return leader

    def leader_label(self, shard: int) -> str:
        return "operator" if self.shards == 1 else f"operator-shard-{shard}"

    def service(self, name: str) -> Service:
        return next(s for s in self.operator.services if s.name == name)

    def dead(self) -> list[str]:
        """The services that have exited."""
        return [s.name for s in self.operator.services if not s.alive()]

    def cpu_roots(self) -> dict[int, str]:
        """pid -> kind for bench.cpu: run_operator, and the workers (their pool children too)."""
        return {
            s.pid: "celery workers" if s.name.startswith("worker-") else "run_operator"
            for s in self.operator.services
            if s.process is not None
        }

    def redis_commands(self) -> Counter[str]:
        """Redis commands served so far, by command (``INFO commandstats``); none embedded."""
        if self.redis_url is None:
            return Counter()
        with redis_client.Redis.from_url(self.redis_url, socket_timeout=10) as connection:
            info = connection.info("commandstats")
        return Counter({name.removeprefix("cmdstat_"): int(s["calls"]) for name, s in info.items()})

    def memory(self) -> list[dict[str, Any]]:
        self.sampler.sample()
        return self.sampler.report()

    def pod_memory(self) -> dict[str, float]:
        """Each process tree's peak as one container holds it (bench.memory.tree_kib), MiB."""
        return self.sampler.tree_report()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.sampler.stop()
        for service in self.operator.services:  # all shut down at once, not one after another
            if service.alive():
                with contextlib.suppress(ProcessLookupError):
                    service.process.terminate()  # type: ignore[union-attr]
        self.operator.stop()  # each service: SIGTERM, SIGKILL to its group after 20 s

    def log_tails(self, lines: int = LOG_TAIL_LINES) -> str:
        parts = []
        for service in self.operator.services:
            tail = service.log().splitlines()[-lines:]
            parts.append(f"--- {service.name} ({service.log_path}), last {len(tail)} lines")
            parts.extend(tail)
        return "\n".join(parts)
