"""Docker Compose's .env reader for the S11.3 dotenv tests: DOTENV_READER names a built
tools/dotenv-reader, else tools/build-dotenv-reader.sh builds it (a warm cache answers at once).
Missing, the tests that read with it fail, unless HIKYO_SKIP_DOTENV_READER=1 says to skip them."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.support.helm import REPO_ROOT, built_binary

BUILD_SCRIPT = REPO_ROOT / "tools" / "build-dotenv-reader.sh"
READER_TIMEOUT_SECONDS = 60

# Compose looks ${NAME} and $NAME up in its environment: one where nothing is set, and one where
# the usual names and the single letters the tests draw are set, so a value that reads back
# exactly under both cannot depend on the environment.
NO_VARIABLES: Mapping[str, str] = {}
SOME_VARIABLES: Mapping[str, str] = {
    "HOME": "/home/reader",
    "PATH": "/usr/bin:/bin",
    "USER": "reader",
    "a": "set-a",
    "Z": "set-Z",
    "b": "set-b",
    "x": "set-x",
}


class ComposeReading(NamedTuple):
    """One file as Compose reads it: its values, or Compose's error (a refusal of the file)."""

    values: dict[str, str] | None
    error: str | None


@functools.cache
def _built() -> str:
    return built_binary(BUILD_SCRIPT, " (HIKYO_SKIP_DOTENV_READER=1 skips these tests)")


def dotenv_reader_binary() -> str:
    if os.environ.get("HIKYO_SKIP_DOTENV_READER") == "1":
        pytest.skip("HIKYO_SKIP_DOTENV_READER=1: the Docker Compose dotenv reads are skipped")
    return _built()


def compose_read(paths: Sequence[Path], environment: Mapping[str, str]) -> list[ComposeReading]:
    """Every file in ``paths`` as Compose reads it with ``environment``, in one process."""
    if not paths:
        return []
    done = subprocess.run(
        [dotenv_reader_binary(), *map(str, paths)],
        capture_output=True,
        text=True,
        env=dict(environment),  # exactly these variables: nothing leaks in from the test's own
        timeout=READER_TIMEOUT_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")[:-1]  # not splitlines: values may hold U+0085 or U+2028
    assert len(lines) == len(paths), done.stdout
    readings = []
    for line in lines:
        parsed = json.loads(line)
        readings.append(ComposeReading(parsed.get("values"), parsed.get("error")))
    return readings
