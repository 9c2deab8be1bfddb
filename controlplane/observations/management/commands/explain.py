"""``manage.py explain NAMESPACE/NAME... [--fetch]``: why a HikyoSecret is (not) delivered.

Runs a reconcile's reads and decisions without its writes: ``observe`` (reads only, in S4.2
order) and ``decide_before_fetch`` (R0-R14); with ``--fetch`` also one cursor-less fetch (R15)
and ``decide_after_fetch`` (R16). ``apply`` is never called, and the cluster it is given
refuses every write method of the port besides. The only create a run may make is the
TokenRequest of a ServiceAccount credential (R6), which leaves no object behind.

Prints each step passed, the one that stops, the outcome and what to do (the remediation texts
of ``workers.engine.remediation``). Never a value, token, cursor or stamp. Several HikyoSecrets
are explained in turn, each block headed by its ``HikyoSecret NAMESPACE/NAME`` line.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.observations.cluster_errors import cluster_errors_as_one_line
from workers.engine.decide_after_fetch import decide_after_fetch
from workers.engine.explain import explain
from workers.engine.fetch import fetch as fetch_once
from workers.engine.observe import observe
from workers.engine.plan import FetchPlan
from workers.engine.ports import write_methods
from workers.runtime import build_engine


class ReadOnlyCluster:
    """The Cluster port with every write method refused: explain cannot write by mistake."""

    def __init__(self, cluster: Any) -> None:
        self._cluster = cluster
        self._writes = write_methods()

    def __getattr__(self, name: str) -> Any:
        if name in self._writes:
            raise AttributeError(f"explain never writes ({name} refused)")
        return getattr(self._cluster, name)


def split_target(target: str) -> tuple[str, str]:
    namespace, _, name = target.partition("/")
    if not namespace or not name or "/" in name:
        raise CommandError(f"give the HikyoSecret as NAMESPACE/NAME, not {target!r}")
    return namespace, name


class Command(BaseCommand):
    help = (
        "Explain HikyoSecrets, one after the other: the S4.2 steps each passes, the one that "
        "stops, why, and what to do. Writes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "targets", nargs="+", metavar="NAMESPACE/NAME", help="each HikyoSecret to explain"
        )
        parser.add_argument(
            "--fetch",
            action="store_true",
            help="also make one cursor-less fetch and explain the answer (still writes nothing)",
        )

    def handle(self, *args: Any, targets: list[str], fetch: bool, **options: Any) -> None:
        names = [split_target(target) for target in targets]  # every one checked first
        operator_settings = settings.HIKYO_OPERATOR
        try:
            with cluster_errors_as_one_line():
                engine = build_engine(operator_settings, kubeconfig=settings.KUBECONFIG)
        except ValueError as error:  # no operator namespace
            raise CommandError(str(error)) from None
        missing = []
        for index, (namespace, name) in enumerate(names):
            if index:
                self.stdout.write("")
            if not self._explain(engine, namespace, name, fetch):
                missing.append(f"{namespace}/{name}")
        if missing:  # after the others were explained
            kind = "HikyoSecret" if len(missing) == 1 else "HikyoSecrets"
            raise CommandError(f"{kind} {', '.join(missing)} not found")

    def _explain(self, engine: Any, namespace: str, name: str, fetch: bool) -> bool:
        """Writes one HikyoSecret's explanation; False when it does not exist."""
        operator_settings = settings.HIKYO_OPERATOR
        cluster = ReadOnlyCluster(engine.cluster)
        now = engine.now()
        with cluster_errors_as_one_line(engine.cluster.api_client):
            observed, decision = observe(
                cluster,
                engine.store,
                operator_settings,
                engine.client_for,
                namespace,
                name,
                None,
                forced_full=fetch,  # --fetch: the one fetch it makes is cursor-less
                now=now,
            )
        if observed.cr is None:
            return False
        attempt = plan = None
        if fetch and isinstance(decision, FetchPlan):
            attempt = fetch_once(
                observed,
                decision,
                engine.store,
                operator_settings,
                now,
                sleep=engine.sleep,
                clocks=engine,
            )
            plan = decide_after_fetch(observed, attempt, operator_settings, now, decision)
        for line in explain(observed, decision, now, attempt=attempt, plan=plan):
            self.stdout.write(line)
        if fetch and not isinstance(decision, FetchPlan):
            self.stdout.write("(--fetch: no fetch made, a step before the fetch stops)")
        return True
