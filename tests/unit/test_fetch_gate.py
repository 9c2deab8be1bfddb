"""R15's gate (workers/engine/fetch.py): a 429 pause holds back the requests of the org whose
request drew it, and only those (S4.1.6 rev 3); another org of the same instance fetches as
before. Plain data, a recording server, the real MemoryQueue on an injected clock."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.clocks import FakeClock
from tests.support.factories import ORG
from tests.unit.decide_fixtures import INSTANCE_UID, NOW, SETTINGS, cr, observed, planned
from workers.engine.fetch import fetch
from workers.engine.fetched import FetchOutcome, FetchResult, Scope
from workers.engine.pacing import pause_instance, pause_scope
from workers.engine.plan import FetchAttempt, Gate
from workers.queue.memory import MemoryQueue

PAUSE_SECONDS = 20.0


class _RecordingServer:
    """The Hikyo client port: records each request's scope and answers 503."""

    def __init__(self) -> None:
        self.scopes: list[Scope] = []

    def fetch(self, scope: Scope, **request: Any) -> FetchResult:
        self.scopes.append(scope)
        return FetchResult(FetchOutcome.FAILED, 503, detail="HTTP 503")


class _Clocks:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def timer(self) -> float:
        return self.clock()

    def wall_seconds(self) -> float:
        return self.clock()


def _never_sleep(seconds: float) -> None:
    raise AssertionError(f"the fetch waited {seconds} s for a token; a fresh bucket has one")


def _fetch_while_paused(paused_org: str) -> tuple[FetchAttempt, _RecordingServer]:
    """One R15 for the fixtures' CR (org ``ORG``) while ``paused_org`` is paused by a 429."""
    server = _RecordingServer()
    obs = observed(cr(), server=server)
    clock = FakeClock(NOW.wall)
    store = MemoryQueue(clock=clock)
    pause_instance(store, pause_scope(INSTANCE_UID, paused_org), PAUSE_SECONDS, clock())
    attempt = fetch(
        obs, planned(obs), store, SETTINGS, NOW, sleep=_never_sleep, clocks=_Clocks(clock)
    )
    return attempt, server


def test_the_org_a_429_paused_stands_off_without_a_request():
    attempt, server = _fetch_while_paused(ORG)
    assert attempt.gate is Gate.PAUSED
    assert attempt.wait == pytest.approx(PAUSE_SECONDS)
    assert server.scopes == []


def test_another_org_of_the_paused_instance_still_fetches():
    attempt, server = _fetch_while_paused("org_another")
    assert attempt.gate is None and attempt.result is not None
    assert [scope.org for scope in server.scopes] == [ORG]
