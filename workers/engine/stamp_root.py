"""The stamp root (S6.3): the 32 random bytes every stamp key derives from.

Read uncached before every fetch; created only when no CR holds a stamp yet (a fresh install) or
on explicit opt-in, since a new root restarts every opted-in workload once; never replaced when
its length is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from k8s.errors import AlreadyExists

from .ports import Cluster, SecretObject
from .settings import OperatorSettings
from .stamp import STAMP_ROOT_BYTES

STAMP_ROOT_SECRET = "hikyo-operator-stamp-root"
STAMP_ROOT_KEY = "root"


class StampRootUnavailable(Exception):
    """R12 failed; the message says what to do (it never holds the root)."""


def stamped_in_reach(crs: Iterable[Mapping[str, Any]], operator_namespace: str) -> list[str]:
    """S6.3: "namespace/name" of the listed CRs (already limited to the watch list) whose
    recorded stamp a new root would invalidate.

    Left out: CRs in the operator namespace, which are never reconciled (S8.5), and CRs whose
    status another operator wrote (S4.1.7): their stamps come from that operator's root, so
    ours being absent loses nothing; taking such a CR over restarts its workloads once anyway.
    """
    found = []
    for cr in crs:
        metadata, status = cr.get("metadata") or {}, cr.get("status") or {}
        if not status.get("stamp") or metadata.get("namespace") == operator_namespace:
            continue
        if status.get("operatorNamespace") not in (None, "", operator_namespace):
            continue
        found.append(f"{metadata.get('namespace')}/{metadata.get('name')}")
    return found


def read_stamp_root(cluster: Cluster, settings: OperatorSettings) -> bytes:
    namespace = settings.operator_namespace
    secret = cluster.get_secret(namespace, STAMP_ROOT_SECRET)
    if secret is None:
        if not settings.allow_stamp_root_reset and stamped_in_reach(
            cluster.list_hikyosecrets_in(settings.namespaces), namespace
        ):
            raise StampRootUnavailable(
                f"stamp root missing: restore Secret {namespace}/{STAMP_ROOT_SECRET}, or set "
                "HIKYO_OPERATOR_ALLOW_STAMP_ROOT_RESET=true to accept one restart of every "
                "opted-in workload"
            )
        try:
            secret = cluster.create_secret(
                SecretObject(
                    namespace=namespace,
                    name=STAMP_ROOT_SECRET,
                    data={STAMP_ROOT_KEY: os.urandom(STAMP_ROOT_BYTES)},
                )
            )
        except AlreadyExists:  # another process created it first: use theirs
            secret = cluster.get_secret(namespace, STAMP_ROOT_SECRET)
        if secret is None:
            raise StampRootUnavailable("stamp root could not be created")
    root = secret.data.get(STAMP_ROOT_KEY, b"")
    if len(root) != STAMP_ROOT_BYTES:
        raise StampRootUnavailable(
            f"stamp root Secret {namespace}/{STAMP_ROOT_SECRET} holds {len(root)} bytes, not "
            f"{STAMP_ROOT_BYTES}; it is never replaced automatically"
        )
    return root
