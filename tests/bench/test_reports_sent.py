"""bench/scenarios.py: the cold start's "reports all sent" end counts only accepted reports."""

from __future__ import annotations

import time
from types import SimpleNamespace

from bench import scenarios

STATUS = "/api/v1/orgs/o/projects/p/environments/e/delivery/status"
DELIVERY = "/api/v1/orgs/o/projects/p/environments/e/delivery"


def request(method: str, path: str, status: int) -> SimpleNamespace:
    return SimpleNamespace(method=method, path=path, status=status)


def test_only_accepted_reports_after_the_mark_count():
    hikyo = SimpleNamespace(
        requests=[
            request("POST", STATUS, 204),  # before the mark
            request("GET", DELIVERY, 200),
            request("POST", STATUS, 204),
            request("POST", STATUS, 429),
            request("POST", STATUS, 204),
        ]
    )
    assert scenarios.reports_answered(hikyo, 1) == 2


def test_waiting_ends_when_every_report_is_in_or_at_the_deadline():
    hikyo = SimpleNamespace(requests=[request("POST", STATUS, 204)] * 3)
    assert scenarios.wait_reports_sent(hikyo, 0, 3, time.monotonic() + 60) is not None
    assert scenarios.wait_reports_sent(hikyo, 0, 4, time.monotonic() - 1) is None
