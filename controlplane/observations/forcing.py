"""Force resync from the dashboard (issue 10 item 4): the same request as ``kubectl annotate``
and ``manage.py resync`` — ``hikyo.dev/force-sync`` set to a new value on each HikyoSecret
(``workers/engine/force_sync.py``). The leader's watch runs each CR once; the run that handled
the value records it (``ReconcileRun.forced_sync``, ``TrackedObject.last_forced_sync``).

The Kubernetes client is built lazily, on the first request: the operator's own client when
the dashboard runs inside ``run_operator``, else one from KUBECONFIG / in-cluster /
~/.kube/config, as ``manage.py resync`` builds it. Every failure is one line (no body, no
traceback). ``use_cluster`` is the seam tests use to put a fake cluster in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from django.conf import settings

from k8s.client import ClusterUnavailable
from k8s.errors import KubeError, NotFound, describe
from k8s.gateway import configured_cluster
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION

from . import process
from .management.commands.resync import new_request_value
from .models import TrackedObject


class Annotator(Protocol):
    def annotate_hikyosecret(
        self, namespace: str, name: str, annotations: dict[str, str | None], *, uid: str = ""
    ) -> None: ...


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


@dataclass
class Requested:
    """What one force-resync request did: the value, the objects annotated, the failures."""

    value: str
    asked: list[TrackedObject] = field(default_factory=list)
    failed: list[tuple[TrackedObject, str]] = field(default_factory=list)
    skipped: list[tuple[TrackedObject, str]] = field(default_factory=list)
    error: str = ""  # no cluster at all: nothing was asked


def request_resync(objects: Iterable[TrackedObject], value: str | None = None) -> Requested:
    """Sets ``hikyo.dev/force-sync=<value>`` on each object (guarded by its UID, so a name now
    held by another object is refused); never raises for a cluster error."""
    done = Requested(value or new_request_value())
    wanted = list(objects)
    try:
        cluster = _factory[0]()
    except ClusterUnavailable as error:
        done.error = str(error)
        return done
    except Exception as error:
        done.error = f"no cluster client: {type(error).__name__}"
        return done
    for tracked in wanted:
        if tracked.deleted_at is not None:
            done.skipped.append((tracked, "deleted from the cluster"))
            continue
        try:
            cluster.annotate_hikyosecret(
                tracked.namespace,
                tracked.name,
                {FORCE_SYNC_ANNOTATION: done.value},
                uid=tracked.uid,
            )
        except NotFound:
            done.failed.append((tracked, "not found (deleted from the cluster?)"))
        except KubeError as error:
            done.failed.append((tracked, describe(error)))
        except Exception as error:  # transport (urllib3, OSError): its type, never its text
            done.failed.append((tracked, type(error).__name__))
        else:
            done.asked.append(tracked)
    return done


def log_message(value: str) -> str:
    """The LogEntry change message of one request (shown in the detail page's timeline)."""
    return f"Force resync requested ({FORCE_SYNC_ANNOTATION}={value})"


def value_of(message: str) -> str:
    """The force-sync value a ``log_message`` names, else ""."""
    prefix = f"Force resync requested ({FORCE_SYNC_ANNOTATION}="
    return message[len(prefix) : -1] if message.startswith(prefix) and message.endswith(")") else ""
