"""What the dashboard's pages and its live poll cost the server at 20,000 HikyoSecrets (issue 51
item 3). Prints figures against the bounds below, and one JSON object; no assertions.

    python bench/dashboard_poll.py [--objects 20000] [--tabs 5] [--minutes 1]

Seeds a fresh SQLite observation store (a temporary HIKYO_OPERATOR_DATA_DIR) with N
TrackedObjects and their history (bench/dashboard_memory.py's seed) and 3 shard Leases as the
leaders record them, then asks Django's test client in this process (no network, so the
figures are the server's own work):

- a page's server time: the overview and the HikyoSecrets list, the median of 5 after a warm-up;
- the live poll (static/observations/live.js) of ``--tabs`` open tabs (overview and list,
  alternately), each asking every 2 s for ``--minutes``, while the store moves as a steady
  state of unchanged resyncs moves it (N per 5 minutes: the default resync; each run bumps its
  row's last-checked time). A tab that sees the stamp move fetches its page again, as live.js
  does. Time is simulated (the store's clock moves 2 s a round; nothing sleeps), so the figure
  is the server CPU seconds one minute of polling costs, measured with ``time.process_time``
  (SQLite runs in this process, so its queries count too).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

OVERVIEW = "/admin/observations/trackedobject/overview/"
CHANGELIST = "/admin/observations/trackedobject/"
LIVE = "/admin/observations/trackedobject/live/"
POLL_SECONDS = 2.0  # live.POLL_MILLISECONDS
RESYNC_SECONDS = 300.0  # the default resyncInterval: each CR runs once per 5 minutes
SHARDS = 3
# Bounds (stated before measuring): a page within 300 ms, a poll within 20 ms and 6 queries
# (session, user, its and its groups' permissions, the store's stamp, the shards' Leases), and
# 5 tabs within 3 CPU s per minute of the server (5 % of one core).
PAGE_MS = 300.0
POLL_MS = 20.0
POLL_QUERIES = 6
CPU_PER_MINUTE = 3.0


def _setup(directory: Path) -> None:
    os.environ["HIKYO_OPERATOR_DATA_DIR"] = str(directory)
    os.environ["DJANGO_DEBUG"] = "false"
    os.environ.setdefault("BENCH_ADMIN_USER", "bench")
    os.environ.setdefault("BENCH_ADMIN_PASSWORD", "bench-password-not-a-secret")
    import django

    django.setup()
    from dataclasses import replace

    from django.conf import settings
    from django.core.management import call_command

    # The pages render {% static %}; the manifest storage would need collectstatic.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    settings.HIKYO_OPERATOR = replace(settings.HIKYO_OPERATOR, shards=SHARDS)
    call_command("migrate", verbosity=0)


def _record_leases() -> None:
    """The shards' Leases as their leaders record them (controlplane/observations/leases.py);
    a no-op before that module existed."""
    try:
        from controlplane.observations.leases import LeaseFacts, record_lease
    except ImportError:
        return
    from workers.shards import ShardLayout

    now = datetime.now(UTC)
    for shard in range(SHARDS):
        layout = ShardLayout(shard, SHARDS)
        record_lease(
            LeaseFacts(
                lease=layout.lease_name,
                shard=shard,
                shards=SHARDS,
                holder=f"hikyo-operator-{shard}-7d9f",
                acquired_at=now - timedelta(hours=1),
                renewed_at=now,
                duration_seconds=15,
                transitions=shard,
            ),
            now,
        )


def _client() -> Any:
    """A viewer (migration 0005's group), as most people who look are: not a superuser, so
    each request also reads the user's permissions."""
    from django.contrib.auth.models import Group, User
    from django.test import Client

    user = User.objects.create_user("bench-viewer", is_staff=True)
    user.groups.add(Group.objects.get(name="hikyo-viewers"))
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    return client


def _get(client: Any, path: str, **headers: str) -> tuple[Any, float, float, int]:
    """(response, wall ms, CPU ms, queries) of one request."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        wall, cpu = time.perf_counter(), time.process_time()
        response = client.get(path, headers=headers)
        if response.status_code not in (200, 304):
            raise RuntimeError(f"{path} answered {response.status_code}")
        body = response.content  # a streamed or lazy answer is rendered by now
        del body
        elapsed = (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000
    return response, *elapsed, len(queries.captured_queries)


def pages(client: Any) -> dict[str, dict[str, float]]:
    found = {}
    for name, path in (("overview", OVERVIEW), ("list", CHANGELIST)):
        _get(client, path)  # warm-up: templates, the admin's registry
        runs = [_get(client, path) for _ in range(5)]
        found[name] = {
            "ms": round(statistics.median(r[1] for r in runs), 1),
            "queries": runs[-1][3],
        }
    return found


class Tab:
    """One open page as live.js drives it: the stamp it holds, its poll, its page's fetch."""

    def __init__(self, client: Any, page: str) -> None:
        self.client, self.page = client, page
        response = client.get(page)
        self.stamp = response.context_data["live_stamp"]

    def poll(self) -> tuple[float, float, int, float]:
        """(poll wall ms, poll CPU ms, poll queries, re-render CPU ms or 0)."""
        headers = {"If-None-Match": f'"{self.stamp}"'}
        response, wall, cpu, queries = _get(self.client, LIVE, **headers)
        if response.status_code == 304:
            return wall, cpu, queries, 0.0
        stamp = response.json()["stamp"]
        if stamp == self.stamp:
            return wall, cpu, queries, 0.0
        self.stamp = stamp
        _, _, rendered, _ = _get(self.client, self.page)
        return wall, cpu, queries, rendered


def _steady_state(rounds: int, count: int) -> Any:
    """Each round, the rows 2 s of unchanged resyncs touch (N per 5 minutes) get a later
    last-checked time, as the recorder's unchanged runs set it."""
    from controlplane.observations.models import TrackedObject

    ids = list(TrackedObject.objects.order_by("last_checked_at").values_list("id", flat=True))
    per_round = max(1, round(count * POLL_SECONDS / RESYNC_SECONDS))
    started = datetime.now(UTC)

    def advance(round_: int) -> None:
        at = started + timedelta(seconds=POLL_SECONDS * (round_ + 1))
        first = (round_ * per_round) % len(ids)
        chosen = ids[first : first + per_round]
        TrackedObject.objects.filter(id__in=chosen).update(last_checked_at=at)

    return advance, per_round


def poll(client: Any, tabs: int, minutes: float, count: int) -> dict[str, Any]:
    advance, per_round = _steady_state(0, count)
    opened = [Tab(client, OVERVIEW if i % 2 == 0 else CHANGELIST) for i in range(tabs)]
    rounds = round(minutes * 60 / POLL_SECONDS)
    polls_ms, polls_cpu, queries, renders = [], 0.0, [], []
    for round_ in range(rounds):
        advance(round_)  # the operator's writes: not the dashboard's cost
        for tab in opened:
            wall, cpu, asked, rendered = tab.poll()
            polls_ms.append(wall)
            polls_cpu += cpu
            queries.append(asked)
            if rendered:
                renders.append(rendered)
    cpu_seconds = (polls_cpu + sum(renders)) / 1000
    return {
        "tabs": tabs,
        "rows_touched_per_round": per_round,
        "polls": len(polls_ms),
        "poll_ms_median": round(statistics.median(polls_ms), 2),
        "poll_ms_p95": round(sorted(polls_ms)[int(len(polls_ms) * 0.95) - 1], 2),
        "poll_queries_max": max(queries),
        "re_renders": len(renders),
        "cpu_seconds_per_minute": round(cpu_seconds / minutes, 2),
    }


def _verdict(value: float, bound: float) -> str:
    return "within" if value <= bound else "OVER"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=20_000, help="HikyoSecrets (20000)")
    parser.add_argument("--tabs", type=int, default=5, help="open dashboard tabs (5)")
    parser.add_argument("--minutes", type=float, default=1.0, help="of polling, simulated (1)")
    options = parser.parse_args()
    if options.objects < 1 or options.tabs < 1 or options.minutes <= 0:
        parser.error("--objects and --tabs are positive, --minutes above 0")
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-poll-") as directory:
        _setup(Path(directory))
        from bench.dashboard_memory import seed

        print(f"seeding {options.objects} HikyoSecrets ...", file=sys.stderr, flush=True)
        seeded = seed(options.objects)
        _record_leases()
        client = _client()
        found = {"seeded": seeded, "pages": pages(client)}
        found["poll"] = poll(client, options.tabs, options.minutes, options.objects)
    print(f"{options.objects} HikyoSecrets, SQLite, Django's test client in-process")
    for name, page in found["pages"].items():
        verdict = _verdict(page["ms"], PAGE_MS)
        bound = f"≤ {PAGE_MS:.0f} ms: {verdict}"
        print(f"  {name:9} {page['ms']:7.1f} ms, {page['queries']} queries ({bound})")
    polled = found["poll"]
    print(
        f"  poll      {polled['poll_ms_median']:7.2f} ms median, "
        f"{polled['poll_ms_p95']:.2f} ms p95, "
        f"{polled['poll_queries_max']} queries (≤ {POLL_MS:.0f} ms: "
        f"{_verdict(polled['poll_ms_p95'], POLL_MS)}; ≤ {POLL_QUERIES} queries: "
        f"{_verdict(polled['poll_queries_max'], POLL_QUERIES)})"
    )
    print(
        f"  {polled['tabs']} tabs   {polled['cpu_seconds_per_minute']:7.2f} CPU s per minute, "
        f"{polled['re_renders']} re-renders of {polled['polls']} polls "
        f"(≤ {CPU_PER_MINUTE:.0f} s: {_verdict(polled['cpu_seconds_per_minute'], CPU_PER_MINUTE)})"
    )
    print(json.dumps(found))


if __name__ == "__main__":
    main()
