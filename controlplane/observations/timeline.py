"""The detail page's timeline folds identical consecutive entries into one (issue 35 item 3):
one refusal repeated by eight runs reads "x8, 21:30:05-21:37:12" (with the
multiplication sign and an en dash). Pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .times import clock

TIMES, TO = "\u00d7", "\u2013"  # the multiplication sign and the en dash
# What must be equal for two entries to be "the same": all but when, and how long it took.
SAME = ("kind", "what", "lifecycle", "fetched", "wrote", "message")


def collapse(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries newest first → runs of equal entries, each the newest of its run with ``count``,
    ``first_at`` (the oldest's time) and ``span`` (``xN, first-last``, empty for one)."""
    folded: list[dict[str, Any]] = []
    for entry in entries:
        last = folded[-1] if folded else None
        if last is not None and all(last.get(k) == entry.get(k) for k in SAME):
            last["count"] += 1
            last["first_at"] = entry["at"]
            last["span"] = f"{TIMES}{last['count']}, {clock(entry['at'])}{TO}{clock(last['at'])}"
            continue
        folded.append({**entry, "count": 1, "first_at": entry["at"], "span": ""})
    return folded
