"""A real node beside the local control plane: containerd (Debian's, runc underneath, the
bridge CNI plugin), kubelet, kube-scheduler and kube-proxy (built from the same Kubernetes
module as the apiserver by tools/build-node.sh).

No image is pulled: the pause image, the operator image and the tests' application image are
imported into containerd from local OCI archives. This machine runs cgroup v1, which a 1.35+
kubelet refuses unless its configuration says ``failCgroupV1: false`` (docs/development.md).

``teardown`` leaves nothing behind: every container and sandbox is killed and removed, then
the kubelet's mounts, the pods' network namespaces, kube-proxy's rules and the bridge go.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from .node_layout import BRIDGE, NODE_IP, NODE_NAME, POD_SUBNET
from .pki import Pki

CONTAINERD = "/usr/bin/containerd"
CTR = "/usr/bin/ctr"
RUNC = "/usr/sbin/runc"
CNI_BIN_DIR = "/usr/lib/cni"
PAUSE_IMAGE = "localhost/hikyo-pause:local"
APP_IMAGE = "localhost/hikyo-node-app:local"  # tools/node-images/app
CTR_TIMEOUT_SECONDS = 120
HOST_COMMAND_TIMEOUT_SECONDS = 30
# The kubelet's own cgroup trees under each cgroup v1 controller (cgroupfs driver).
KUBELET_CGROUPS = ("kubepods",)


class NodeFailed(RuntimeError):
    """The node could not be set up; the message says which step and why, in one line."""


@dataclass(frozen=True)
class NodePaths:
    root: Path

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd-state"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd-state" / "containerd.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"


def host_command(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """One host tool (ip, sysctl, ctr, umount), bounded in time; a failure is one line."""
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=HOST_COMMAND_TIMEOUT_SECONDS
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NodeFailed(f"{' '.join(argv[:3])}: {error}") from None
    if check and result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise NodeFailed(f"{' '.join(argv[:3])} failed: {last[0]}")
    return result


def prepare_host() -> None:
    """Forwarding on, bridged traffic through iptables (kube-proxy's rules), and the pods'
    bridge with the node's address on it (the kubelet checks its node IP is a host address)."""
    for key in ("net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"):
        path = Path("/proc/sys") / key
        if path.exists():
            path.write_text("1\n")
    if host_command(["ip", "link", "show", BRIDGE], check=False).returncode != 0:
        host_command(["ip", "link", "add", BRIDGE, "type", "bridge"])
    addresses = host_command(["ip", "-o", "-4", "addr", "show", "dev", BRIDGE]).stdout
    if f" {NODE_IP}/" not in addresses:
        prefix = POD_SUBNET.split("/")[1]
        host_command(["ip", "addr", "add", f"{NODE_IP}/{prefix}", "dev", BRIDGE])
    host_command(["ip", "link", "set", BRIDGE, "up"])


def containerd_config(paths: NodePaths, metrics_port: int) -> str:
    """containerd 1.6's config (version 2): the CRI plugin on runc with cgroupfs, the
    overlayfs snapshotter, the local pause image and our CNI config."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join(
        [
            "version = 2",
            f'root = "{paths.containerd_root}"',
            f'state = "{paths.containerd_state}"',
            "[grpc]",
            f'  address = "{paths.containerd_socket}"',
            "[metrics]",
            f'  address = "127.0.0.1:{metrics_port}"',
            f"[{cri}]",
            f'  sandbox_image = "{PAUSE_IMAGE}"',
            "  enable_unprivileged_ports = false",
            # Lowering a process's oom_score_adj needs CAP_SYS_RESOURCE, which this machine's
            # root lacks: runc fails on the sandbox's -998. Clamp to containerd's own instead.
            "  restrict_oom_score_adj = true",
            f"[{cri}.containerd]",
            # overlayfs, not native: native copies an image's whole tree for every container it
            # starts (containerd's CPU over the node tests: 78 s with it, 16 with overlayfs).
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            f'  BinaryName = "{RUNC}"',
            "  SystemdCgroup = false",
            f"[{cri}.cni]",
            f'  bin_dir = "{CNI_BIN_DIR}"',
            f'  conf_dir = "{paths.cni_conf_dir}"',
            "",
        ]
    )


def cni_config(paths: NodePaths) -> dict:
    return {
        "cniVersion": "1.0.0",
        "name": "hikyo-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET, "gateway": NODE_IP}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(paths.root / "cni-ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def corefile(kubeconfig: Path, health_port: int) -> str:
    """Cluster DNS on the node's address: Services and pods of cluster.local from the
    apiserver, every other name forwarded to the host's resolver."""
    return "\n".join(
        [
            ".:53 {",
            f"    bind {NODE_IP}",
            "    errors",
            f"    health 127.0.0.1:{health_port}",
            "    kubernetes cluster.local in-addr.arpa ip6.arpa {",
            f"        kubeconfig {kubeconfig}",
            "        pods insecure",
            "        fallthrough in-addr.arpa ip6.arpa",
            "    }",
            "    forward . /etc/resolv.conf",
            "    cache 30",
            "    loop",
            "}",
            "",
        ]
    )


def kubelet_config(
    paths: NodePaths,
    pki: Pki,
    port: int,
    healthz_port: int,
    cluster_dns: bool = False,
    sync_frequency: str | None = None,
) -> dict:
    """``sync_frequency``: how often the kubelet syncs each pod (and so refreshes its mounted
    Secrets); None leaves the kubelet's default, a minute."""
    sync = {"syncFrequency": sync_frequency} if sync_frequency else {}
    return sync | {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # cgroup v1 here: a 1.35+ kubelet starts on it only when told to (KEP-5573).
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "address": NODE_IP,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(pki.kubelet_serving_cert),
        "tlsPrivateKeyFile": str(pki.kubelet_serving_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki.client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": "cluster.local",
        "clusterDNS": [NODE_IP] if cluster_dns else [],  # CoreDNS on the node's address
        "resolvConf": "/etc/resolv.conf",
        # A development machine's disk is often fuller than a node's: evict only when nearly
        # out of room, and never garbage-collect the imported images (none can be pulled).
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
    }


def node_kubeconfig_user(pki: Pki, component: str) -> tuple[Path, Path, str]:
    """The client certificate, key and user name each node component signs in with."""
    return {
        "kubelet": (pki.node_cert, pki.node_key, f"system:node:{NODE_NAME}"),
        "kube-scheduler": (pki.scheduler_cert, pki.scheduler_key, "system:kube-scheduler"),
        "kube-proxy": (pki.proxy_cert, pki.proxy_key, "system:kube-proxy"),
    }[component]


def ctr(paths: NodePaths, *args: str, timeout: float = CTR_TIMEOUT_SECONDS) -> str:
    argv = [CTR, "--address", str(paths.containerd_socket), "--namespace", "k8s.io", *args]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NodeFailed(f"ctr {' '.join(args[:2])} did not finish in {timeout:.0f} s") from None
    if result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise NodeFailed(f"ctr {' '.join(args[:2])} failed: {last[0]}")
    return result.stdout


def import_image(paths: NodePaths, archive: Path, name: str, digest: str | None = None) -> None:
    """An OCI archive into the node's containerd under ``name`` (and ``repo@digest``, which
    is how a chart that pins a digest names it), unpacked for the overlayfs snapshotter."""
    if not archive.is_file():
        raise NodeFailed(f"image archive {archive} is missing (see docs/development.md, A node)")
    before = set(_image_names(paths))
    ctr(paths, "images", "import", "--snapshotter", "overlayfs", "--base-name", name.split(":")[0],
        str(archive))  # fmt: skip
    imported = [n for n in _image_names(paths) if n not in before] or [name]
    if name not in _image_names(paths):
        ctr(paths, "images", "tag", "--force", imported[0], name)
    if digest:
        repository = name.rsplit(":", 1)[0]
        ctr(paths, "images", "tag", "--force", name, f"{repository}@{digest}")


def _image_names(paths: NodePaths) -> list[str]:
    return ctr(paths, "images", "list", "--quiet").split()


def wait_until(what: str, ready: Callable[[], bool], timeout: float, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise NodeFailed(f"{what} not within {timeout:.0f} s")
        time.sleep(every)


def teardown(paths: NodePaths) -> list[str]:
    """What a node leaves behind once its processes are stopped is removed, containerd's
    containers first (while it still runs, the caller stops it afterwards)."""
    removed: list[str] = []
    if paths.containerd_socket.exists():
        with contextlib.suppress(NodeFailed):
            for container in ctr(paths, "containers", "list", "--quiet", timeout=30).split():
                with contextlib.suppress(NodeFailed):
                    ctr(paths, "tasks", "kill", "--signal", "SIGKILL", container, timeout=15)
                with contextlib.suppress(NodeFailed):
                    ctr(paths, "tasks", "delete", "--force", container, timeout=15)
                with contextlib.suppress(NodeFailed):
                    ctr(paths, "containers", "delete", container, timeout=15)
                removed.append(f"container {container[:12]}")
    return removed


def teardown_host(paths: NodePaths, kube_proxy: Path | None) -> list[str]:
    """After every node process is gone: mounts under the node's directory, the pods'
    network namespaces, kube-proxy's iptables rules, the bridge and the kubelet's cgroups."""
    removed: list[str] = []
    mounts = [
        line.split()[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if line.split()[1].startswith(str(paths.root) + "/")
    ]
    for mount in sorted(mounts, key=len, reverse=True):
        if host_command(["umount", "-l", mount], check=False).returncode == 0:
            removed.append("mount")
    netns = Path("/var/run/netns")
    for namespace in sorted(netns.glob("cni-*")) if netns.is_dir() else []:
        if host_command(["ip", "netns", "delete", namespace.name], check=False).returncode == 0:
            removed.append(f"netns {namespace.name}")
    if kube_proxy is not None and kube_proxy.exists():
        host_command([str(kube_proxy), "--cleanup"], check=False)
        removed.append("kube-proxy rules")
    removed += remove_kube_chains()
    if host_command(["ip", "link", "show", BRIDGE], check=False).returncode == 0:
        host_command(["ip", "link", "delete", BRIDGE], check=False)
        removed.append(f"bridge {BRIDGE}")
    for controller in Path("/sys/fs/cgroup").iterdir():
        for tree in KUBELET_CGROUPS:
            if (controller / tree).is_dir():
                _remove_cgroup_tree(controller / tree)
    return removed


def remove_kube_chains() -> list[str]:
    """The kubelet's own chains (KUBE-FIREWALL, the canaries), which kube-proxy --cleanup
    leaves: first every rule that jumps to one, then the chains."""
    removed = []
    for tool in ("iptables", "ip6tables"):
        if not shutil.which(tool):
            continue
        for table in ("filter", "nat", "mangle"):
            listed = host_command([tool, "-w", "5", "-t", table, "-S"], check=False).stdout
            rules = [line.split() for line in listed.splitlines()]
            for rule in rules:
                if (
                    rule[0] == "-A"
                    and not rule[1].startswith("KUBE-")
                    and jumps_to_a_kube_chain(rule)
                ):
                    host_command([tool, "-w", "5", "-t", table, "-D", *rule[1:]], check=False)
            chains = [rule[1] for rule in rules if rule[0] == "-N" and rule[1].startswith("KUBE-")]
            for flag in ("-F", "-X"):
                for chain in chains:
                    host_command([tool, "-w", "5", "-t", table, flag, chain], check=False)
            removed += [f"{tool} {table} {chain}" for chain in chains]
    return removed


def jumps_to_a_kube_chain(rule: list[str]) -> bool:
    return any(
        flag in ("-j", "-g") and target.startswith("KUBE-")
        for flag, target in itertools.pairwise(rule)
    )


def _remove_cgroup_tree(top: Path) -> None:
    """rmdir from the leaves up; a cgroup with a live process stays (and says so by staying)."""
    for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            directory.rmdir()
    with contextlib.suppress(OSError):
        top.rmdir()


def write_node_files(
    paths: NodePaths,
    pki: Pki,
    ports: dict[str, int],
    cluster_dns: bool = False,
    sync_frequency: str | None = None,
) -> dict[str, Path]:
    """The configuration files of containerd, the CNI plugin and the kubelet."""
    for directory in (paths.root, paths.cni_conf_dir, paths.kubelet_dir):
        directory.mkdir(parents=True, exist_ok=True)
    files = {
        "containerd": paths.root / "containerd.toml",
        "cni": paths.cni_conf_dir / "10-hikyo.conflist",
        "kubelet": paths.root / "kubelet.yaml",
    }
    files["containerd"].write_text(containerd_config(paths, ports["containerd"]))
    files["cni"].write_text(json.dumps(cni_config(paths), indent=2))
    config = kubelet_config(
        paths, pki, ports["kubelet"], ports["kubelet-healthz"], cluster_dns, sync_frequency
    )
    files["kubelet"].write_text(yaml.safe_dump(config, sort_keys=False))
    return files


def require_host_tools() -> None:
    missing = [tool for tool in (CONTAINERD, CTR, RUNC) if not os.access(tool, os.X_OK)]
    if not Path(CNI_BIN_DIR, "bridge").exists():
        missing.append(f"{CNI_BIN_DIR}/bridge")
    if not shutil.which("conntrack"):
        missing.append("conntrack")
    if missing:
        raise NodeFailed(
            f"the node needs {', '.join(missing)}: apt-get install containerd runc "
            "containernetworking-plugins conntrack"
        )
    if os.geteuid() != 0:
        raise NodeFailed("the node runs containers and sets up a bridge: run it as root")
