"""``manage.py resync``: ask the operator for one forced full (cursor-less) reconcile.

The request is the ``hikyo.dev/force-sync`` annotation on each HikyoSecret, set to a new value
(``workers/engine/force_sync.py``); ``kubectl annotate`` and this command are the same request.
The leader's watch sees the new value and runs the CR once with first-sync priority; the run
records the value it handled in ``status.lastForcedSync``, so each value runs once, across
restarts and failovers, in embedded and scaled mode alike. The command needs no operator
setting and takes no lock: it only annotates and, with ``--wait``, reads status back.

Selection, as kubectl's: ``NAMESPACE/NAME`` arguments (or ``NAME`` with ``-n``); or ``--all``
(every namespace, or the ``-n`` namespace); ``-l SELECTOR`` and ``--instance NAME`` narrow a
selection within ``-n NAMESPACE`` or, with ``--all``, every namespace. Names and a selection do
not mix. The command never reads a value, token or cursor, so it never prints one.
"""

from __future__ import annotations

import logging
import secrets
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from k8s.client import ClusterUnavailable
from k8s.errors import KubeError, NotFound
from k8s.gateway import KubeCluster, configured_cluster
from workers.engine.conditions import UNRECONCILED
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION
from workers.engine.settings import shown

DEFAULT_WAIT_SECONDS = 120.0
POLL_FIRST_SECONDS = 0.5  # the first re-read; then x1.5 per round up to POLL_MAX_SECONDS
POLL_MAX_SECONDS = 2.0


