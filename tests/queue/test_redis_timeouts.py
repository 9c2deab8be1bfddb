"""Every keyed-queue call to Redis is bounded (issue 7 items 2 and 4, S8.4): a client built
without socket timeouts gets them from the queue, so a Redis that accepts the connection and
never answers raises ``redis.TimeoutError`` instead of holding a run for ever."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.silent_peer import SilentPeer
from workers.keys import ObjectKey
from workers.queue import redis as redis_queue
from workers.queue.base import Lock
from workers.queue.redis import RedisQueue


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never says a word."""
    with SilentPeer() as peer:
        yield peer.port


def test_a_client_without_timeouts_gets_them_and_a_silent_redis_raises(silent_port, monkeypatch):
    monkeypatch.setattr(redis_queue, "CALL_TIMEOUT_SECONDS", 0.2)  # keep the test quick
    client = redis.Redis(
        host="127.0.0.1",
        port=silent_port,
        socket_timeout=None,
        socket_connect_timeout=None,
        retry=Retry(NoBackoff(), 0),
    )
    queue = RedisQueue(client, prefix="silent")
    options = client.connection_pool.connection_kwargs
    assert options["socket_timeout"] == options["socket_connect_timeout"] == 0.2
    with pytest.raises(redis.TimeoutError):
        queue.holds(Lock(ObjectKey("ns", "app", "uid-1"), "me", "1"))


def test_a_callers_own_timeouts_stay():
    client = redis.Redis(host="127.0.0.1", port=1, socket_timeout=1.5, socket_connect_timeout=0.5)
    RedisQueue(client, prefix="own")
    options = client.connection_pool.connection_kwargs
    assert (options["socket_timeout"], options["socket_connect_timeout"]) == (1.5, 0.5)
