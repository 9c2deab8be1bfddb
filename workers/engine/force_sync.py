"""A forced full reconcile on request (issue: operations): ``hikyo.dev/force-sync: <any new
value>`` on a HikyoSecret asks for one cursor-less fetch. The handled value is recorded in
``status.lastForcedSync``, so each value runs exactly once, across restarts and failovers.

The annotation's value is an opaque request id chosen by the user (a timestamp, say); it is
never a secret. An annotation-only change does not touch the spec, so nothing else follows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FORCE_SYNC_ANNOTATION = "hikyo.dev/force-sync"
MAX_VALUE_CHARS = 253  # longer values are truncated in the record, never compared in full


def requested_value(cr: Mapping[str, Any] | None) -> str | None:
    """The force-sync value this CR asks for and has not been handled yet, else None."""
    metadata = (cr or {}).get("metadata") or {}
    value = ((metadata.get("annotations") or {}).get(FORCE_SYNC_ANNOTATION) or "").strip()
    if not value:
        return None
    value = value[:MAX_VALUE_CHARS]
    handled = (((cr or {}).get("status") or {}).get("lastForcedSync") or {}).get("value")
    return None if handled == value else value


def handled_record(value: str, reason: str, *, fetched: bool, wrote_secret: bool) -> dict[str, Any]:
    """``status.lastForcedSync``: which request was handled and what came of it."""
    return {"value": value, "reason": reason, "fetched": fetched, "wroteSecret": wrote_secret}
