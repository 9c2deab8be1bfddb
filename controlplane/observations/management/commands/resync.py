"""``manage.py resync``: ask the operator for one forced full (cursor-less) reconcile.

The request itself (the ``hikyo.dev/force-sync`` value, selection, annotation, waiting) is
``controlplane/observations/resync_requests.py``, shared with the dashboard's action; this
command parses its arguments and prints. It needs no operator setting and takes no lock.

Selection, as kubectl's: ``NAMESPACE/NAME`` arguments (or ``NAME`` with ``-n``); or ``--all``
(every namespace, or the ``-n`` namespace); ``-l SELECTOR`` and ``--instance NAME`` narrow a
selection within ``-n NAMESPACE`` or, with ``--all``, every namespace. Names and a selection do
not mix. The command never reads a value, token or cursor, so it never prints one.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from controlplane.observations.cluster_errors import cluster_errors_as_one_line
from controlplane.observations.models import TrackedObject
from controlplane.observations.resync_requests import (
    DEFAULT_WAIT_SECONDS,
    ResyncCluster,
    ResyncRefused,
    in_reach,
    new_request_value,
    request_resync,
    resolve,
    select,
    wait_for_outcomes,
)
from k8s.gateway import configured_cluster
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION
from workers.engine.settings import shown
from workers.keys import ObjectKey

__all__ = ["DEFAULT_WAIT_SECONDS", "Command", "new_request_value"]


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
        with cluster_errors_as_one_line():
            cluster = _cluster()
        with cluster_errors_as_one_line(getattr(cluster, "api_client", None)):
            try:
                if wanted:
                    chosen = resolve(cluster, wanted)
                else:
                    chosen = select(cluster, namespace or None, selector, instance)
            except ResyncRefused as error:
                raise CommandError(str(error)) from None
            kept, skipped = in_reach(chosen, settings.HIKYO_OPERATOR)
            for item, why in skipped:
                self.stderr.write(f"{item}: skipped: {why}")
            if not kept:
                raise CommandError("nothing to resync: every HikyoSecret asked was skipped")
            done = request_resync(cluster, kept)
            for item, why in done.failed:
                self.stderr.write(f"{item}: not annotated: {why}")
            asked_line = f"resync requested ({FORCE_SYNC_ANNOTATION}={done.value})"
            for item in done.asked:
                self.stdout.write(f"{item}: {asked_line}")
            if done.failed:
                raise CommandError(
                    f"{len(done.failed)} of {len(kept)} HikyoSecrets were not annotated"
                )
            if wait_seconds is not None:  # its reads' retries stay quiet too
                self._wait(cluster, done.asked, done.value, wait_seconds)

    def _wait(
        self, cluster: ResyncCluster, asked: list[ObjectKey], value: str, seconds: float
    ) -> None:
        def show(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        waited = wait_for_outcomes(cluster, asked, value, seconds, show, held_back_by_pause)
        if waited.unhandled:
            hint = f"; last read error: {waited.trouble}" if waited.trouble else ""
            raise CommandError(
                f"{waited.unhandled} of {len(asked)} HikyoSecrets did not handle the resync "
                f"within {seconds:g} s (is the operator running?){hint}"
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


def _cluster() -> ResyncCluster:
    return configured_cluster(settings.KUBECONFIG)


def held_back_by_pause(target: ObjectKey) -> str | None:
    """What the observation store says holds the CR's fetch back: the 429 pause its last run
    waited on (S4.1.6), when it has not ended. None when the store tells nothing."""
    now = timezone.now()
    try:
        found = (
            TrackedObject.objects.filter(
                namespace=target.namespace, name=target.name, paused_until__gt=now
            )
            .values_list("instance", "names", "paused_until")
            .first()
        )
    except Exception:  # no store to ask (lost, not migrated): the wait goes on without it
        return None
    if found is None:
        return None
    instance, names, until = found
    org = (names or {}).get("org") or "its org"
    left = max(int((until - now).total_seconds()), 1)
    return (
        f"waits for HikyoInstance {instance or 'its instance'}'s 429 pause of {org} (about "
        f"{left} s more, S4.1.6); the forced sync runs after it"
    )
