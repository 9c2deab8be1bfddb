"""Outcomes more than one phase decides: a Secret that is not this CR's (R8, and S4.8.3 when it
changes hands between the read and the write), a 403 (S4.15, on a read or a write), and a
release that failed before deletion (R1, S4.14.3)."""

from __future__ import annotations

from dataclasses import replace

from .conditions import CONFLICT, UNRECONCILED, Condition
from .facts import Cause
from .observed import ForbiddenRead
from .outcome import Event, Outcome, Requeue, failure, refusal, stop_quietly


def not_owned(target_name: str) -> Outcome:
    return refusal(
        Condition(
            CONFLICT,
            "True",
            "ManagedSecretNotOwned",
            f"Secret {target_name} exists and is not managed by this HikyoSecret; the operator "
            "never adopts a Secret: delete or rename it, or choose another target.name",
        )
    )


def release_failed(target_name: str, error: str, *, merged_keys: bool = False) -> Outcome:
    """R1: the Secret's part of a deletion failed (S4.14.3 release, S11.4 removal of keys)."""
    what = (
        f"remove this HikyoSecret's keys from Secret {target_name}"
        if merged_keys
        else f"release Secret {target_name}"
    )
    return replace(failure(f"cannot {what} before deletion: {error}"), write_status=False)


def forbidden_outcome(forbidden: ForbiddenRead, namespace: str) -> Outcome:
    """S4.15: a 403 from any Kubernetes call made for the CR (not the TokenRequest, S2.4)."""
    if forbidden.namespace_terminating:
        return stop_quietly("NamespaceTerminating")
    if forbidden.allowed:
        return failure(
            f"forbidden by admission or quota: {forbidden.resource} {forbidden.verb}",
            cause=Cause.ADMISSION,
            clear_cursor=True,
        )
    message = (
        f"the operator may not {forbidden.verb} {forbidden.resource} in namespace {namespace}: "
        "bind the operator to this namespace (Helm operator.namespaces)"
    )
    return Outcome(
        reason="NamespaceNotBound",
        message=message,
        requeue=Requeue.BACKOFF,
        lifecycle="Unreconciled",
        conditions={
            UNRECONCILED: Condition(
                UNRECONCILED,
                "True",
                "NamespaceNotBound",
                message,
                {"verb": forbidden.verb, "resource": forbidden.resource},
            )
        },
        events=[Event("Warning", "NamespaceNotBound", message)],
    ).clearing_cursor()
