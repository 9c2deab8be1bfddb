"""Both backends implement the whole keyed-queue protocol, including the engine's
CoordinationStore (S4.10.0), with their own code rather than the protocol's stubs."""

from __future__ import annotations

import inspect

import pytest

from workers.engine.ports import CoordinationStore
from workers.queue.base import KeyedQueue
from workers.queue.memory import MemoryQueue
from workers.queue.redis import RedisQueue

MEMBERS = sorted(
    name
    for name, _ in inspect.getmembers(KeyedQueue, inspect.isfunction)
    if not name.startswith("_")
)


def test_protocol_includes_the_coordination_store():
    assert {"not_found_seen", "record_not_found", "clear_not_found"} <= set(MEMBERS)
    assert CoordinationStore in KeyedQueue.__mro__


@pytest.mark.parametrize("backend", [MemoryQueue, RedisQueue])
@pytest.mark.parametrize("name", MEMBERS)
def test_backend_implements_member(backend: type, name: str):
    implementation = getattr(backend, name)
    assert implementation is not getattr(KeyedQueue, name), f"{backend.__name__}.{name} missing"
    assert inspect.signature(implementation) == inspect.signature(getattr(KeyedQueue, name))
