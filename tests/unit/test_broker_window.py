"""Scaled mode's broker window (workers/broker_window.py): the leader hands out only the live
workers' slots plus a spare round, so a first sync due later is not queued in the broker behind
resyncs sent earlier (S4.1.6); workers advertise their slots for a TTL and withdraw at stop."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.support.waiting import wait_for
from workers.broker_window import SPARE_MIN, SlotAdvertiser, WorkerSlots, window
from workers.keys import ObjectKey
from workers.queue.memory import MemoryQueue


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_window_is_every_slot_busy_plus_a_spare_round():
    assert window(0) == SPARE_MIN  # no worker advertised (an older release): still served
    assert window(4) == 4 + SPARE_MIN
    assert window(100) == 200  # many slots: a spare message per slot


def test_free_counts_what_is_handed_out_and_reads_slots_at_most_every_few_seconds():
    clock = Clock()
    store, reports = MemoryQueue(clock), MemoryQueue(clock)
    slots = WorkerSlots(store, read_every=5.0, clock=clock)
    store.advertise_slots("celery@a", 4, ttl=30)
    for n in range(10):
        store.add(ObjectKey("ns", f"cr-{n}", f"uid-{n}"))
    store.take_due(limit=3)
    assert slots.free(store) == window(4) - 3
    assert slots.free(reports) == window(4)  # each queue's own handed-out keys
    store.advertise_slots("celery@b", 8, ttl=30)
    clock.now += 4.0
    assert slots.slots() == 4  # read less than 5 s ago
    clock.now += 1.0
    assert slots.slots() == 12


def test_the_leader_says_when_the_workers_change_and_warns_when_none_advertise(caplog):
    clock = Clock()
    store = MemoryQueue(clock)
    slots = WorkerSlots(store, read_every=0.0, clock=clock)
    with caplog.at_level(logging.INFO, logger="workers.broker_window"):
        assert slots.slots() == 0
        assert slots.slots() == 0  # said once, not every round
        store.advertise_slots("celery@a", 2, ttl=30)
        assert slots.slots() == 2
        clock.now += 31.0  # it stopped advertising: gone
        assert slots.slots() == 0
    said = [(record.levelno, record.getMessage()) for record in caplog.records]
    assert [level for level, _ in said] == [logging.WARNING, logging.INFO, logging.WARNING]
    assert "no Celery worker has advertised" in said[0][1]
    assert f"1 Celery workers run 2 tasks at once: up to {window(2)} keys" in said[1][1]


class FlakyStore(MemoryQueue):
    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.withdrawals = 0

    def advertise_slots(self, worker: str, slots: int, ttl: float) -> None:
        if self.down:
            raise ConnectionError("redis://:canary-password@redis:6379 refused")
        super().advertise_slots(worker, slots, ttl)

    def withdraw_slots(self, worker: str) -> None:
        self.withdrawals += 1
        if self.down:
            raise ConnectionError("redis://:canary-password@redis:6379 refused")
        super().withdraw_slots(worker)


def test_a_worker_advertises_until_it_stops_and_an_outage_is_said_once(caplog):
    store = FlakyStore()
    advertiser = SlotAdvertiser(store, "celery@a", 4, every=3600.0)
    with caplog.at_level(logging.INFO, logger="workers.broker_window"):
        advertiser.advertise_once()
        assert store.live_slots() == (1, 4) and advertiser.advertised == 1
        store.down = True
        advertiser.advertise_once()
        advertiser.advertise_once()
        assert advertiser.advertised == 1
        store.down = False
        advertiser.advertise_once()
        assert advertiser.advertised == 2
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        "cannot advertise this worker's slots (ConnectionError); retrying",
        "advertising this worker's slots again",
    ]  # the error's text (it may hold the Redis URL's password) is never logged
    advertiser.start()
    advertiser.stop()
    assert not advertiser.is_alive()
    assert store.live_slots() == (0, 0)


@pytest.mark.parametrize("down", [False, True])
def test_stop_withdraws_or_leaves_the_advertisement_to_expire(down: bool, caplog: Any):
    store = FlakyStore()
    advertiser = SlotAdvertiser(store, "celery@a", 2, every=3600.0)
    advertiser.advertise_once()
    store.down = down
    advertiser.stop()  # never started: stop still withdraws
    store.down = False
    assert store.live_slots() == ((1, 2) if down else (0, 0))
    assert ("cannot withdraw" in caplog.text) is down
    assert "canary-password" not in caplog.text


def test_a_stopping_worker_has_no_slots_but_lives_until_its_pool_has_stopped(monkeypatch, caplog):
    """SIGTERM starts a warm shutdown (celery's worker_shutting_down): the worker takes no new
    task from then on, so its slots leave the leader's window at once; it still says it lives,
    so the leader does not hand out the keys its last tasks hold (issue 33 item 6). The
    shutdown's end (worker_shutdown, the pool stopped) withdraws it, never to count as gone."""
    from celery.signals import worker_shutdown, worker_shutting_down

    from workers import celery_app

    store = FlakyStore()
    advertiser = SlotAdvertiser(store, "celery@a", 2, every=3600.0)
    advertiser.start()
    monkeypatch.setattr(celery_app, "_slot_advertiser", advertiser)
    with caplog.at_level(logging.INFO, logger="workers.broker_window"):
        wait_for(lambda: advertiser.advertised == 1, timeout=10, interval=0.01, what="a round")
        assert store.live_slots() == (1, 2)
        worker_shutting_down.send(sender="celery@a", sig="SIGTERM", how="Warm", exitcode=0)
        assert store.live_slots() == (1, 0)
        assert advertiser.is_alive() and store.withdrawals == 0
        worker_shutdown.send(sender=None)
        worker_shutdown.send(sender=None)  # once is enough
    assert not advertiser.is_alive()
    assert store.live_slots() == (0, 0) and store.workers_gone() == frozenset()
    assert store.withdrawals == 1
    assert "this worker's slots withdrawn" in caplog.text


def test_shard_leaders_share_the_window_of_the_workers_they_share():
    """S4.1.8: every shard leader hands out its part, so the broker holds one window in all."""
    assert window(4, shares=3) == -(-(4 + SPARE_MIN) // 3)
    assert sum(window(100, shares=3) for _ in range(3)) - window(100) < 3  # rounding only
    clock = Clock()
    store = MemoryQueue(clock)
    store.advertise_slots("celery@a", 8, ttl=30)
    slots = WorkerSlots(store, read_every=5.0, clock=clock, shares=2)
    assert slots.window() == window(8) // 2
    assert slots.free(store) == window(8) // 2
