"""``manage.py status [-n NAMESPACE] [--not-ready] [-o json|wide]``: the HikyoSecrets as the
cluster has them, like ``kubectl get hksec -A`` plus the first blocking reason.

Reads the cluster (an uncached list of HikyoSecrets through k8s/gateway.py), never the Django
observation store: Kubernetes is the truth. The blocking reason is the Ready rule's own first
blocker (S5.2, ``workers.engine.explain.blocking_condition``). Prints names, reasons and
messages only; a status's cursor and stamp are never read out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.observations.cluster_errors import cluster_errors_as_one_line
from k8s.errors import NotFound
from k8s.gateway import KubeCluster, configured_cluster
from workers.engine.conditions import READY
from workers.engine.explain import blocking_condition, status_remediation
from workers.engine.remediation import remediation
from workers.engine.remediation_context import spec_context

SHORT_MESSAGE = 60
COLUMNS = ("NAMESPACE", "NAME", "INSTANCE", "TARGET", "LIFECYCLE", "READY", "REASON", "MESSAGE")
AGES = ("AGE", "LAST DELIVERY")
WIDE = ("TYPE", "CREDENTIAL", "KEYS", "GENERATION")


def list_hikyosecrets(cluster: KubeCluster, namespaces: list[str]) -> list[dict[str, Any]]:
    """Uncached lists through the gateway: the given namespaces, or every namespace."""
    if not namespaces:
        return cluster.select_hikyosecrets(None)
    return [cr for namespace in namespaces for cr in cluster.select_hikyosecrets(namespace)]


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def age(text: Any, now: datetime) -> str:
    """kubectl's short age: 45s, 12m, 5h, 3d."""
    moment = _parse_time(text)
    if moment is None:
        return "-"
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def row(cr: Mapping[str, Any], operator_namespace: str, now: datetime) -> dict[str, Any]:
    """One HikyoSecret as the command shows it; the fields of ``-o json``."""
    metadata = cr.get("metadata") or {}
    spec = cr.get("spec") or {}
    status = cr.get("status") or {}
    conditions = {
        c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)
    }
    ready = conditions.get(READY)
    namespace = metadata.get("namespace", "")
    blocker = blocking_condition(status)
    if namespace and namespace == operator_namespace:  # S8.5: never reconciled here
        reason, message = "OperatorNamespace", "HikyoSecrets in the operator namespace are ignored"
        condition_type, condition_reason = None, "OperatorNamespace"
        remedy = remediation("OperatorNamespace", spec_context(cr))
    elif blocker is None:
        reason, message, condition_type, condition_reason = None, "", None, None
        remedy = status_remediation(cr, None)
    else:
        reason, message = blocker.name, blocker.message
        condition = blocker.condition or {}
        condition_type, condition_reason = condition.get("type"), condition.get("reason")
        remedy = status_remediation(cr, blocker)
    auth = spec.get("auth") or {}
    if (auth.get("serviceAccountRef") or {}).get("name"):
        credential = f"ServiceAccount/{auth['serviceAccountRef']['name']}"
    else:
        credential = f"Secret/{(auth.get('secretRef') or {}).get('name', '')}"
    target = spec.get("target") or {}
    return {
        "namespace": namespace,
        "name": metadata.get("name", ""),
        "instance": (spec.get("instanceRef") or {}).get("name", ""),
        "target": target.get("name", ""),
        "targetType": target.get("type") or "Opaque",
        "credential": credential,
        "lifecycle": status.get("lifecycle"),
        "ready": (ready or {}).get("status"),
        "reason": reason,
        "conditionType": condition_type,
        "conditionReason": condition_reason,
        "message": message,
        "remediation": remedy,
        "created": metadata.get("creationTimestamp"),
        "age": age(metadata.get("creationTimestamp"), now),
        "lastDelivery": status.get("lastDelivery"),
        "sinceLastDelivery": age(status.get("lastDelivery"), now),
        "keyCount": status.get("keyCount"),
        "generation": metadata.get("generation"),
        "observedGeneration": status.get("observedGeneration"),
    }


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(rows: list[dict[str, Any]], wide: bool) -> list[str]:
    headers = list(COLUMNS) + list(AGES) + (list(WIDE) if wide else [])
    lines = []
    cells = []
    for r in rows:
        message = r["message"] if wide else _short(r["message"], SHORT_MESSAGE)
        values = [
            r["namespace"],
            r["name"],
            r["instance"],
            r["target"],
            r["lifecycle"] or "-",
            r["ready"] or "-",
            r["reason"] or "-",
            message or "-",
            r["age"],
            r["sinceLastDelivery"],
        ]
        if wide:
            generation = f"{r['generation'] or '-'}/{r['observedGeneration'] or '-'}"
            keys = "-" if r["keyCount"] is None else str(r["keyCount"])
            values += [r["targetType"], r["credential"], keys, generation]
        cells.append([str(v) for v in values])
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    for values in [headers, *cells]:
        lines.append("   ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip())
    return lines


class Command(BaseCommand):
    help = (
        "List HikyoSecrets from the cluster with lifecycle, Ready and the first blocking "
        "reason (like kubectl get hksec -A)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-n", "--namespace", help="only this namespace")
        parser.add_argument(
            "--not-ready", action="store_true", help="only HikyoSecrets that are not Ready"
        )
        parser.add_argument(
            "-o",
            "--output",
            choices=("table", "wide", "json"),
            default="table",
            help="table (default), wide (more columns, full messages) or json",
        )

    def handle(
        self, *args: Any, namespace: str | None, not_ready: bool, output: str, **options: Any
    ) -> None:
        operator_settings = settings.HIKYO_OPERATOR
        namespaces = [namespace] if namespace else list(operator_settings.namespaces)
        with cluster_errors_as_one_line():
            cluster = configured_cluster(settings.KUBECONFIG)
        try:
            with cluster_errors_as_one_line(cluster.api_client):
                try:
                    items = list_hikyosecrets(cluster, namespaces)
                except NotFound:
                    where = f" in namespace {namespace}" if namespace else ""
                    raise CommandError(
                        f"cannot list HikyoSecrets{where}: HTTP 404 "
                        "(is the hikyo.dev CRD installed?)"
                    ) from None
        finally:
            cluster.api_client.close()
        now = datetime.now(UTC)
        rows = [row(cr, operator_settings.operator_namespace, now) for cr in items]
        rows.sort(key=lambda r: (r["namespace"], r["name"]))
        if not_ready:
            rows = [r for r in rows if r["ready"] != "True"]
        if output == "json":
            self.stdout.write(json.dumps(rows, indent=2))
            return
        if not rows:
            where = f" in namespace {namespace}" if namespace else ""
            self.stdout.write(f"No HikyoSecrets found{where}.")
            return
        for line in table(rows, wide=output == "wide"):
            self.stdout.write(line)
