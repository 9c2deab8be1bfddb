"""The operator image (Containerfile, tools/build-image.sh) run by podman with runc under the
pod security of S8.3, for the image end-to-end test: what it runs with, and what it reads back
(the container's main process as the host's /proc shows it, its logs, commands run inside)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 1500  # seconds: a cold build (debootstrap, PyPI downloads) is a few minutes
PODMAN_TIMEOUT = 180  # seconds for one podman call (pulling the archive into vfs storage)
RUNC = "/usr/sbin/runc"  # crun refuses this host's hybrid cgroup layout; runc does not
TOOLS = ("buildah", "podman", "debootstrap", RUNC)
DATA_DIR = "/var/lib/hikyo-operator"  # the image's HIKYO_OPERATOR_DATA_DIR (SQLite)
USER = "65532:65532"
# S8.3, as the chart's pod and container securityContext say it (runAsUser/runAsGroup 65532,
# readOnlyRootFilesystem, capabilities.drop [ALL], allowPrivilegeEscalation false), and the
# emptyDirs for /tmp and the SQLite directory as tmpfs, the only writable paths. The rlimits
# are the host's own: this sandbox cannot raise them (no CAP_SYS_RESOURCE); podman's would.
RESTRICTIONS = (
    "--read-only",
    "--read-only-tmpfs=false",  # podman would add writable /run and /var/tmp: S8.3 has neither
    "--user",
    USER,
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
    # U: the tmpfs belongs to the container's user, as the pod's emptyDir is writable by it
    # (this kernel ignores a tmpfs mode=, and podman 4.3 takes no uid=).
    "--tmpfs",
    "/tmp:rw,nosuid,nodev,size=64m,U",
    "--tmpfs",
    f"{DATA_DIR}:rw,nosuid,nodev,size=64m,U",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
)


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None and not Path(tool).exists()]


def build_image(out: Path) -> tuple[Path, str]:
    """tools/build-image.sh into ``out``: (the OCI archive, its manifest digest)."""
    done = subprocess.run(
        ["bash", str(REPO / "tools/build-image.sh")],
        env={**os.environ, "HIKYO_IMAGE_OUT": str(out)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    if done.returncode != 0:
        raise AssertionError(f"tools/build-image.sh failed:\n{done.stderr[-4000:]}")
    return out, done.stdout.split()[-1]


@dataclass
class Podman:
    """podman with its own vfs storage under ``state`` and Debian's runc."""

    state: Path
    base: list[str] = field(init=False)
    runroot: Path = field(init=False)

    def __post_init__(self) -> None:
        # podman refuses a run root longer than 50 characters: a short one of its own.
        self.runroot = Path(tempfile.mkdtemp(prefix="hikyo-podman-", dir="/tmp"))
        self.base = [
            "podman",
            "--storage-driver",
            "vfs",
            "--root",
            str(self.state / "storage"),
            "--runroot",
            str(self.runroot),
            "--tmpdir",
            str(self.state / "tmp"),
            "--runtime",
            RUNC,
            "--cgroup-manager",
            "cgroupfs",
            "--events-backend",
            "file",
        ]

    def __call__(self, *args: str, timeout: float = PODMAN_TIMEOUT, check: bool = True) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"podman {args[0]} failed ({done.returncode}): {done.stderr}")
        return done.stdout + done.stderr if not check else done.stdout

    def close(self) -> None:
        shutil.rmtree(self.runroot, ignore_errors=True)

    def load(self, archive: Path) -> str:
        """The archive's image, pulled into this storage; returns its image ID."""
        return self("pull", "--quiet", f"oci-archive:{archive}").split()[-1]


@dataclass
class Container:
    podman: Podman
    name: str

    def pid(self) -> int:
        """The container's main process as the host sees it."""
        return int(self.podman("inspect", "--format", "{{.State.Pid}}", self.name).strip())

    def running(self) -> bool:
        state = self.podman("inspect", "--format", "{{.State.Running}}", self.name, check=False)
        return state.strip().startswith("true")

    def status(self) -> dict[str, str]:
        """/proc/<pid>/status of the main process: Uid, Gid, CapEff, NoNewPrivs, VmRSS..."""
        lines = Path(f"/proc/{self.pid()}/status").read_text().splitlines()
        return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        """Runs ``code`` with the image's python inside the container (there is no shell)."""
        return subprocess.run(
            [*self.podman.base, "exec", self.name, "/usr/bin/python", "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def logs(self) -> str:
        return self.podman("logs", self.name, check=False)

    def remove(self) -> None:
        self.podman("rm", "--force", "--time", "10", self.name, check=False)


def run_operator(
    podman: Podman, image: str, name: str, env: dict[str, str], kubeconfig: Path
) -> Container:
    """The image's default command (run_operator) under S8.3, on the host network, with
    ``kubeconfig`` mounted read-only."""
    podman("rm", "--force", name, check=False)
    args = ["run", "--detach", "--name", name, "--network", "host", *RESTRICTIONS]
    args += ["--volume", f"{kubeconfig}:/etc/hikyo/kubeconfig:ro"]
    for key, value in sorted({**env, "KUBECONFIG": "/etc/hikyo/kubeconfig"}.items()):
        args += ["--env", f"{key}={value}"]
    podman(*args, image)
    return Container(podman, name)
