"""The local control plane's audit log (localcluster.AUDIT_POLICY): every request a
ServiceAccount made, as plain records a test can filter."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AuditedRequest:
    user: str
    verb: str  # get, list, watch, create, update, patch, delete, ...
    group: str  # "" for the core group
    resource: str  # with its subresource: "hikyosecrets/status"
    namespace: str  # "" for cluster-scoped objects and cluster-wide lists
    name: str
    code: int
    decision: str  # the authorizer's "allow" or "forbid"
    uri: str

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return (
            f"{self.verb} {self.group or 'core'}/{self.resource} {where}{self.name} -> {self.code}"
        )


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def audited_requests(log: Path, user: str) -> list[AuditedRequest]:
    """The requests ``user`` made, in log order, each once: a watch still open has only its
    ResponseStarted event, a finished request its ResponseComplete (or Panic)."""
    requests = []
    seen: set[str] = set()
    with log.open(encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            if event.get("user", {}).get("username") != user or event["auditID"] in seen:
                continue
            seen.add(event["auditID"])
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "")
            if ref.get("subresource"):
                resource = f"{resource}/{ref['subresource']}"
            requests.append(
                AuditedRequest(
                    user=user,
                    verb=event.get("verb", ""),
                    group=ref.get("apiGroup", ""),
                    resource=resource,
                    namespace=ref.get("namespace", ""),
                    name=ref.get("name", ""),
                    code=int((event.get("responseStatus") or {}).get("code", 0)),
                    decision=(event.get("annotations") or {}).get(
                        "authorization.k8s.io/decision", ""
                    ),
                    uri=event.get("requestURI", ""),
                )
            )
    return requests
