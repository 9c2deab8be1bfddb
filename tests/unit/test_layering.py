"""design.md: the pure engine imports neither Django, Celery nor the kubernetes client."""

import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "workers" / "engine"
MODULES = sorted(f"workers.engine.{p.stem}" for p in ENGINE.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", MODULES)
def test_engine_module_stays_pure(module):
    probe = (
        f"import sys, {module}; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'celery', 'kubernetes'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=ENGINE.parents[1],
    )
    assert result.stdout.strip() == "[]"