@dataclass(frozen=True)
class Asked:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def new_request_value(now: datetime | None = None) -> str:
    """A value no earlier request used: the UTC time plus a short random part."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"resync-{stamp}-{secrets.token_hex(3)}"


def outcome_line(asked: Asked, cr: dict[str, Any]) -> str:
    status = cr.get("status") or {}
    record = status.get("lastForcedSync") or {}
    return (
        f"{asked}: {record.get('reason') or '(no reason)'} "
        f"lifecycle={status.get('lifecycle') or UNRECONCILED} "
        f"fetched={'yes' if record.get('fetched') else 'no'} "
        f"wrote={'yes' if record.get('wroteSecret') else 'no'}"
    )


class Command(BaseCommand):
    help = (
        "Ask for one forced full (cursor-less) reconcile of HikyoSecrets by setting their "
        f"{FORCE_SYNC_ANNOTATION} annotation to a new value; --wait waits for the outcomes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "targets",
            nargs="*",
            metavar="NAMESPACE/NAME",
            help="HikyoSecrets to resync (NAME alone with -n)",
        )
        parser.add_argument("-n", "--namespace", default="", help="the namespace to work in")
        parser.add_argument(
            "--all",
            action="store_true",
            dest="all_objects",
            help="every HikyoSecret: in every namespace, or in the -n namespace",
        )
        parser.add_argument(
            "-l", "--selector", default="", help="label selector (e.g. team=payments)"
        )
        parser.add_argument(
            "--instance", default="", help="only HikyoSecrets whose spec.instanceRef.name is this"
        )
        parser.add_argument(
            "--wait",
            nargs="?",
            const="",
            default=None,
            metavar="SECONDS",
            help=f"wait until each has handled the request (default {DEFAULT_WAIT_SECONDS:.0f} s)"
            " and print its outcome",
        )

    def handle(
        self,
        *args: Any,
        targets: list[str],
        namespace: str,
        all_objects: bool,
        selector: str,
        instance: str,
        wait: str | None,
        **options: Any,
    ) -> None:
        targets = list(targets)
        wait_seconds = _wait_seconds(wait, targets)
        wanted = _named(targets, namespace)
        selecting = all_objects or bool(selector) or bool(instance)
        if wanted and selecting:
            raise CommandError(
                "give HikyoSecrets by name or select them with --all, -l or --instance, not both"
            )
        if not wanted and not selecting:
            raise CommandError(
                "give NAMESPACE/NAME (or NAME with -n), or select with --all, -l or --instance"
            )
        if not wanted and not all_objects and not namespace:
            raise CommandError(
                "-l and --instance select within -n NAMESPACE, or in every namespace with --all"
            )
        cluster = _cluster()
        with _quiet_retries():
            self._ask(cluster, wanted, namespace, selector, instance, wait_seconds)

    def _ask(
        self,
        cluster: KubeCluster,
        wanted: list[tuple[str, str]],
        namespace: str,
        selector: str,
        instance: str,
        wait_seconds: float | None,
    ) -> None:
        try:
            if wanted:
                asked = self._resolve(cluster, wanted)
            else:
                asked = self._select(cluster, namespace or None, selector, instance)
            asked = self._in_reach(asked)
            value = new_request_value()
            failed = self._annotate(cluster, asked, value)
        except KubeError as error:
            raise CommandError(f"cannot talk to the cluster: {error}") from None
        except (HTTPError, OSError) as error:  # unreachable or silent: it says no more
            raise CommandError(
                f"cannot reach the cluster at {_server(cluster)}: {type(error).__name__}"
            ) from None
        except ApiException as error:  # not translated (should not happen); never the body
            raise CommandError(f"cannot talk to the cluster: HTTP {error.status}") from None
        if failed:
            raise CommandError(f"{len(failed)} of {len(asked)} HikyoSecrets were not annotated")
        if wait_seconds is not None:
            self._wait(cluster, asked, value, wait_seconds)

    # -- which objects -------------------------------------------------------------------

    def _resolve(self, cluster: KubeCluster, wanted: list[tuple[str, str]]) -> list[Asked]:
        """Named objects must all exist: nothing is annotated when one does not."""
        found: list[Asked] = []
        missing: list[str] = []
        for namespace, name in wanted:
            cr = cluster.get_hikyosecret(namespace, name)
            if cr is None:
                missing.append(f"{namespace}/{name}")
            else:
                found.append(Asked(namespace, name, cr["metadata"]["uid"]))
        if missing:
            raise CommandError(f"HikyoSecret not found: {', '.join(missing)}")
        return found

    def _select(
        self, cluster: KubeCluster, namespace: str | None, selector: str, instance: str
    ) -> list[Asked]:
        try:
            items = cluster.select_hikyosecrets(namespace, selector)
        except KubeError as error:
            if error.status == 400 and selector:
                raise CommandError(
                    f"invalid label selector {shown(selector)}: the apiserver refused it "
                    f"(HTTP 400{' ' + error.reason if error.reason else ''})"
                ) from None
            raise
        asked = sorted(
            (
                Asked(
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
            raise CommandError(f"no HikyoSecret matched {where}{narrowed}")
        return asked

    def _in_reach(self, asked: list[Asked]) -> list[Asked]:
        """The operator never reconciles CRs in its own namespace (S8.5) or outside its watch
        list (S8.1): asking them would wait for ever, so they are left out, each said once."""
        operator = settings.HIKYO_OPERATOR
        kept: list[Asked] = []
        for item in asked:
            if operator.operator_namespace and item.namespace == operator.operator_namespace:
                self.stderr.write(
                    f"{item}: skipped: the operator ignores HikyoSecrets in its own namespace"
                )
            elif operator.namespaces and item.namespace not in operator.namespaces:
                self.stderr.write(
                    f"{item}: skipped: namespace {item.namespace} is not in "
                    "HIKYO_OPERATOR_NAMESPACES"
                )
            else:
                kept.append(item)
        if not kept:
            raise CommandError("nothing to resync: every HikyoSecret asked was skipped")
        return kept

    # -- asking --------------------------------------------------------------------------

    def _annotate(self, cluster: KubeCluster, asked: list[Asked], value: str) -> list[Asked]:
        failed: list[Asked] = []
        for item in asked:
            try:
                cluster.annotate_hikyosecret(
                    item.namespace, item.name, {FORCE_SYNC_ANNOTATION: value}, uid=item.uid
                )
            except NotFound:
                self.stderr.write(f"{item}: not annotated: it was deleted meanwhile")
                failed.append(item)
                continue
            except KubeError as error:
                if error.status in (409, 422):  # the uid precondition: recreated meanwhile
                    self.stderr.write(f"{item}: not annotated: it was replaced meanwhile")
                else:
                    self.stderr.write(f"{item}: not annotated: {error}")
                failed.append(item)
                continue
            self.stdout.write(f"{item}: resync requested ({FORCE_SYNC_ANNOTATION}={value})")
        return failed

    # -- waiting -------------------------------------------------------------------------

    def _wait(self, cluster: KubeCluster, asked: list[Asked], value: str, seconds: float) -> None:
        """Uncached GETs of the CRs not handled yet, a few per second at most, until each
        records ``value`` in ``status.lastForcedSync`` or ``seconds`` have passed."""
        deadline = time.monotonic() + seconds
        pending = list(asked)
        gone: list[Asked] = []
        interval = POLL_FIRST_SECONDS
        trouble = ""
        while pending:
            still: list[Asked] = []
            for item in pending:
                try:
                    cr = cluster.get_hikyosecret(item.namespace, item.name)
                except (KubeError, HTTPError, OSError) as error:  # a blip: ask again next round
                    trouble = str(error) if isinstance(error, KubeError) else type(error).__name__
                    still.append(item)
                    continue
                if cr is None or cr["metadata"].get("uid") != item.uid:
                    self.stdout.write(f"{item}: deleted before it handled the request")
                    gone.append(item)
                elif ((cr.get("status") or {}).get("lastForcedSync") or {}).get("value") == value:
                    self.stdout.write(outcome_line(item, cr))
                    self.stdout.flush()
                else:
                    still.append(item)
            pending = still
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(min(interval, max(deadline - time.monotonic(), 0.0)))
            interval = min(interval * 1.5, POLL_MAX_SECONDS)
        for item in pending:
            self.stdout.write(f"{item}: not handled within {seconds:g} s")
        if pending or gone:
            unhandled = len(pending) + len(gone)
            hint = f"; last read error: {trouble}" if pending and trouble else ""
            raise CommandError(
                f"{unhandled} of {len(asked)} HikyoSecrets did not handle the resync within "
                f"{seconds:g} s (is the operator running?){hint}"
            )


def _wait_seconds(wait: str | None, targets: list[str]) -> float | None:
    """``--wait``, ``--wait=SECONDS`` or ``--wait SECONDS``. A word after a bare ``--wait``
    that is not a number is a target (``resync --wait ns/app``), not an error."""
    if wait is None:
        return None
    if wait == "":
        return DEFAULT_WAIT_SECONDS
    try:
        seconds = float(wait)
    except ValueError:
        targets.insert(0, wait)
        return DEFAULT_WAIT_SECONDS
    if not seconds > 0 or seconds == float("inf"):
        raise CommandError(f"--wait takes a number of seconds above 0, not {shown(wait)}")
    return seconds


def _named(targets: list[str], namespace: str) -> list[tuple[str, str]]:
    wanted: list[tuple[str, str]] = []
    for target in targets:
        if "/" in target:
            space, _, name = target.partition("/")
            if namespace and space != namespace:
                raise CommandError(f"{shown(target)} is not in namespace {shown(namespace)} (-n)")
        else:
            space, name = namespace, target
        if not space or not name or "/" in name:
            raise CommandError(
                f"give the HikyoSecret as NAMESPACE/NAME (or NAME with -n), not {shown(target)}"
            )
        if (space, name) not in wanted:
            wanted.append((space, name))
    return wanted


@contextmanager
def _quiet_retries():
    """urllib3 logs each retried connection as a warning; the command's one line says it."""
    pool = logging.getLogger("urllib3.connectionpool")
    level = pool.level
    pool.setLevel(logging.ERROR)
    try:
        yield
    finally:
        pool.setLevel(level)


def _server(cluster: KubeCluster) -> str:
    """The apiserver's scheme, host and port (never a userinfo part)."""
    parts = urlsplit(str(cluster.api_client.configuration.host or ""))
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"


def _cluster() -> KubeCluster:
    try:
        return configured_cluster(settings.KUBECONFIG)
    except ClusterUnavailable as error:
        raise CommandError(str(error)) from None
