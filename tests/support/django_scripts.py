"""A Python script run in a child process at the repository; one under Django bound to a fresh
PostgreSQL database of the session's server (the test session's own Django is bound to its
test database)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_python(
    script: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -c script`` by this interpreter at the repository, its output as text."""
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_on_a_fresh_database(
    postgres_server: Any, tmp_path: Path, script: str, prefix: str
) -> subprocess.CompletedProcess[str]:
    """Creates database ``<prefix>_<random>`` and runs ``script`` with Django set up on it."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with postgres_server.connect("postgres") as connection:
        connection.execute(f"CREATE DATABASE {name} OWNER {postgres_server.ROLE}")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "HIKYO_OPERATOR_DATABASE_URL": postgres_server.url.rsplit("/", 1)[0] + f"/{name}",
        "HIKYO_OPERATOR_DATA_DIR": str(tmp_path),
        "PYTHONPATH": str(REPO),
    }
    return run_python(script, env, timeout=90)
