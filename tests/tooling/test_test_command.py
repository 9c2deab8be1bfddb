"""tools/test.sh (the README's test command) prints each set-up step as it starts, with the
seconds since it began, and uses the binaries named by KUBEBUILDER_ASSETS, HELM, PROMTOOL and
DOTENV_READER as they are. Run with `--version`, its pytest prints its version and stops."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "test.sh"
SET_UP_STEPS = ["Local control plane", "Helm", "promtool", "dotenv-reader", "Tests"]


def test_each_step_is_printed_and_a_set_promtool_is_the_one_used(tmp_path):
    promtool = tmp_path / "promtool"
    promtool.write_text("#!/bin/sh\necho 'promtool, version 0.0.0-stand-in'\n")
    promtool.chmod(0o755)
    env = {
        **os.environ,
        "HIKYO_SKIP_SETUP": "1",  # no apt-get, no pip
        "KUBEBUILDER_ASSETS": str(tmp_path),
        "HELM": str(tmp_path / "helm"),
        "PROMTOOL": str(promtool),
        "DOTENV_READER": str(tmp_path / "dotenv-reader"),
    }
    result = subprocess.run(
        ["bash", str(SCRIPT), "--version"], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    steps = re.findall(r"^=== (.+) \(at \d+s\)$", result.stdout, flags=re.MULTILINE)
    assert steps == SET_UP_STEPS
    assert f"promtool: {promtool} (promtool, version 0.0.0-stand-in)" in result.stdout
    assert "pytest" in result.stdout.splitlines()[-1]
