"""Keyed-queue test fixtures: an injected clock and a private Redis for the scaled backend."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.queue.redis_server import RedisServer, locate_redis_server

# The contract suite lives outside a test module; keep pytest's assertion messages for it.
pytest.register_assert_rewrite("tests.queue.contract")

SKIP_INTEGRATION = os.environ.get("HIKYO_SKIP_INTEGRATION") == "1"


class FakeClock:
    """Seconds that move only when a test says so (never sleep for timers)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One private redis-server per session: loopback, free port, no persistence, temp dir."""
    server = RedisServer(
        binary=locate_redis_server(SKIP_INTEGRATION), directory=tmp_path_factory.mktemp("redis")
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """An empty database per test."""
    client = redis_server.client()
    client.flushdb()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def prefix() -> str:
    return f"hikyo-test-{uuid.uuid4().hex[:8]}"
