"""design.md: the pure engine imports neither Django, Celery, the kubernetes client nor an HTTP
client; the ``hikyo`` adapter reaches into the engine only for its ports and plain types."""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "workers" / "engine"


def test_layer_contracts_hold():
    """The import-linter contracts in pyproject.toml (engine pure, adapters through the ports,
    no cycles) hold; CI runs ``lint-imports`` too, this keeps ``pytest`` alone honest."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command as c; c()",
            "--no-cache",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_no_engine_module_names_an_effectful_library():
    """Issue acceptance: ``grep -rlE "import (requests|kubernetes|urllib3|django|celery)"``."""
    pattern = re.compile(r"import (requests|kubernetes|urllib3|django|celery)")
    offenders = [p.name for p in ENGINE.glob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


# What the adapters may import of the engine (workers.engine.ports says so).
ENGINE_FOR_ADAPTERS = {
    "workers",
    "workers.engine",
    "workers.engine.errors",
    "workers.engine.fetched",
    "workers.engine.ports",
}


def test_hikyo_adapter_uses_only_the_engine_ports():
    """The adapter sees the engine's ports and plain types only; importing it installs the
    query-string log filter (S0.4.2) in whatever process makes Hikyo requests."""
    probe = "\n".join(
        [
            "import logging, sys",
            "import hikyo.clients",
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('workers', 'k8s')))",
            "names = ('urllib3.connectionpool', 'urllib3.util.retry', 'requests')",
            "kinds = [{type(f).__name__ for f in logging.getLogger(n).filters} for n in names]",
            "print(all('RedactQueryStrings' in k for k in kinds))",
        ]
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    imported, filtered = result.stdout.splitlines()
    assert set(ast.literal_eval(imported)) <= ENGINE_FOR_ADAPTERS, imported
    assert filtered == "True"
