"""A status report waiting for its instance's pace reads nothing while it waits (issue 13;
S4.1.6 shares the instance's token bucket between fetches and reports, S7.4). Its first
attempt reads the CR and the instance as always; the retries during the wait ask only the
store; once a token is there it reads both again and goes on (here: to the credential)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from tests.support.counting_store import NoteReadCountingQueue
from tests.unit.decide_fixtures import INSTANCE_UID, SETTINGS, cr, instance
from workers.engine.fetched import ReportResult
from workers.engine.reports import heartbeat_period, heartbeat_slack
from workers.engine.spec import parse_spec
from workers.keys import ObjectKey
from workers.queue.base import Priority
from workers.queue.memory import MemoryQueue
from workers.reporting import CLUSTER_ID_NOTE, _attempt, run_report
from workers.runtime import Runtime

STATUS = {
    "lifecycle": "Synced",
    "observedGeneration": 1,
    "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled", "message": ""}],
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingCluster:
    """The reads a report makes, counted; the credential Secret is missing (S2.4 refusal)."""

    def __init__(self, the_cr: dict[str, Any], the_instance: dict[str, Any]) -> None:
        self.cr, self.instance = the_cr, the_instance
        self.reads: Counter[str] = Counter()

    def get_hikyosecret(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads["hikyosecret"] += 1
        return self.cr

    def get_instance(self, name: str) -> dict[str, Any] | None:
        self.reads["instance"] += 1
        return self.instance

    def get_secret(self, namespace: str, name: str) -> None:
        self.reads["secret"] += 1
        return None


def _runtime(cluster: CountingCluster, clock: Clock) -> Runtime:
    queue = MemoryQueue(clock=clock)
    queue.put_note(CLUSTER_ID_NOTE, "2f0c4bd6-0b7e-4d7e-9f55-3a1b1c7e9d10", 24 * 3600.0)
    queue.put_note(f"capabilities:{INSTANCE_UID}", "status-report", 24 * 3600.0)
    settings = replace(SETTINGS, fetch_qps=1.0, fetch_burst=1)
    return Runtime(settings=settings, cluster=cluster, queue=queue)  # type: ignore[arg-type]


def _counting_runtime(cluster: CountingCluster) -> tuple[Runtime, NoteReadCountingQueue]:
    """``_runtime`` on a store that counts its note reads (round trips), with the same notes."""
    clock = Clock()
    runtime = _runtime(cluster, clock)
    queue = NoteReadCountingQueue(clock)
    for name in (CLUSTER_ID_NOTE, f"capabilities:{INSTANCE_UID}"):
        queue.put_note(name, runtime.queue.get_note(name) or "", 24 * 3600.0)
    return replace(runtime, queue=queue), queue


def test_retries_during_a_token_wait_read_neither_the_cr_nor_the_instance():
    the_cr = cr(status=STATUS)
    cluster = CountingCluster(the_cr, instance())
    clock = Clock()
    runtime = _runtime(cluster, clock)
    key = ObjectKey(the_cr["metadata"]["namespace"], the_cr["metadata"]["name"], "uid-m")
    assert runtime.queue.take_token(f"instance:{INSTANCE_UID}", 1.0, 1) == 0  # a fetch took it

    attempt, wait = _attempt(runtime, key)
    assert attempt is None and wait is not None and 0 < wait <= 1.0
    assert cluster.reads == {"hikyosecret": 1, "instance": 1}

    for _ in range(3):  # retries, each still inside the wait
        clock.now += 0.2
        attempt, wait = _attempt(runtime, key)
        assert attempt is None and wait is not None and wait > 0
    assert cluster.reads == {"hikyosecret": 1, "instance": 1}  # nothing read again

    clock.now += 1.0  # a token is there
    attempt, wait = _attempt(runtime, key)
    assert cluster.reads == {"hikyosecret": 2, "instance": 2, "secret": 1}
    assert attempt is None and wait is not None and wait > 1.0  # refused credential: the period
    # The token this report took is its own: no second one was taken for it.
    assert runtime.queue.take_token(f"instance:{INSTANCE_UID}", 1.0, 1) > 0


def test_a_report_paused_by_s7_5_is_not_paced_but_paused():
    """The S7.5 pause is checked before the pace, as on the first attempt."""
    the_cr = cr(status=STATUS)
    cluster = CountingCluster(the_cr, instance())
    clock = Clock()
    runtime = _runtime(cluster, clock)
    key = ObjectKey(the_cr["metadata"]["namespace"], the_cr["metadata"]["name"], "uid-m")
    runtime.queue.take_token(f"instance:{INSTANCE_UID}", 1.0, 1)
    _attempt(runtime, key)  # waits, and notes the instance
    runtime.queue.put_note("reports-paused:uid-m", "1", 3600.0)
    clock.now += 1.0  # a token is there again
    attempt, wait = _attempt(runtime, key)
    assert attempt is None and wait is not None and wait > 1.0  # the heartbeat period
    assert cluster.reads["hikyosecret"] == 2  # read, as the pause path always did
    assert runtime.queue.take_token(f"instance:{INSTANCE_UID}", 1.0, 1) == 0  # not taken


def test_an_attempt_reads_its_notes_in_two_round_trips():
    """Issue 13: the waiting mark, the S7.5 pause and the cluster id together, then the
    instance's capabilities, pause and unresponsive mark together (7 reads before)."""
    the_cr = cr(status=STATUS)
    cluster = CountingCluster(the_cr, instance())
    runtime, queue = _counting_runtime(cluster)
    key = ObjectKey(the_cr["metadata"]["namespace"], the_cr["metadata"]["name"], "uid-m")
    attempt, wait = _attempt(runtime, key)
    assert cluster.reads == {"hikyosecret": 1, "instance": 1, "secret": 1}  # went on
    assert attempt is None and wait is not None and wait > 1.0  # refused credential: the period
    assert queue.note_reads == 2


