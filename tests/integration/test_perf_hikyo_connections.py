"""Hikyo requests reuse their TLS connection (issue 13): an answer read to its end, or one
that has no body (204, 304), gives its connection back to the pool; one whose body was not
read to its end (over the cap, a redirect, a transport failure) is closed, never reused.
Counted as TLS connections the real devserver accepted, over real HTTPS."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from devserver import Fault
from devserver.http import OriginServer
from hikyo.client import HikyoClient
from workers.engine.fetched import FetchOutcome, Scope


class Connections:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.accepted = 0
        self._lock = threading.Lock()
        original = OriginServer.finish_request

        def counted(server: Any, request: Any, client_address: Any) -> None:
            with self._lock:
                self.accepted += 1
            original(server, request, client_address)

        monkeypatch.setattr(OriginServer, "finish_request", counted)


def _report(world: Any) -> dict[str, Any]:
    return {
        "cluster_id": str(uuid.uuid4()),
        "namespace": world.namespace,
        "name": "app",
        "uid": str(uuid.uuid4()),
        "target": "app-env",
        "generation": 1,
        "observed_generation": 1,
        "lifecycle": "Synced",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}],
    }


@pytest.fixture
def hikyo(world: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    world.publish(DATABASE_URL="postgres://db", LOG_LEVEL="info")
    world.grant(("read", "reveal", "report-delivery-status"))
    connections = Connections(monkeypatch)
    client = HikyoClient(world.devserver.url, world.devserver.ca_bundle_b64)
    yield client, connections, Scope(*world.scope)
    client.close()


def test_fetches_and_reports_in_a_row_share_one_connection(world, hikyo):
    client, connections, scope = hikyo
    first = client.fetch(scope, token=world.token, projection="full", cursor=None)
    assert first.outcome is FetchOutcome.DELIVERY and first.status == 200
    cursor = first.delivery.cursor
    again = client.fetch(scope, token=world.token, projection="full", cursor=cursor)
    assert again.status == 200 and again.delivery.current
    for _ in range(3):
        assert client.report_status(scope, token=world.token, report=_report(world)).status == 204
    missing = client.fetch(
        Scope(world.org, world.project, "env-absent"),
        token=world.token,
        projection="full",
        cursor=None,
    )
    assert missing.status in (401, 403, 404)
    assert client.fetch(scope, token=world.token, projection="full", cursor=None).status == 200
    assert connections.accepted == 1


def test_a_refused_report_whose_small_body_is_not_wanted_keeps_the_connection(world, hikyo):
    """A report without the report grant is refused with a small JSON envelope, which the
    client never uses: dropped unread by the caller, the connection stays usable."""
    client, connections, scope = hikyo
    world.devserver.set_grants(world.token, ("read", "reveal"))
    for _ in range(3):
        refused = client.report_status(scope, token=world.token, report=_report(world))
        assert refused.status is not None and refused.status >= 400
    assert client.fetch(scope, token=world.token, projection="full", cursor=None).status == 200
    assert connections.accepted == 1


@pytest.mark.parametrize(
    "fault",
    [Fault.malformed("oversize"), Fault.redirect(), Fault.disconnect()],
    ids=["body-over-the-cap", "redirect-body-unread", "transport-failure"],
)
def test_a_connection_whose_answer_was_not_read_to_its_end_is_not_reused(world, hikyo, fault):
    client, connections, scope = hikyo
    assert client.fetch(scope, token=world.token, projection="full", cursor=None).status == 200
    world.devserver.set_fault(world.token, fault, times=1)
    broken = client.fetch(scope, token=world.token, projection="full", cursor=None)
    assert broken.outcome is FetchOutcome.FAILED
    after = client.fetch(scope, token=world.token, projection="full", cursor=None)
    assert after.status == 200 and after.outcome is FetchOutcome.DELIVERY
    assert connections.accepted == 2  # the first, then a new one after the unfinished answer
