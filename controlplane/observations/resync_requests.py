"""Forced resync requests: one service for ``manage.py resync`` and the dashboard's action.

A request is the ``hikyo.dev/force-sync`` annotation on each HikyoSecret, set to one new value
(``workers/engine/force_sync.py``); ``kubectl annotate`` makes the same request. The leader's
watch runs each CR once with first-sync priority and records the value it handled in
``status.lastForcedSync``. This module owns the value, which CRs a selection names, the
annotation (guarded by each CR's UID) and the wait for outcomes; callers print or show what it
returns. It never reads a value, token or cursor, so nothing it returns holds one.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

from urllib3.exceptions import HTTPError

from k8s.errors import KubeError, NotFound, describe
from workers.engine.conditions import UNRECONCILED
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION
from workers.engine.settings import OperatorSettings, shown
from workers.keys import ObjectKey

DEFAULT_WAIT_SECONDS = 120.0
POLL_FIRST_SECONDS = 0.5  # the first re-read; then x1.5 per round up to POLL_MAX_SECONDS
POLL_MAX_SECONDS = 2.0


class ResyncRefused(Exception):
    """A request that cannot be made as asked (nothing matched, a name not found): one line."""


class Target(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...


class ResyncCluster(Protocol):
    """The calls a request makes (k8s.gateway.KubeCluster)."""

    def get_hikyosecret(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def select_hikyosecrets(
        self, namespace: str | None = None, label_selector: str = ""
    ) -> list[dict[str, Any]]: ...
    def annotate_hikyosecret(
        self, namespace: str, name: str, annotations: dict[str, str | None], *, uid: str = ""
    ) -> None: ...


T = TypeVar("T", bound=Target)


@dataclass(frozen=True)
class Requested(Generic[T]):
    """What one request did: its value, the CRs annotated, and those not (with why)."""

    value: str
    asked: list[T] = field(default_factory=list)
    failed: list[tuple[T, str]] = field(default_factory=list)
    skipped: list[tuple[T, str]] = field(default_factory=list)
    error: str = ""  # no cluster at all: nothing was asked


@dataclass(frozen=True)
class Waited:
    """The end of a wait: each line to show, and the CRs that did not handle the value."""

    lines: list[str]
    unhandled: int
    trouble: str = ""  # the last read error, when CRs were still pending


def new_request_value(now: datetime | None = None) -> str:
    """A value no earlier request used: the UTC time plus a short random part."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"resync-{stamp}-{secrets.token_hex(3)}"


def outcome_line(asked: Target, cr: dict[str, Any]) -> str:
    status = cr.get("status") or {}
    record = status.get("lastForcedSync") or {}
    return (
        f"{asked.namespace}/{asked.name}: {record.get('reason') or '(no reason)'} "
        f"lifecycle={status.get('lifecycle') or UNRECONCILED} "
        f"fetched={'yes' if record.get('fetched') else 'no'} "
        f"wrote={'yes' if record.get('wroteSecret') else 'no'}"
    )


def resolve(cluster: ResyncCluster, wanted: Sequence[tuple[str, str]]) -> list[ObjectKey]:
    """Named CRs must all exist: nothing is asked when one does not."""
    found: list[ObjectKey] = []
    missing: list[str] = []
    for namespace, name in wanted:
        cr = cluster.get_hikyosecret(namespace, name)
        if cr is None:
            missing.append(f"{namespace}/{name}")
        else:
            found.append(ObjectKey(namespace, name, cr["metadata"]["uid"]))
    if missing:
        raise ResyncRefused(f"HikyoSecret not found: {', '.join(missing)}")
    return found


def select(
    cluster: ResyncCluster, namespace: str | None, selector: str, instance: str
) -> list[ObjectKey]:
    """The CRs in ``namespace`` (None: every one) matching a label selector and an instance."""
    try:
        items = cluster.select_hikyosecrets(namespace, selector)
    except KubeError as error:
        if error.status == 400 and selector:
            raise ResyncRefused(
                f"invalid label selector {shown(selector)}: the apiserver refused it "
                f"(HTTP 400{' ' + error.reason if error.reason else ''})"
            ) from None
        raise
    asked = sorted(
        (
            ObjectKey(
                item["metadata"]["namespace"], item["metadata"]["name"], item["metadata"]["uid"]
            )
            for item in items
            if not instance
            or ((item.get("spec") or {}).get("instanceRef") or {}).get("name") == instance
        ),
        key=lambda a: (a.namespace, a.name),
    )
    if not asked:
        where = f"in namespace {namespace}" if namespace else "in any namespace"
        narrowed = "".join(
            [
                f" with labels {shown(selector)}" if selector else "",
                f" naming instance {shown(instance)}" if instance else "",
            ]
        )
        raise ResyncRefused(f"no HikyoSecret matched {where}{narrowed}")
    return asked


