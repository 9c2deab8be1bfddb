"""Keyed-queue test fixtures: an injected clock and a private Redis for the scaled backend."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.support.clocks import FakeClock
from tests.support.processes import RedisServer

# The contract suite lives outside a test module; keep pytest's assertion messages for it.
pytest.register_assert_rewrite("tests.queue.contract")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


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
