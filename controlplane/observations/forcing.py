"""Force resync from the dashboard (issue 10 item 4): the same request as ``kubectl annotate``
and ``manage.py resync`` — ``hikyo.dev/force-sync`` set to a new value on each HikyoSecret
(``workers/engine/force_sync.py``). The leader's watch runs each CR once; the run that handled
the value records it (``ReconcileRun.forced_sync``, ``TrackedObject.last_forced_sync``).

The Kubernetes client is built lazily, on the first request: the operator's own client when
the dashboard runs inside ``run_operator``, else one from KUBECONFIG / in-cluster /
~/.kube/config, as ``manage.py resync`` builds it. The request itself is
``resync_requests.request_resync``, which the command uses too. Every failure is one line
(no body, no traceback). ``use_cluster`` is the seam tests use to put a fake cluster in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from django.conf import settings

from k8s.gateway import ClusterUnavailable, configured_cluster
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION

from . import process, resync_requests
from .models import TrackedObject
from .resync_requests import Requested, new_request_value

__all__ = ["FORCE_SYNC_ANNOTATION", "ClusterUnavailable", "Requested", "request_resync"]

Annotator = resync_requests.ResyncCluster


def _default_cluster() -> Annotator:
    operator = process.current
    cluster = getattr(getattr(operator, "runtime", None), "cluster", None)
    if cluster is not None:
        return cluster  # type: ignore[no-any-return]
    return configured_cluster(settings.KUBECONFIG)


_factory: list[Callable[[], Annotator]] = [_default_cluster]


@contextmanager
def use_cluster(cluster: Annotator | Callable[[], Annotator]) -> Iterator[None]:
    """Tests: every request inside uses ``cluster`` (or what the callable builds)."""
    if hasattr(cluster, "annotate_hikyosecret"):
        _factory.insert(0, lambda: cluster)  # type: ignore[return-value]
    else:
        _factory.insert(0, cluster)  # type: ignore[arg-type]
    try:
        yield
    finally:
        _factory.pop(0)


def request_resync(objects: Iterable[TrackedObject]) -> Requested[TrackedObject]:
    """The dashboard's request (``resync_requests.request_resync``) for the selected rows: a
    row already deleted from the cluster is skipped; never raises for a cluster error."""
    live: list[TrackedObject] = []
    skipped: list[tuple[TrackedObject, str]] = []
    for tracked in objects:
        if tracked.deleted_at is not None:
            skipped.append((tracked, "deleted from the cluster"))
        else:
            live.append(tracked)
    try:
        cluster = _factory[0]()
    except ClusterUnavailable as error:
        return Requested(new_request_value(), error=str(error))
    except Exception as error:  # any other client failure: its type only
        return Requested(new_request_value(), error=f"no cluster client: {type(error).__name__}")
    return resync_requests.request_resync(cluster, live, skipped=skipped)


def log_message(value: str) -> str:
    """The LogEntry change message of one request: the admin's audit trail (the timeline reads
    the request as a value, ResyncRequest)."""
    return f"Force resync requested ({FORCE_SYNC_ANNOTATION}={value})"
