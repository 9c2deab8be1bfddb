"""What the benchmarks read from the apiserver: its request counters (``apiserver_request_total``)
and raw LISTs of the objects they watch converge."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

CALL_TIMEOUT = 60  # seconds, every apiserver call of the benchmarks
READ_VERBS = {"GET", "LIST", "WATCH"}  # everything else counts as a write

# (verb, resource or "nonresource", subresource or "")
RequestKey = tuple[str, str, str]


def request_counts(api: Any) -> Counter[RequestKey]:
    """apiserver_request_total summed by (verb, resource, subresource)."""
    method, url, headers, *_ = api.param_serialize(
        "GET", "/metrics", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers, _request_timeout=CALL_TIMEOUT)
    response.read()
    counts: Counter[RequestKey] = Counter()
    for line in response.data.decode().splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            key = (
                labels.get("verb", ""),
                labels.get("resource", "") or "nonresource",
                labels.get("subresource", ""),
            )
            counts[key] += int(float(line.rsplit(" ", 1)[1]))
    return counts


def request_totals(api: Any) -> Counter[tuple[str, str]]:
    """apiserver_request_total summed by (verb, resource), subresources folded in."""
    totals: Counter[tuple[str, str]] = Counter()
    for (verb, resource, _), n in request_counts(api).items():
        totals[(verb, resource)] += n
    return totals


def writes(delta: Counter[tuple[str, str]]) -> dict[str, int]:
    """``"VERB resource": n`` for every write in ``delta``, Leases left out."""
    return {
        f"{verb} {resource}": n
        for (verb, resource), n in sorted(delta.items())
        if verb not in READ_VERBS and n and resource != "leases"
    }


def lease_writes(delta: Counter[tuple[str, str]]) -> int:
    """Leader election's writes, apart: they are the operator's heartbeat, not its work."""
    return sum(
        n
        for (verb, resource), n in delta.items()
        if resource == "leases" and verb not in READ_VERBS
    )


def measure_period(
    api: Any, hikyo: Any, seconds: float, fetch_filter: Callable[[Any], bool]
) -> tuple[dict[str, Any], list[Any]]:
    """One idle period of ``seconds``: the apiserver's writes and requests in it and the
    devserver requests ``fetch_filter`` keeps (returned too)."""
    before, seen = request_totals(api), len(hikyo.requests)
    time.sleep(seconds)
    after = request_totals(api)
    fetched = [r for r in hikyo.requests[seen:] if fetch_filter(r)]
    delta = after - before
    delta[("GET", "nonresource")] -= 1  # this function's own /metrics scrape
    return (
        {
            "seconds": seconds,
            "apiserver_writes": writes(delta),
            "apiserver_writes_total": sum(writes(delta).values()),
            "lease_writes": lease_writes(delta),
            "apiserver_requests_total": sum(n for (_, res), n in delta.items() if res != "leases"),
            "apiserver_requests": {
                f"{verb} {resource}": n
                for (verb, resource), n in sorted(delta.items())
                if n > 0 and resource not in ("leases", "nonresource")
            },
            "fetches": len(fetched),
        },
        fetched,
    )


def list_json(api: Any, path: str) -> list[dict[str, Any]]:
    """A raw LIST (no model deserialisation: the poll must stay cheap at thousands)."""
    method, url, headers, *_ = api.param_serialize(
        "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers, _request_timeout=CALL_TIMEOUT)
    response.read()
    return json.loads(response.data)["items"]


def ready(item: dict[str, Any]) -> bool:
    conditions = (item.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def ready_at_generation(item: dict[str, Any]) -> bool:
    """Ready=True for the generation the object has now (not for an older spec)."""
    status = item.get("status") or {}
    return status.get("observedGeneration") == item["metadata"].get("generation") and ready(item)


def current(item: dict[str, Any]) -> bool:
    """Synced=True with reason Current: the last resync found nothing to change (S4.17)."""
    conditions = (item.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Synced" and c.get("reason") == "Current" for c in conditions)
