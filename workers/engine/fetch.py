"""R15: take a token for the instance (S4.1.6), then fetch (S3.3) through the server port.

The only step between the two decisions; it stands off without fetching while the instance is
paused for its org by a 429, probed after it stopped answering, or out of tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .fetched import FetchOutcome, Scope
from .observed import UNREAD, Observed
from .pacing import (
    instance_gate,
    note_answer,
    pause_scope,
    requester,
    resumed,
    wait_for_token,
)
from .plan import FetchAttempt, FetchPlan, Gate, Now
from .ports import CoordinationStore
from .settings import OperatorSettings
from .spec import SecretSpec


def requested_for(spec: SecretSpec) -> str:
    """S4.1.9's requester of a CR's requests: its credential (Secret or ServiceAccount, in its
    namespace) in its org."""
    credential = spec.credential_secret or f"sa:{spec.credential_service_account or ''}"
    return requester(spec.org, f"{spec.namespace}/{credential}")


class Clocks(Protocol):
    """A monotonic timer for the fetch's duration, and the wall clock of its answer."""

    def timer(self) -> float: ...
    def wall_seconds(self) -> float: ...


def fetch(
    observed: Observed,
    plan: FetchPlan,
    store: CoordinationStore,
    settings: OperatorSettings,
    now: Now,
    *,
    sleep: Callable[[float], None],
    clocks: Clocks,
) -> FetchAttempt:
    instance_uid = plan.instance_uid
    gate = instance_gate(store, instance_uid, plan.spec.org, now.wall, requested_for(plan.spec))
    if gate.paused > 0:  # a 429 paused every request to this instance for this org
        return FetchAttempt(gate=Gate.PAUSED, wait=gate.paused)
    if gate.resume_in > 0:  # the first request after the pause goes alone (S4.1.6 rev 4)
        return FetchAttempt(gate=Gate.PAUSED, wait=gate.resume_in)
    if gate.probe_in > 0:  # another run probes an instance that stopped answering (S4.1.9)
        probed = Gate.CREDENTIAL_UNANSWERED if gate.requester_only else Gate.UNRESPONSIVE
        return FetchAttempt(gate=probed, wait=gate.probe_in)
    wait = wait_for_token(
        store, instance_uid, settings.fetch_qps, settings.fetch_burst, sleep=sleep
    )
    if wait > 0:
        return FetchAttempt(gate=Gate.NO_TOKEN, wait=wait)
    server = observed.server
    assert server is not None and server is not UNREAD  # R14 passed
    spec = plan.spec
    started = clocks.timer()
    result = server.fetch(
        Scope(spec.org, spec.project, spec.environment),
        token=plan.token,
        projection=spec.projection,
        cursor=plan.cursor,
        acknowledged_keys=spec.acknowledged,
    )
    no_answer = result.outcome is FetchOutcome.FAILED and result.status is None
    note_answer(store, instance_uid, result.detail if no_answer else None, requested_for(spec))
    if gate.resuming and result.status not in (None, 429):  # a 429 re-arms the pause instead
        resumed(store, pause_scope(instance_uid, spec.org))
    return FetchAttempt(
        result=result, seconds=clocks.timer() - started, answered_at=clocks.wall_seconds()
    )
