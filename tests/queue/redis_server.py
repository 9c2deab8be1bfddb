"""A private, throwaway ``redis-server`` on loopback for tests (no persistence, temp dir).

Started and stopped like httpx's test server fixture: wait until it answers, stop at teardown.
A missing binary fails the tests unless HIKYO_SKIP_INTEGRATION=1 says to skip them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

DEBIAN_BINARY = "/usr/bin/redis-server"
START_TIMEOUT = 10.0


def locate_redis_server(skip_integration: bool, candidate: str | None = None) -> str:
    """The ``redis-server`` path; fails with how to fix it, or skips when told to."""
    path = candidate if candidate is not None else shutil.which("redis-server") or DEBIAN_BINARY
    if path and os.access(path, os.X_OK):
        return path
    message = (
        f"redis-server not found (looked on PATH and at {DEBIAN_BINARY}); the Redis keyed-queue "
        "tests need it: apt-get install redis-server, or set HIKYO_SKIP_INTEGRATION=1 to skip"
    )
    if skip_integration:
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class RedisServer:
    binary: str
    directory: Path
    host: str = "127.0.0.1"
    port: int = 0
    _process: subprocess.Popen[bytes] | None = None

    def client(self, **options: object) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, **options)  # type: ignore[arg-type]

    def start(self) -> None:
        # Another process may grab the probed port before redis binds it: try a few.
        for _ in range(3):
            self.port = free_port()
            log = (self.directory / f"redis-{self.port}.log").open("wb")
            with log:
                self._process = subprocess.Popen(
                    [
                        self.binary,
                        "--port", str(self.port),
                        "--bind", self.host,
                        "--save", "",
                        "--appendonly", "no",
                        "--dir", str(self.directory),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            if self._wait_ready():
                return
            self.stop()
        log_text = "\n".join(p.read_text() for p in self.directory.glob("redis-*.log"))
        pytest.fail(f"redis-server did not start:\n{log_text[-2000:]}", pytrace=False)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                return False
            client = self.client(socket_connect_timeout=0.5)
            try:
                if client.ping():
                    return True
            except redis.ConnectionError:
                pass
            finally:
                client.close()
            time.sleep(0.05)
        return False
