"""The stamp root (S6.3): the 32 random bytes every stamp key derives from.

Read uncached before every fetch (``observe``); created only when no CR holds a stamp yet (a
fresh install) or on explicit opt-in, since a new root restarts every opted-in workload once
(``decide``, R12); never replaced when its length is wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

STAMP_ROOT_SECRET = "hikyo-operator-stamp-root"
STAMP_ROOT_KEY = "root"


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
