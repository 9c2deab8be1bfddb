"""Finding the control-plane binaries: KUBEBUILDER_ASSETS, else the repo's build script."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tools" / "build-control-plane.sh"

# envtest's per-binary overrides, honoured like controller-runtime does.
_OVERRIDES = {
    "etcd": "TEST_ASSET_ETCD",
    "kube-apiserver": "TEST_ASSET_KUBE_APISERVER",
    "kube-controller-manager": "TEST_ASSET_KUBE_CONTROLLER_MANAGER",
    "kubectl": "TEST_ASSET_KUBECTL",
}


class BinariesUnavailable(RuntimeError):
    """The control-plane binaries are neither prebuilt nor buildable here."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kubectl: Path


def _from_directory(directory: Path) -> Binaries:
    paths = {}
    for name, override in _OVERRIDES.items():
        path = Path(os.environ[override]) if os.environ.get(override) else directory / name
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BinariesUnavailable(f"{path} is missing or not executable")
        paths[name.replace("-", "_")] = path
    return Binaries(**paths)


def locate_binaries(build: bool = True) -> Binaries:
    """Returns the binaries from KUBEBUILDER_ASSETS, or builds them (cached) with the script.

    The build script prints one clear line on stderr when Go, the module proxy or the build
    fails; that line becomes this exception's message.
    """
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        return _from_directory(Path(assets))
    if not build:
        raise BinariesUnavailable("KUBEBUILDER_ASSETS is not set and building is disabled")
    if not BUILD_SCRIPT.is_file():
        raise BinariesUnavailable(
            f"{BUILD_SCRIPT} not found (not a source checkout); set KUBEBUILDER_ASSETS to a "
            "directory with etcd, kube-apiserver, kube-controller-manager and kubectl"
        )
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        raise BinariesUnavailable(lines[-1] if lines else f"{BUILD_SCRIPT} failed")
    return _from_directory(Path(result.stdout.strip().splitlines()[-1]))
