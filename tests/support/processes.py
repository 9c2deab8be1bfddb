"""Real services and operator processes for end-to-end tests: redis-server, run_operator,
celery workers. Each runs in its own process group with its output in a log file."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Service:
    """A child process in its own process group, logging to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path = REPO,
    ) -> None:
        self.name, self.argv, self.log_path = name, argv, log_path
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signals the whole group (a celery worker's pool children too) and reaps."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


DEBIAN_REDIS = "/usr/bin/redis-server"


def locate_redis_server(skip_integration: bool, candidate: str | None = None) -> str:
    """The ``redis-server`` path; fails with how to fix it, or skips when told to."""
    path = candidate if candidate is not None else shutil.which("redis-server") or DEBIAN_REDIS
    if path and os.access(path, os.X_OK):
        return path
    message = (
        f"redis-server not found (looked on PATH and at {DEBIAN_REDIS}); the Redis tests need "
        "it: apt-get install redis-server, or set HIKYO_SKIP_INTEGRATION=1 to skip"
    )
    if skip_integration:
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


class RedisServer(Service):
    """A private redis-server on a free loopback port; no persistence, so a restart (stop then
    start, same port) comes back empty."""

    def __init__(self, directory: Path, binary: str = DEBIAN_REDIS) -> None:
        self.port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        super().__init__(
            "redis",
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(directory)],
            directory / "redis.log",
        )  # fmt: skip

    def client(self, **options: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **options)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        super().start()
        client = redis.Redis(port=self.port, socket_timeout=1)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        wait_for(answers, timeout=20, what="redis-server to answer PING")
        client.close()
        return self


def manage(*args: str) -> list[str]:
    return [sys.executable, str(REPO / "manage.py"), *args]


def celery_worker(name: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.celery_app",
        "worker",
        "--concurrency",
        "2",
        "--loglevel",
        "INFO",
        "-n",
        f"{name}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


def wait_http_ok(url: str, timeout: float = 60.0, alive=lambda: True) -> None:
    import urllib.request

    def ok() -> bool:
        if not alive():
            raise AssertionError(f"the process serving {url} exited")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    wait_for(ok, timeout=timeout, what=url)
