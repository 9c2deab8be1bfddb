"""Finding the control-plane binaries: KUBEBUILDER_ASSETS, else the repo's build script."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO_ROOT / "tools" / "build-control-plane.sh"
NODE_BUILD_SCRIPT = REPO_ROOT / "tools" / "build-node.sh"
NODE_BINARIES = ("kubelet", "kube-scheduler", "kube-proxy")
COREDNS_BUILD_SCRIPT = REPO_ROOT / "tools" / "build-coredns.sh"

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


def _to_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def locate_binaries(
    build: bool = True, progress: Callable[[str], None] | None = _to_stderr
) -> Binaries:
    """Returns the binaries from KUBEBUILDER_ASSETS, or builds them (cached) with the script.

    The script's stderr (which component is building, packages compiled, elapsed time) is
    relayed line by line to ``progress`` as it arrives (default: this process's stderr;
    None: silent), so a cold build of many minutes is never a silent wait. The script
    prints one clear line last on stderr when Go, the module proxy or the build fails;
    that line becomes this exception's message.
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
    returncode, stdout, last_error = _run_build_script(progress)
    if returncode != 0:
        raise BinariesUnavailable(last_error or f"{BUILD_SCRIPT} failed")
    lines = stdout.strip().splitlines()
    if not lines:
        raise BinariesUnavailable(f"{BUILD_SCRIPT} printed no binaries directory")
    return _from_directory(Path(lines[-1]))  # the contract: the last stdout line


def _run_build_script(
    progress: Callable[[str], None] | None, script: Path = BUILD_SCRIPT
) -> tuple[int, str, str]:
    """Runs the script, relaying stderr live; returns (exit code, stdout, last stderr line)."""
    last = ""
    # stdout to a file, not a pipe: reading stderr to its end can then never deadlock on a
    # full stdout pipe.
    with tempfile.TemporaryFile("w+") as stdout:
        with subprocess.Popen(
            ["bash", str(script)], stdout=stdout, stderr=subprocess.PIPE, text=True
        ) as proc:
            assert proc.stderr is not None
            try:
                for raw in proc.stderr:
                    line = raw.rstrip("\n")
                    if line.strip():
                        last = line
                        if progress is not None:
                            progress(line)
            except BaseException:
                # Ctrl-C or a failing callback: stop the script (its traps end its ticker).
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                raise
        stdout.seek(0)
        return proc.returncode, stdout.read(), last


@dataclass(frozen=True)
class NodeBinaries:
    kubelet: Path
    kube_scheduler: Path
    kube_proxy: Path


def locate_node_binaries(progress: Callable[[str], None] | None = _to_stderr) -> NodeBinaries:
    """kubelet, kube-scheduler and kube-proxy from HIKYO_NODE_BIN, else built (cached) by
    tools/build-node.sh from the control plane's Kubernetes version."""
    directory = os.environ.get("HIKYO_NODE_BIN")
    if not directory:
        if not NODE_BUILD_SCRIPT.is_file():
            raise BinariesUnavailable(
                f"{NODE_BUILD_SCRIPT} not found (not a source checkout); set HIKYO_NODE_BIN to a "
                f"directory with {', '.join(NODE_BINARIES)}"
            )
        returncode, stdout, last_error = _run_build_script(progress, NODE_BUILD_SCRIPT)
        lines = stdout.strip().splitlines()
        if returncode != 0 or not lines:
            raise BinariesUnavailable(last_error or f"{NODE_BUILD_SCRIPT} failed")
        directory = lines[-1]
    paths = {name: Path(directory) / name for name in NODE_BINARIES}
    for path in paths.values():
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BinariesUnavailable(f"{path} is missing or not executable")
    return NodeBinaries(**{name.replace("-", "_"): path for name, path in paths.items()})


def locate_coredns(progress: Callable[[str], None] | None = _to_stderr) -> Path:
    """CoreDNS, the node's cluster DNS: COREDNS, else built (cached) by tools/build-coredns.sh."""
    named = os.environ.get("COREDNS")
    if named:
        path = Path(named)
    else:
        if not COREDNS_BUILD_SCRIPT.is_file():
            raise BinariesUnavailable(
                f"{COREDNS_BUILD_SCRIPT} not found (not a source checkout); set COREDNS"
            )
        returncode, stdout, last_error = _run_build_script(progress, COREDNS_BUILD_SCRIPT)
        lines = stdout.strip().splitlines()
        if returncode != 0 or not lines:
            raise BinariesUnavailable(last_error or f"{COREDNS_BUILD_SCRIPT} failed")
        path = Path(lines[-1])
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BinariesUnavailable(f"{path} is missing or not executable")
    return path
