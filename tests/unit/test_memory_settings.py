"""workers.memory (issue 13): the malloc arena cap is applied on glibc, and an explicit
MALLOC_ARENA_MAX in the environment is left to glibc. Each case in a fresh interpreter, since
the cap only matters before threads start."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

CODE = "from workers.memory import limit_malloc_arenas; print(limit_malloc_arenas())"


def _run(**env: str) -> str:
    environment = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run(
        [sys.executable, "-c", CODE],
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_the_arena_cap_is_applied_on_glibc_and_nothing_is_done_elsewhere():
    assert _run() == str(platform.libc_ver()[0] == "glibc")


def test_an_explicit_malloc_arena_max_is_left_to_glibc():
    assert _run(MALLOC_ARENA_MAX="4") == "False"