def test_a_second_copy_of_a_report_message_reads_nothing():
    """S8.4: the stale check sent a report message again; the copy that comes after the first
    sent its report finds the key settled and reads nothing (issue 13: at 5,000 CRs a scaled
    cold start kept report messages in the broker past the check)."""
    the_cr = cr(status=STATUS)
    cluster = CountingCluster(the_cr, instance())
    runtime = _runtime(cluster, Clock())
    key = ObjectKey(the_cr["metadata"]["namespace"], the_cr["metadata"]["name"], "uid-m")
    runtime.reports.add(key)
    assert runtime.reports.take_due()
    run_report(runtime, key, dispatched_only=True)
    assert cluster.reads["hikyosecret"] == 1
    run_report(runtime, key, dispatched_only=True)  # the later copy
    assert cluster.reads["hikyosecret"] == 1
    assert runtime.reports.take_due() == []  # nothing marked


def test_a_handed_report_stands_for_the_waiting_heartbeat():
    """S7.4 with S7.1 rev 3: a report a reconcile hands over (embedded, with its reads) goes
    in place of the CR's heartbeat due in 5 s; its finish sets the next one a period later.
    Before, the earlier due time won the merge and that heartbeat went alone 5 s later,
    reading the CR and its credential again: two reports per period, not one."""
    the_cr = cr(status=STATUS)
    cluster = CountingCluster(the_cr, instance())
    runtime = _runtime(cluster, Clock())
    key = ObjectKey(the_cr["metadata"]["namespace"], the_cr["metadata"]["name"], "uid-m")
    runtime.reports.schedule(key, delay=5.0, priority=Priority.NORMAL)
    run_report(runtime, key, handed=True)
    assert cluster.reads["hikyosecret"] == 1
    assert runtime.reports.due_in(key) == pytest.approx(heartbeat_period(300.0), abs=1.0)


class AcceptingClient:
    """The instance's client: every report gets 204, and the tokens it was sent are kept."""

    def __init__(self) -> None:
        self.tokens: list[str] = []

    def report_status(self, scope: Any, *, token: str, report: dict) -> ReportResult:
        self.tokens.append(token)
        return ReportResult(204, "accepted")


def test_a_report_on_its_reconciles_reads_reads_its_notes_in_one_round_trip():
    """Issue 37: a heartbeat that rides on its reconcile (S7.1 rev 3) knows the instance that
    reconcile used, so the instance's notes come with the CR's and the cluster's, and nothing
    is read from the cluster: not the CR, the instance or the credential. The one read after
    the answer is S4.1.6's unresponsive mark."""
    the_cr = cr(status=STATUS)
    cluster = CountingCluster(the_cr, instance())
    runtime, queue = _counting_runtime(cluster)
    client = AcceptingClient()
    runtime = replace(runtime, clients=lambda _instance: client)
    key = ObjectKey(the_cr["metadata"]["namespace"], the_cr["metadata"]["name"], "uid-m")
    org = parse_spec(the_cr).org
    runtime.recent_reads.keep(key.uid, the_cr, "CANARY-kept-token", instance(), org)

    attempt, next_in = _attempt(runtime, key)

    assert attempt is not None and attempt.http_status == 204
    # S7.4 rev 4: alone only a resync after it is due, if no run carried it before
    assert next_in == pytest.approx(heartbeat_period(300.0) + heartbeat_slack(300.0))
    assert client.tokens == ["CANARY-kept-token"]
    assert cluster.reads == {}
    assert queue.note_reads == 2  # the notes together, then the unresponsive mark
