"""Process-wide memory settings of the embedded operator (issue 13; S9.6: the pod <= 128 MiB).

glibc gives each thread that allocates its own malloc arena (up to 8 per core), and memory freed
in one arena is not reused by the others: with ~25 threads (watches, reconciles, reports, the
WSGI server's pool) the operator's heap fragments into many partly empty arenas. Two arenas
are plenty for threads that mostly wait on sockets. ``mallopt(M_ARENA_MAX)`` is honoured only
for arenas created after it, so it must run before the first thread starts; an explicit
``MALLOC_ARENA_MAX`` in the environment (read by glibc itself at start-up) always wins.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's malloc.h
DEFAULT_ARENAS = 2


def limit_malloc_arenas(arenas: int = DEFAULT_ARENAS) -> bool:
    """Caps glibc's malloc arenas; False (and nothing changed) off glibc or when the
    environment already says (MALLOC_ARENA_MAX)."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): leave it
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    done = mallopt(M_ARENA_MAX, arenas) == 1
    if not done:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", arenas)
    return done


TRACEMALLOC_DIR = "HIKYO_TRACEMALLOC_DIR"  # development only: where SIGUSR2 writes snapshots


def tracemalloc_on_signal() -> bool:
    """Development aid (issue 52): with ``HIKYO_TRACEMALLOC_DIR`` set, trace allocations from
    start and write a snapshot there on each SIGUSR2 (``snapshot-<n>.pickle``, compared with
    ``tracemalloc.Snapshot.load(...).compare_to``). Snapshots hold allocation sites and sizes,
    never object contents. Off (False) unless the variable is set."""
    directory = os.environ.get(TRACEMALLOC_DIR)
    if not directory:
        return False
    import itertools
    import signal
    import tracemalloc
    from pathlib import Path

    tracemalloc.start(12)
    numbers = itertools.count(1)

    def dump(signum: int, frame: object) -> None:
        path = Path(directory) / f"snapshot-{next(numbers)}.pickle"
        tracemalloc.take_snapshot().dump(str(path))

    signal.signal(signal.SIGUSR2, dump)
    return True
