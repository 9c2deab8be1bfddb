"""The stamp root (S6.3): the 32 random bytes every stamp key derives from.

Read uncached before every fetch; created only when no CR holds a stamp yet (a fresh install) or
on explicit opt-in, since a new root restarts every opted-in workload once; never replaced when
its length is wrong.
"""

from __future__ import annotations

import os

from k8s.errors import AlreadyExists

from .ports import Cluster, SecretObject
from .settings import OperatorSettings
from .stamp import STAMP_ROOT_BYTES

STAMP_ROOT_SECRET = "hikyo-operator-stamp-root"
STAMP_ROOT_KEY = "root"


class StampRootUnavailable(Exception):
    """R12 failed; the message says what to do (it never holds the root)."""


def read_stamp_root(cluster: Cluster, settings: OperatorSettings) -> bytes:
    namespace = settings.operator_namespace
    secret = cluster.get_secret(namespace, STAMP_ROOT_SECRET)
    if secret is None:
        if not settings.allow_stamp_root_reset and cluster.any_hikyosecret_has_stamp():
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
