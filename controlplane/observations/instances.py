"""The HikyoInstance page (issue 35 item 2): what the cluster says of one instance (its URL with
any userinfo redacted, whether it has a CA bundle, its audience), and what the observation
store says (its HikyoSecrets by state, the last successful fetch, the 429 pauses per org).

A HikyoSecret belongs to the instance its ``spec.instanceRef.name`` names (the recorder keeps
it from the spec), so one that stops before its fetch counts here too, and an instance no
longer in the cluster is shown as missing. The HikyoInstance is read through the operator's
own client when the dashboard runs in ``run_operator`` (its watch cache), else one built from
KUBECONFIG; a failure is one line and the page still shows the store's side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Max

from k8s.errors import KubeError, describe
from k8s.gateway import ClusterUnavailable, configured_cluster
from workers.engine.conditions import SYNCED, stored_facts
from workers.engine.facts import Cause
from workers.engine.userinfo import without_userinfo

from . import process, why
from .models import TrackedObject

ROWS_SHOWN = 500  # of one instance's HikyoSecrets; the filtered list has them all
STATE_ORDER = (why.BLOCKED_STATE, why.PAUSED_STATE, why.WARNING_STATE, why.READY_STATE)
# Narrows the rows read to R5-like messages ("HikyoInstance <name> not found"); the Synced
# condition's cause fact decides (names_missing).
MISSING_PREFIX = "HikyoInstance "


@dataclass(frozen=True)
class InstanceSpec:
    """What the cluster says of one HikyoInstance; ``found`` None when it could not be read."""

    found: bool | None
    url: str = ""
    ca_present: bool = False
    audience: str = ""
    error: str = ""


def spec_of(instance: dict[str, Any] | None) -> InstanceSpec:
    """Pure: the shown facts of a HikyoInstance object (None: not in the cluster). The URL's
    userinfo never leaves this function (S3.1 refuses it; S0.4 keeps it out of every page)."""
    if instance is None:
        return InstanceSpec(found=False)
    spec = instance.get("spec") or {}
    url = spec.get("url")
    return InstanceSpec(
        found=True,
        url=without_userinfo(url) if isinstance(url, str) else "",
        ca_present=bool(spec.get("caBundle")),
        audience=str(spec.get("audience") or ""),
    )


_built: list[Any] = []  # the client this process built, once (no operator runs in it)


def _cluster() -> Any:
    operator_cluster = getattr(getattr(process.current, "runtime", None), "cluster", None)
    if operator_cluster is not None:
        return operator_cluster
    if not _built:
        _built.append(configured_cluster(settings.KUBECONFIG))
    return _built[0]


def read_spec(name: str) -> InstanceSpec:
    """The HikyoInstance from the cluster; every failure is one line, never a traceback."""
    try:
        return spec_of(_cluster().get_instance(name))
    except ClusterUnavailable as error:
        return InstanceSpec(found=None, error=str(error))
    except KubeError as error:
        return InstanceSpec(found=None, error=describe(error))
    except Exception as error:  # transport (urllib3, OSError): its type, never its text
        return InstanceSpec(found=None, error=type(error).__name__)


def names_missing(rows: list[tuple[str, list[Any]]]) -> set[str]:
    """Pure: the instances that R5 found missing, from (instance, stored conditions) pairs of
    ``Synced/FetchFailed`` blockers: their Synced condition's cause fact says so."""
    return {
        instance
        for instance, conditions in rows
        if any(
            isinstance(c, dict)
            and c.get("type") == SYNCED
            and stored_facts(c).get("cause") == Cause.INSTANCE_MISSING
            for c in conditions or ()
        )
    }


def missing_instances(live: Any) -> set[str]:
    """The instances some live HikyoSecret's latest run found missing (one indexed query)."""
    rows = live.filter(
        blocking="Synced/FetchFailed", blocking_message__startswith=MISSING_PREFIX
    ).values_list("instance", "conditions")
    return names_missing(list(rows))


@dataclass(frozen=True)
class OrgPause:
    org: str
    until: datetime


def pauses(rows: list[tuple[str, dict[str, Any], datetime]]) -> dict[str, list[OrgPause]]:
    """Pure: per instance, the orgs a 429 pause holds and until when (the latest of its CRs'),
    from (instance, names, paused_until) of rows paused now (S4.1.6: per instance and org)."""
    latest: dict[tuple[str, str], datetime] = {}
    for instance, names, until in rows:
        key = (instance, str((names or {}).get("org") or ""))
        latest[key] = max(until, latest.get(key, until))
    found: dict[str, list[OrgPause]] = {}
    for (instance, org), until in sorted(latest.items()):
        found.setdefault(instance, []).append(OrgPause(org, until))
    return found


def paused_now(live: Any, now: datetime) -> dict[str, list[OrgPause]]:
    rows = live.filter(paused_until__gt=now).values_list("instance", "names", "paused_until")
    return pauses(list(rows))


@dataclass
class InstancePage:
    name: str
    spec: InstanceSpec
    missing: bool
    last_fetch_ok_at: datetime | None
    last_fetch_at: datetime | None
    pauses: list[OrgPause]
    total: int
    by_state: dict[str, list[tuple[TrackedObject, why.Why]]] = field(default_factory=dict)

    @property
    def states(self) -> list[tuple[str, list[tuple[TrackedObject, why.Why]]]]:
        return [(state, self.by_state.get(state, [])) for state in STATE_ORDER]


def page(live: Any, name: str, now: datetime) -> InstancePage:
    mine = live.filter(instance=name)
    times = mine.aggregate(ok=Max("last_fetch_ok_at"), fetched=Max("last_fetch_at"))
    spec = read_spec(name)
    by_state: dict[str, list[tuple[TrackedObject, why.Why]]] = {}
    for tracked in mine.order_by("namespace", "name")[:ROWS_SHOWN]:
        found = why.of(tracked, now)
        by_state.setdefault(found.state, []).append((tracked, found))
    return InstancePage(
        name=name,
        spec=spec,
        missing=spec.found is False or name in missing_instances(mine),
        last_fetch_ok_at=times["ok"],
        last_fetch_at=times["fetched"],
        pauses=paused_now(mine, now).get(name, []),
        total=mine.count(),
        by_state=by_state,
    )
