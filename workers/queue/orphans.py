"""Which handed-out keys a dead worker left behind (issue 33 item 6).

A scaled worker's main process advertises its slots under a name unique to that process's life
(``incarnation``), renewed every few seconds (workers/broker_window.py); each of its runs takes
a key's lock as an owner that starts with that name (``run_owner``). When the advertisement
expires without being withdrawn, the worker died (SIGKILL, OOM, a node lost): its runs will
never finish and the messages it had prefetched will never run. Those keys are due again as
soon as the leader sees that, not after the stale-dispatch window, which stays for what no
worker death explains (a lost message).

Fencing is unchanged (S4.1.4): a run whose lock is released here and that somehow still lives
fails its next ``holds`` check before any write.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from workers.keys import ObjectKey

OWNER_SEPARATOR = "/"  # a Celery node name (name@host) never holds one


@dataclass(frozen=True)
class DispatchedRun:
    """A key handed out and not finished: ``owner`` holds its lock, None while nobody does
    (its message waits in the broker or in some worker's prefetch)."""

    key: ObjectKey
    owner: str | None


def incarnation(node_name: str) -> str:
    """The name one worker process advertises under: a restarted container keeps its node
    name, and the dead process's locks must not pass for the new one's."""
    return f"{node_name}~{uuid.uuid4().hex[:8]}"


def run_owner(worker: str) -> str:
    """A lock owner that names its worker: unique per process (a prefork child) and per life."""
    return f"{worker}{OWNER_SEPARATOR}{os.getpid()}-{uuid.uuid4().hex[:6]}"


def worker_of(owner: str) -> str | None:
    """The worker ``owner`` runs in; None for an owner that names none (the embedded operator,
    ``manage.py reconcile``), which no advertisement speaks for."""
    worker, separator, _ = owner.partition(OWNER_SEPARATOR)
    return worker if separator and worker else None


def orphaned(
    runs: Iterable[DispatchedRun], gone: frozenset[str], newly_gone: bool
) -> list[DispatchedRun]:
    """The runs to hand out again: those locked by a worker in ``gone``; and, when a worker was
    newly found gone, every unlocked one, since the broker does not say which of them sat in
    that worker's prefetch (a copy still queued is harmless: whichever copy comes first runs,
    the other finds its key settled)."""
    picked = []
    for run in runs:
        if run.owner is None:
            if newly_gone:
                picked.append(run)
        elif worker_of(run.owner) in gone:
            picked.append(run)
    return picked
