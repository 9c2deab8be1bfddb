"""Message helpers (S5.6): key names at most 10, sorted, then "… and N more"; never values."""

from __future__ import annotations

from collections.abc import Iterable

MAX_NAMED = 10


def key_list(names: Iterable[str]) -> str:
    ordered = sorted(set(names))
    shown = ", ".join(ordered[:MAX_NAMED])
    rest = len(ordered) - MAX_NAMED
    return f"{shown} … and {rest} more" if rest > 0 else shown