def in_reach(
    targets: Iterable[T], operator: OperatorSettings
) -> tuple[list[T], list[tuple[T, str]]]:
    """The operator never reconciles CRs in its own namespace (S8.5) or outside its watch list
    (S8.1): asking them would wait for ever, so they are skipped, each with why."""
    kept: list[T] = []
    skipped: list[tuple[T, str]] = []
    for target in targets:
        if operator.operator_namespace and target.namespace == operator.operator_namespace:
            skipped.append((target, "the operator ignores HikyoSecrets in its own namespace"))
        elif operator.namespaces and target.namespace not in operator.namespaces:
            skipped.append(
                (target, f"namespace {target.namespace} is not in HIKYO_OPERATOR_NAMESPACES")
            )
        else:
            kept.append(target)
    return kept, skipped


def request_resync(
    cluster: ResyncCluster,
    targets: Iterable[T],
    value: str | None = None,
    skipped: Sequence[tuple[T, str]] = (),
) -> Requested[T]:
    """Sets ``hikyo.dev/force-sync=<value>`` on each target, guarded by its UID so a name now
    held by another object is refused. A CR that cannot be annotated is a failure with its
    reason (no body, no value); only a missing cluster ends the request early (the caller's)."""
    value = value or new_request_value()
    asked: list[T] = []
    failed: list[tuple[T, str]] = []
    for target in targets:
        try:
            cluster.annotate_hikyosecret(
                target.namespace, target.name, {FORCE_SYNC_ANNOTATION: value}, uid=target.uid
            )
        except NotFound:
            failed.append((target, "it was deleted meanwhile"))
        except KubeError as error:
            if error.status in (409, 422):  # the uid precondition: recreated meanwhile
                failed.append((target, "it was replaced meanwhile"))
            else:
                failed.append((target, describe(error)))
        except Exception as error:  # transport (urllib3, OSError): its type only
            failed.append((target, type(error).__name__))
        else:
            asked.append(target)
    return Requested(value, asked, failed, list(skipped))


def wait_for_outcomes(
    cluster: ResyncCluster,
    asked: Sequence[Target],
    value: str,
    seconds: float,
    report: Callable[[str], None],
    held_back: Callable[[Target], str | None] = lambda target: None,
) -> Waited:
    """Uncached GETs of the CRs not handled yet, a few per second at most, until each records
    ``value`` in ``status.lastForcedSync`` or ``seconds`` have passed. Each outcome is
    reported as it comes (``report``), so a long wait shows progress; a CR still waiting
    because something holds its fetch back (``held_back``: a 429 pause, say) is told once."""
    deadline = time.monotonic() + seconds
    pending = list(asked)
    gone = 0
    interval = POLL_FIRST_SECONDS
    trouble = ""
    lines: list[str] = []
    told: set[Target] = set()

    def say(line: str) -> None:
        lines.append(line)
        report(line)

    while pending:
        still: list[Target] = []
        for item in pending:
            try:
                cr = cluster.get_hikyosecret(item.namespace, item.name)
            except (KubeError, HTTPError, OSError) as error:  # a blip: ask again next round
                trouble = describe(error)
                still.append(item)
                continue
            if cr is None or cr["metadata"].get("uid") != item.uid:
                say(f"{item.namespace}/{item.name}: deleted before it handled the request")
                gone += 1
            elif ((cr.get("status") or {}).get("lastForcedSync") or {}).get("value") == value:
                say(outcome_line(item, cr))
            else:
                still.append(item)
                why = None if item in told else held_back(item)
                if why:
                    told.add(item)
                    say(f"{item.namespace}/{item.name}: {why}")
        pending = still
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(min(interval, max(deadline - time.monotonic(), 0.0)))
        interval = min(interval * 1.5, POLL_MAX_SECONDS)
    for item in pending:
        say(f"{item.namespace}/{item.name}: not handled within {seconds:g} s")
    return Waited(lines, len(pending) + gone, trouble if pending else "")
