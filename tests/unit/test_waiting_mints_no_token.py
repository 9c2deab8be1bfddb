"""S4.1.6 rev 4: a CR that waits for a 429 pause of its (instance, org) writes nothing and
requests no ServiceAccount token: R6's TokenRequest is skipped while the pause lasts, and the
run stops there as a wait, not a failure."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.unit.decide_fixtures import (
    INSTANCE_UID,
    NOW,
    SETTINGS,
    TOKEN,
    decide,
    instance,
    observed,
    only_cr,
    sa_cr,
    service_account,
)
from workers.engine.observe import _Reader
from workers.engine.observed import Observed
from workers.engine.outcome import Requeue
from workers.engine.pacing import MAX_PAUSE, pause_instance, pause_scope
from workers.engine.plan import Read, Stop
from workers.engine.spec import parse_spec
from workers.queue.memory import MemoryQueue


class TokenCountingCluster:
    def __init__(self) -> None:
        self.requested = 0

    def request_token(self, namespace: str, account: str, audience: str, seconds: int) -> str:
        self.requested += 1
        return TOKEN


def _reader(store: MemoryQueue, cluster: TokenCountingCluster) -> _Reader:
    return _Reader(cluster, store, SETTINGS, lambda i: None, wall=NOW.wall)  # type: ignore[arg-type]


def _at_r6() -> Observed:
    return replace(only_cr(sa_cr()), instance=instance(), service_account=service_account())


def _org() -> str:
    return parse_spec(sa_cr()).org


def test_while_the_org_is_paused_no_token_is_minted_and_the_run_waits():
    store, cluster = MemoryQueue(clock=lambda: NOW.wall), TokenCountingCluster()
    pause_instance(store, pause_scope(INSTANCE_UID, _org()), 20.0, NOW.wall)
    read = _reader(store, cluster).read(_at_r6(), Read.TOKEN)
    assert cluster.requested == 0 and read.token is None
    assert read.token_deferred == pytest.approx(20.0)
    decision = decide(replace(observed(sa_cr()), token=None, token_deferred=20.0))
    assert isinstance(decision, Stop)
    outcome = decision.plan.outcome
    assert outcome.reason == "InstancePaused" and not outcome.write_status
    assert outcome.conditions == {} and outcome.events == [] and outcome.status == {}
    assert outcome.requeue is Requeue.AFTER  # not a failure: no backoff step
    assert 20.0 <= outcome.delay <= 20.0 + 1.0  # at the pause's end, in due order
    assert outcome.delay < MAX_PAUSE


@pytest.mark.parametrize("org", ["another-org", None])
def test_without_a_pause_of_its_own_org_the_token_is_minted(org: Any):
    store, cluster = MemoryQueue(clock=lambda: NOW.wall), TokenCountingCluster()
    if org:
        pause_instance(store, pause_scope(INSTANCE_UID, org), 20.0, NOW.wall)
    read = _reader(store, cluster).read(_at_r6(), Read.TOKEN)
    assert cluster.requested == 1 and read.token == TOKEN and read.token_deferred == 0
