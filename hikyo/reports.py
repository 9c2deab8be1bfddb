"""The S7.3 status-report wire mapping: the closed request body and what an answer means.

:func:`encode_report` refuses any body whose members, or whose conditions' members, are not
exactly the S7.3 set (``additionalProperties: false`` at both levels; S7.7). S7.5 decides what
each :class:`ReportResult` means for the CR; this module only builds it.
"""

from __future__ import annotations

import json

from workers.engine.fetched import ReportResult

from .transport import Answer, retry_after

__all__ = [
    "REPORT_CONDITION_MEMBERS",
    "REPORT_MEMBERS",
    "encode_report",
    "interpret_report",
    "report_body_limit",
]

REPORT_RETRY_MAX_S = 3600.0  # S7.5: a CR's next report no earlier than min(Retry-After, 1 h)

# S7.3: the closed report body (additionalProperties: false at both levels).
REPORT_MEMBERS = frozenset(
    {
        "cluster_id",
        "namespace",
        "name",
        "uid",
        "target",
        "generation",
        "observed_generation",
        "lifecycle",
        "conditions",
    }
)
REPORT_CONDITION_MEMBERS = frozenset({"type", "status", "reason"})


def encode_report(report: dict) -> bytes:
    """S7.3/S7.7: the closed body only, so nothing else can reach the server."""
    if not isinstance(report, dict) or set(report) != REPORT_MEMBERS:
        raise ValueError("report members must be exactly the S7.3 set")
    conditions = report["conditions"]
    if not isinstance(conditions, list) or not all(
        isinstance(item, dict) and set(item) == REPORT_CONDITION_MEMBERS for item in conditions
    ):
        raise ValueError("report conditions must hold exactly type, status and reason")
    return json.dumps(report, separators=(",", ":"), allow_nan=False).encode("utf-8")


def report_body_limit(_status: int) -> int | None:
    """A report answer's body is never used: the status and Retry-After say it all. (The
    transport drops a small one unread by us, only to keep the connection.)"""
    return None


def interpret_report(answer: Answer) -> ReportResult:
    """S7.3 responses; S7.5 decides what each means."""
    status = answer.status
    if answer.detail:
        return ReportResult(status, answer.detail)
    if status == 204:
        return ReportResult(204, "accepted")
    if status == 429:
        return ReportResult(
            429, "status 429 (rate limited)", retry_after(answer.headers, REPORT_RETRY_MAX_S)
        )
    return ReportResult(status, f"status {status}")
