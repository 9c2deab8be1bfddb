"""Shared test setup: integration tests need the real local control plane.

Integration tests fail (never skip silently) when the control plane cannot start, unless
HIKYO_SKIP_INTEGRATION=1 says to skip them. HIKYO_TEST_KUBECONFIG points the suite at an
existing cluster instead of starting one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.processes import (
    RedisServer,
    locate_redis_server,
    session_postgres,
    stop_session_postgres,
)

SKIP_INTEGRATION = os.environ.get("HIKYO_SKIP_INTEGRATION") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    integration_dir = Path(__file__).parent / "integration"
    for item in items:
        if integration_dir in Path(item.fspath).parents:
            item.add_marker(pytest.mark.integration)
            if SKIP_INTEGRATION:
                item.add_marker(pytest.mark.skip(reason="HIKYO_SKIP_INTEGRATION=1"))
    # The canary sweep inspects what every other test left behind, so it runs last.
    items.sort(key=lambda item: item.get_closest_marker("sweep") is not None)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory):
    """One private redis-server per session (keyed-queue contract and end-to-end tests)."""
    binary = locate_redis_server(SKIP_INTEGRATION)
    server = RedisServer(tmp_path_factory.mktemp("redis"), binary).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """The session's private PostgreSQL server (Debian's packages): the scaled mode's
    observation store (S8.1). Scaled-mode Operators (tests/support/operator_harness.py) use it
    too, started on first use; either way it is stopped at session end."""
    return session_postgres(SKIP_INTEGRATION)


@pytest.fixture(scope="session", autouse=True)
def _stop_postgres_at_session_end():
    yield
    stop_session_postgres()  # nothing when no test needed PostgreSQL
