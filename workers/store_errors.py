"""The keyed-queue store's errors, without importing redis where no Redis is used.

Embedded mode keeps its queue in memory, so no redis exception can arise there, and importing
the redis package only to name ``RedisError`` costs the embedded operator ~7 MiB (issue 13,
S9.6). Scaled mode imports redis with its ``RedisQueue``; from then on the tuple holds it.
"""

from __future__ import annotations

import sys


def store_errors() -> tuple[type[BaseException], ...]:
    """``(redis.exceptions.RedisError,)`` once redis is loaded, else ``()`` (matches nothing)."""
    exceptions = sys.modules.get("redis.exceptions")
    return (exceptions.RedisError,) if exceptions is not None else ()
