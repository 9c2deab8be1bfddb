"""design.md: the pure engine imports neither Django, Celery, the kubernetes client nor an HTTP
client; the ``hikyo`` adapter reaches into the engine only for its ports and plain types."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.support.django_scripts import run_python

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


def _run_python(probe: str, env: dict[str, str] | None = None) -> str:
    """What ``probe`` prints, run by this interpreter in a fresh process at the repository."""
    result = run_python(probe, env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


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
    imported, filtered = _run_python(probe).splitlines()
    assert set(ast.literal_eval(imported)) <= ENGINE_FOR_ADAPTERS, imported
    assert filtered == "True"


def test_every_worker_side_module_is_under_the_leader_split_contract():
    """The contract that keeps the worker side from importing ``workers.leader`` names its
    modules one by one: a new module in ``workers/`` must be named there too, or it could
    reach into the leader's room unnoticed."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    split = [c for c in contracts["contracts"] if c.get("forbidden_modules") == ["workers.leader"]]
    assert len(split) == 1
    here = {p.stem for p in (ROOT / "workers").glob("*.py") if p.stem != "__init__"}
    here |= {p.parent.name for p in (ROOT / "workers").glob("*/__init__.py")}
    expected = {f"workers.{name}" for name in here - {"leader"}}
    assert set(split[0]["source_modules"]) == expected


def test_the_embedded_operator_imports_no_scaled_mode_client(tmp_path):
    """Issue 13: embedded mode (no Redis URL) never imports redis, celery or kombu: each costs
    every start CPU and the pod memory under the chart's 128 MiB. The dashboard, served in
    that process, once pulled redis in through a URL helper of the scaled mode's module."""
    probe = "\n".join(
        [
            "import sys, django",
            "django.setup()",
            "import controlplane.observations.management.commands.run_operator",
            "import controlplane.observations.admin, controlplane.urls, workers.runtime",
            "print(sorted(m for m in sys.modules if m.split('.')[0] in"
            " ('redis', 'celery', 'kombu')))",
        ]
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "HIKYO_OPERATOR_DATA_DIR": str(tmp_path),
        "POD_NAMESPACE": "hikyo-system",
    }
    assert _run_python(probe, env).strip() == "[]"
