"""Issue 51 item 3: the shard leaders' Lease facts recorded by the leaders in the store
(controlplane/observations/leases.py, k8s/leader.py HeldLease) and the live poll kept cheap
(controlplane/observations/live.py, the live view's 304).

The liveness verdict and the recorder's rounds are plain data with injected clocks; the store
and the poll go through Django's test client over the test database."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controlplane.observations import leases, live
from controlplane.observations.leases import (
    LeaseFacts,
    LeaseRecorder,
    facts_of,
    leader_state,
    record_lease,
)
from controlplane.observations.models import LeaseRecord, TrackedObject
from controlplane.observations.recording import record_run
from k8s.leader import HeldLease, LeaderElector
from workers.engine.outcome import Outcome, Requeue
from workers.engine.reconcile import RunResult
from workers.shards import ShardLayout

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)  # on a CHECKED_REFRESH_SECONDS boundary
LIVE = "/admin/observations/trackedobject/live/"
CANARY_TOKEN = "canary-token-1f0c9e"
CANARY_VALUE = "canary-value-88ad41"


# -- the liveness verdict: pure -----------------------------------------------------------


def test_a_record_vouches_for_its_holder_until_renewal_plus_duration_plus_lag():
    until = T0 + timedelta(seconds=15 + 14)
    assert leader_state("pod-a", T0, 15, 14, T0).live
    assert leader_state("pod-a", T0, 15, 14, until - timedelta(microseconds=1)).live
    dead = leader_state("pod-a", T0, 15, 14, until)
    assert not dead.live and dead.live_until == until
    assert dead.label == "no live leader"


@pytest.mark.parametrize(
    ("holder", "renewed"),
    [("", T0), (None, T0), ("pod-a", None)],
    ids=["released", "no holder", "never renewed"],
)
def test_no_holder_or_no_renewal_is_no_live_leader(holder, renewed):
    state = leader_state(holder, renewed, 15, 14, T0)
    assert not state.live and state.live_until is None


def test_a_renewal_from_a_clock_ahead_still_ages_out():
    """A leader's clock ahead of the reader's keeps its row live longer, never for ever."""
    ahead = T0 + timedelta(seconds=20)
    assert leader_state("pod-a", ahead, 15, 14, T0 + timedelta(seconds=40)).live
    assert not leader_state("pod-a", ahead, 15, 14, T0 + timedelta(seconds=49)).live


def test_no_record_is_no_live_leader():
    assert leases.state_of(None, T0) == leases.LeaderState(False, None)


# -- the elector's snapshot ----------------------------------------------------------------


class FakeLeases:
    """The Lease API of one namespace, in memory."""

    def __init__(self) -> None:
        self.lease: client.V1Lease | None = None

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        if self.lease is None:
            raise ApiException(status=404)
        return self.lease

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease) -> client.V1Lease:
        self.lease = body
        return body

    def replace_namespaced_lease(self, name: str, namespace: str, body: Any) -> Any:
        self.lease = body
        return body


def _elector(api: FakeLeases, stopped: list[bool]) -> LeaderElector:
    elector = LeaderElector(
        client.ApiClient(),
        "hikyo-system",
        "pod-a",
        on_started=lambda: None,
        on_stopped=lambda: stopped.append(True),
        stop=threading.Event(),
    )
    elector.api = api  # type: ignore[assignment]
    return elector


def test_the_elector_keeps_what_it_last_took_or_renewed_and_forgets_it_on_stepping_down():
    api, stopped = FakeLeases(), []
    elector = _elector(api, stopped)
    assert elector.held is None
    assert elector._try_acquire_or_renew()  # created
    created = elector.held
    assert created is not None and created.holder == "pod-a" and created.transitions == 0
    assert created.acquired_at == created.renewed_at and created.duration_seconds == 15
    assert elector._try_acquire_or_renew()  # renewed: the same term, a later renewal
    renewed = elector.held
    assert renewed is not None and renewed.acquired_at == created.acquired_at
    assert renewed.renewed_at >= created.renewed_at and renewed.transitions == 0
    elector.is_leader.set()
    elector._step_down("test")
    assert elector.held is None and stopped == [True]


# -- the recorder's rounds: plain data, injected clock ---------------------------------------


class FakeOperator:
    """The public face of workers.leader.process.OperatorProcess the recorder uses."""

    def __init__(self, layout: ShardLayout) -> None:
        self.layout = layout
        self.elector = SimpleNamespace(held=None)
        self.leading = False
        # What the operator process also holds and a record must never carry.
        self.runtime = SimpleNamespace(token=CANARY_TOKEN, secret_data={"K": CANARY_VALUE})

    def is_leader(self) -> bool:
        return self.leading

    def lead(self, holder: str, renewed: datetime, transitions: int = 0) -> None:
        self.leading = True
        self.elector.held = HeldLease(holder, T0, renewed, 15, transitions)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _recorder(operator: FakeOperator, clock: Clock) -> tuple[LeaseRecorder, list[Any]]:
    written: list[Any] = []
    recorder = LeaseRecorder(
        operator,
        threading.Event(),
        record=lambda facts, now, lag: written.append((facts, now, lag)),
        clock=clock,
        check_every=2.0,
        record_every=10.0,
    )
    return recorder, written


def test_a_standby_records_nothing():
    operator, clock = FakeOperator(ShardLayout(1, 3)), Clock()
    recorder, written = _recorder(operator, clock)
    assert not recorder.round() and written == []
    operator.elector.held = HeldLease("pod-b", T0, T0, 15, 1)  # held, but no longer leading
    assert not recorder.round() and written == []


def test_a_leader_records_its_term_at_once_then_once_per_round():
    operator, clock = FakeOperator(ShardLayout(1, 3)), Clock()
    recorder, written = _recorder(operator, clock)
    operator.lead("pod-a", T0)
    assert recorder.round()
    facts, at, lag = written[-1]
    assert facts == LeaseFacts(ShardLayout(1, 3).lease_name, 1, 3, "pod-a", T0, T0, 15, 0)
    assert at == T0 and lag == 14.0  # a round of 10 s, noticed within 2 s, of a 2-s-old renewal
    for seconds in (2, 4, 6, 8):  # renewals within the round: not written
        clock.now = T0 + timedelta(seconds=seconds)
        operator.lead("pod-a", clock.now)
        assert not recorder.round()
    clock.now = T0 + timedelta(seconds=10)
    operator.lead("pod-a", clock.now)
    assert recorder.round() and written[-1][0].renewed_at == clock.now
    assert len(written) == 2
    clock.now = T0 - timedelta(hours=1)  # the wall clock set back: still written each round
    operator.lead("pod-a", clock.now)
    assert recorder.round() and len(written) == 3


def test_a_new_term_is_recorded_at_once_and_the_same_facts_never_twice():
    operator, clock = FakeOperator(ShardLayout(0, 2)), Clock()
    recorder, written = _recorder(operator, clock)
    operator.lead("pod-a", T0)
    assert recorder.round()
    clock.now = T0 + timedelta(seconds=2)
    operator.lead("pod-a", T0, transitions=1)  # taken again (a new term), within the round
    assert recorder.round() and written[-1][0].transitions == 1
    clock.now = T0 + timedelta(minutes=5)  # due, but the elector renewed nothing since
    assert not recorder.round()
    operator.leading = False
    assert not recorder.round()
    operator.lead("pod-a", T0, transitions=1)  # leading again: written at once
    assert recorder.round() and len(written) == 3


def test_a_failing_store_is_logged_once_and_tried_again(caplog):
    operator, clock = FakeOperator(ShardLayout(0, 2)), Clock()
    calls: list[int] = []

    def broken(facts: LeaseFacts, now: datetime, lag: float) -> None:
        calls.append(1)
        if len(calls) <= 2:
            raise ConnectionError("the store is away")

    recorder = LeaseRecorder(operator, threading.Event(), record=broken, clock=clock)
    operator.lead("pod-a", T0)
    with caplog.at_level(logging.WARNING, logger="controlplane.observations.leases"):
        assert not recorder.round()
        assert not recorder.round()
        assert recorder.round()
    assert len(calls) == 3
    assert [r.getMessage() for r in caplog.records] == [
        f"recording lease {ShardLayout(0, 2).lease_name} failed: ConnectionError"
    ]


# -- the store ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_recorded_facts_hold_names_and_times_only():
    """Canary: the operator process holds a token and a value; the row holds neither."""
    operator, clock = FakeOperator(ShardLayout(2, 3)), Clock()
    operator.lead("hikyo-operator-2-7d9f", T0, transitions=4)
    assert LeaseRecorder(operator, threading.Event(), clock=clock).round()
    row = LeaseRecord.objects.values().get()
    text = repr(row)
    assert CANARY_TOKEN not in text and CANARY_VALUE not in text
    assert row["lease"] == ShardLayout(2, 3).lease_name and row["shard"] == 2
    assert row["holder"] == "hikyo-operator-2-7d9f" and row["transitions"] == 4
    assert row["renewed_at"] == T0 and row["recorded_at"] == T0
    # The next holder replaces the row: one per Lease.
    record_lease(replace(facts_of(operator), holder="hikyo-operator-2-aa01"), T0)
    assert list(LeaseRecord.objects.values_list("holder", flat=True)) == ["hikyo-operator-2-aa01"]


# -- the live poll -----------------------------------------------------------------------------


@pytest.fixture
def viewer() -> Client:
    user = User.objects.create_user("viewer", is_staff=True)
    user.groups.add(Group.objects.get(name="hikyo-viewers"))  # migration 0005's group
    browser = Client()
    browser.force_login(user)
    return browser


def _run(name: str, at: datetime, *, changed: bool) -> None:
    """A recorded run: an unchanged resync (only "last checked" moves) or one that wrote."""
    outcome = Outcome(
        reason="Delivered" if changed else "Current",
        requeue=Requeue.RESYNC,
        lifecycle="Synced",
        wrote_secret=changed,
    )
    ready = [{"type": "Ready", "status": "True", "reason": "Ready", "message": ""}]
    result = RunResult(
        outcome=outcome,
        namespace="payments",
        name=name,
        uid=f"uid-{name}",
        conditions_after=ready,
        status_written=changed,
    )
    record_run(result, at, 0.01)


@pytest.mark.django_db
def test_an_unchanged_poll_is_answered_304_without_a_body(viewer):
    _run("a", T0, changed=True)
    first = viewer.get(LIVE)
    stamp = first.json()["stamp"]
    assert first["ETag"] == f'"{stamp}"'
    unchanged = viewer.get(LIVE, headers={"If-None-Match": f'"{stamp}"'})
    assert unchanged.status_code == 304 and unchanged.content == b""
    _run("a", T0 + timedelta(seconds=5), changed=True)
    moved = viewer.get(LIVE, headers={"If-None-Match": f'"{stamp}"'})
    assert moved.status_code == 200 and moved.json()["stamp"] != stamp
    tracked = TrackedObject.objects.get(name="a")
    one = viewer.get(f"{LIVE}?object={tracked.pk}").json()["stamp"]
    again = viewer.get(f"{LIVE}?object={tracked.pk}", headers={"If-None-Match": f'"{one}"'})
    assert again.status_code == 304


@pytest.mark.django_db
def test_unchanged_runs_move_the_stamp_once_per_refresh_window_and_changes_at_once():
    _run("a", T0, changed=True)
    _run("b", T0, changed=True)
    stamp = live.overall_stamp()
    _run("a", T0 + timedelta(seconds=10), changed=False)  # a steady state's resync
    _run("b", T0 + timedelta(seconds=20), changed=False)
    assert live.overall_stamp() == stamp  # pages need not be fetched again for these
    _run("b", T0 + timedelta(seconds=25), changed=True)  # something to show: at once
    changed = live.overall_stamp()
    assert changed != stamp
    window = timedelta(seconds=live.CHECKED_REFRESH_SECONDS)
    _run("a", T0 + window, changed=False)  # the next window: the "checked" times refresh
    assert live.overall_stamp() != changed


@pytest.mark.django_db
def test_a_deleted_or_forgotten_object_moves_the_stamp():
    _run("a", T0, changed=True)
    _run("b", T0, changed=True)
    stamp = live.overall_stamp()
    TrackedObject.objects.filter(name="a").update(deleted_at=T0 + timedelta(seconds=1))
    deleted = live.overall_stamp()
    assert deleted != stamp
    TrackedObject.objects.filter(name="a").delete()
    assert live.overall_stamp() != deleted


@pytest.mark.django_db
def test_a_leader_that_dies_moves_the_stamp_and_a_renewal_does_not(settings):
    settings.HIKYO_OPERATOR = replace(settings.HIKYO_OPERATOR, shards=2)
    _run("a", T0, changed=True)
    lease = ShardLayout(1, 2).lease_name
    record_lease(LeaseFacts(lease, 1, 2, "pod-a", T0, T0, 15, 0), T0, 14.0)
    at = T0 + timedelta(seconds=5)
    stamp = live.overall_stamp(at)
    record_lease(LeaseFacts(lease, 1, 2, "pod-a", T0, at, 15, 0), at, 14.0)  # renewed
    assert live.overall_stamp(at) == stamp
    assert live.overall_stamp(at + timedelta(seconds=29)) != stamp  # its record ran out
    record_lease(LeaseFacts(lease, 1, 2, "pod-b", at, at, 15, 1), at, 14.0)  # a new holder
    assert live.overall_stamp(at) != stamp


@pytest.mark.django_db
@pytest.mark.parametrize(("shards", "queries"), [(1, 5), (3, 6)])
def test_a_poll_takes_a_fixed_few_queries(viewer, settings, shards, queries):
    """Session, user, the user's and its groups' permissions, the store's stamp (one
    statement), the shards' Leases when sharded: the same at 2 rows as at 20,000
    (bench/dashboard_poll.py measures its time)."""
    settings.HIKYO_OPERATOR = replace(settings.HIKYO_OPERATOR, shards=shards)
    for name in ("a", "b"):
        _run(name, T0, changed=True)
    with CaptureQueriesContext(connection) as captured:
        assert viewer.get(LIVE).status_code == 200
    assert len(captured.captured_queries) == queries, [q["sql"] for q in captured.captured_queries]
