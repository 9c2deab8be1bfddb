"""Workloads as the engine's plain ``Workload``: what S4.1.1 lets a cache keep, read off the API's
JSON for a Deployment, StatefulSet or DaemonSet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workers.engine.ports import DEPLOYMENT, STAMP_ANNOTATION_PREFIX, Workload, opted_in_targets


def workload_from(kind: str, obj: Mapping[str, Any]) -> Workload | None:
    """A Workload from the API's JSON for ``kind``; None unless it opted in to some target."""
    metadata = obj.get("metadata") or {}
    targets = opted_in_targets(metadata.get("annotations"))
    if not targets:
        return None
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    template_annotations = ((spec.get("template") or {}).get("metadata") or {}).get(
        "annotations"
    ) or {}
    stamps = {
        name[len(STAMP_ANNOTATION_PREFIX) :]: value
        for name, value in template_annotations.items()
        if name.startswith(STAMP_ANNOTATION_PREFIX)
    }
    strategy_field = "strategy" if kind == DEPLOYMENT else "updateStrategy"
    replicas = spec.get("replicas")
    return Workload(
        kind=kind,
        name=metadata.get("name", ""),
        uid=metadata.get("uid", ""),
        generation=int(metadata.get("generation") or 0),
        targets=targets,
        stamps=stamps,
        paused=bool(spec.get("paused")),
        replicas=1 if replicas is None else int(replicas),
        strategy=(spec.get(strategy_field) or {}).get("type") or "",
        observed_generation=int(status.get("observedGeneration") or 0),
        updated_replicas=int(status.get("updatedReplicas") or 0),
        ready_replicas=int(status.get("readyReplicas") or 0),
        unavailable_replicas=int(status.get("unavailableReplicas") or 0),
        progress_deadline_exceeded=any(
            c.get("type") == "Progressing"
            and c.get("status") == "False"
            and c.get("reason") == "ProgressDeadlineExceeded"
            for c in status.get("conditions") or []
        ),
        desired_number_scheduled=int(status.get("desiredNumberScheduled") or 0),
        updated_number_scheduled=int(status.get("updatedNumberScheduled") or 0),
        number_unavailable=int(status.get("numberUnavailable") or 0),
    )
