"""The local control plane with a node (``python -m localcluster up --node``): containerd,
kube-scheduler, kubelet and kube-proxy started after the control plane, the local images
imported, and the node Ready before ``start`` returns (localcluster/node.py has the parts)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from .binaries import Binaries, NodeBinaries
from .cluster import (
    STATE_FILE,
    Component,
    LocalControlPlane,
    _http_ok,
    _wait_until,
    stop_from_state,
    write_kubeconfig,
)
from .node import (
    APP_IMAGE,
    CONTAINERD,
    PAUSE_IMAGE,
    NodeFailed,
    NodePaths,
    corefile,
    import_image,
    node_kubeconfig_user,
    prepare_host,
    require_host_tools,
    teardown,
    teardown_host,
    wait_until,
    write_node_files,
)
from .node_layout import NODE_IP, NODE_NAME, POD_SUBNET
from .ports import free_port

NODE_READY_TIMEOUT_SECONDS = 120.0
NODE_COMPONENTS = ("containerd", "coredns", "kube-scheduler", "kubelet", "kube-proxy")
# Beside CONTROLLERS: the node's not-ready taint is lifted once it is Ready (and set again when
# its kubelet stops), Services need EndpointSlices (kube-proxy reads them), drains need the
# PodDisruptionBudget status, and finished pods are collected.
NODE_CONTROLLERS = (
    "node-lifecycle-controller",
    "endpointslice-controller",
    "disruption-controller",
    "pod-garbage-collector-controller",
)


class NodeCluster(LocalControlPlane):
    serves_a_node = True
    node_controllers = NODE_CONTROLLERS

    def __init__(
        self,
        binaries: Binaries,
        node_binaries: NodeBinaries,
        state_dir: Path,
        images: dict[str, tuple[Path, str | None]],
        apiserver_port: int | None = None,
        coredns: Path | None = None,
        kubelet_sync: str | None = None,
    ) -> None:
        """``images``: name → (OCI archive, the digest a chart pins it by, or None);
        ``coredns``: the cluster DNS the pods get (none without it); ``kubelet_sync``: the
        kubelet's syncFrequency (None: its default)."""
        super().__init__(binaries, state_dir, apiserver_port)
        self.coredns = coredns
        self.kubelet_sync = kubelet_sync
        self.node_binaries = node_binaries
        self.node_paths = NodePaths(self.state_dir / "node")
        self.images = images

    def start(self) -> None:
        require_host_tools()
        prepare_host()
        super().start()
        try:
            self._start_node()
        except BaseException:
            self.stop()
            raise
        self._save_state()

    def stop(self) -> None:
        node = [c for c in self.components if c.name in NODE_COMPONENTS]
        for component in reversed(node):
            if component.name != "containerd":
                component.stop()
        teardown(self.node_paths)
        for component in node:
            if component.name == "containerd":
                component.stop()
        self.components = [c for c in self.components if c.name not in NODE_COMPONENTS]
        super().stop()
        teardown_host(self.node_paths, self.node_binaries.kube_proxy)

    def _start_node(self) -> None:
        assert self.pki is not None
        names = ("containerd", "kubelet", "kubelet-healthz", "coredns-health")
        ports = {name: free_port() for name in names}
        files = write_node_files(
            self.node_paths, self.pki, ports, self.coredns is not None, self.kubelet_sync
        )
        containerd = Component(
            "containerd",
            [CONTAINERD, "--config", str(files["containerd"])],
            self.logs_dir / "containerd.log",
            ports["containerd"],
        )
        self._launch(containerd)
        socket = self.node_paths.containerd_socket
        _wait_until(containerd, socket.exists)
        for name, (archive, digest) in self.images.items():
            import_image(self.node_paths, archive, name, digest)
        if self.coredns is not None:
            dns = self._coredns(ports["coredns-health"])
            self._launch(dns)
            _wait_until(dns, lambda: _http_ok(f"http://127.0.0.1:{dns.port}/health"))
        for component in (self._scheduler(), self._kubelet(files, ports), self._proxy()):
            self._launch(component)
        kubelet = next(c for c in self.components if c.name == "kubelet")
        healthz = f"http://127.0.0.1:{ports['kubelet-healthz']}/healthz"
        _wait_until(kubelet, lambda: _http_ok(healthz))
        wait_until("node Ready", self._node_ready, NODE_READY_TIMEOUT_SECONDS)

    def _node_ready(self) -> bool:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        try:
            node = client.CoreV1Api(api).read_node(NODE_NAME, _request_timeout=10)
        except Exception:
            return False
        finally:
            api.close()
        conditions = {c.type: c.status for c in (node.status.conditions or [])}
        return conditions.get("Ready") == "True"

    def _component_kubeconfig(self, component: str) -> Path:
        assert self.pki is not None
        cert, key, user = node_kubeconfig_user(self.pki, component)
        path = self.node_paths.root / f"{component}.kubeconfig"
        write_kubeconfig(path, self.server, self.pki.serving_ca, cert, key, user=user)
        return path

    def _coredns(self, health_port: int) -> Component:
        assert self.coredns is not None
        config = self.node_paths.root / "Corefile"
        config.write_text(corefile(self.kubeconfig, health_port))
        return Component(
            "coredns",
            [str(self.coredns), "-conf", str(config)],
            self.logs_dir / "coredns.log",
            health_port,
        )

    def _scheduler(self) -> Component:
        kubeconfig = self._component_kubeconfig("kube-scheduler")
        port = free_port()
        return Component(
            "kube-scheduler",
            [
                str(self.node_binaries.kube_scheduler),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--v=1",
            ],
            self.logs_dir / "kube-scheduler.log",
            port,
        )

    def _kubelet(self, files: dict[str, Path], ports: dict[str, int]) -> Component:
        return Component(
            "kubelet",
            [
                str(self.node_binaries.kubelet),
                f"--config={files['kubelet']}",
                f"--kubeconfig={self._component_kubeconfig('kubelet')}",
                f"--root-dir={self.node_paths.kubelet_dir}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
            self.logs_dir / "kubelet.log",
            ports["kubelet"],
        )

    def _proxy(self) -> Component:
        port, metrics = free_port(), free_port()
        return Component(
            "kube-proxy",
            [
                str(self.node_binaries.kube_proxy),
                f"--kubeconfig={self._component_kubeconfig('kube-proxy')}",
                f"--hostname-override={NODE_NAME}",
                "--proxy-mode=iptables",
                f"--cluster-cidr={POD_SUBNET}",
                f"--healthz-bind-address=127.0.0.1:{port}",
                f"--metrics-bind-address=127.0.0.1:{metrics}",
                # conntrack's table size is the host's business, not a test cluster's
                "--conntrack-max-per-core=0",
                "--v=1",
            ],
            self.logs_dir / "kube-proxy.log",
            port,
        )


def stop_node_cluster_from_state(state_dir: Path, kube_proxy: Path | None = None) -> list[str]:
    """``localcluster down`` for a cluster with a node: the node's processes but containerd,
    then its containers, then containerd and the control plane, then the host's leftovers."""
    state_path = state_dir / STATE_FILE
    if not state_path.exists():
        return []
    state = json.loads(state_path.read_text())
    paths = NodePaths(state_dir / "node")
    stopped = []
    entries = {e["name"]: e for e in state["components"]}
    for name in ("kube-proxy", "kubelet", "kube-scheduler"):
        entry = entries.get(name)
        if entry and entry["pid"] is not None:
            Component(name, [], Path(entry["log"]), entry["port"], pid=entry["pid"]).stop()
            stopped.append(name)
    teardown(paths)
    state["components"] = [e for e in state["components"] if e["name"] not in stopped]
    state_path.write_text(json.dumps(state, indent=2))
    stopped += stop_from_state(state_dir)
    teardown_host(paths, kube_proxy)
    return stopped


REPO_ROOT = Path(__file__).resolve().parents[1]
NODE_IMAGES_SCRIPT = REPO_ROOT / "tools" / "build-node-images.sh"
OPERATOR_IMAGE = "ghcr.io/hikyo-org/hikyo-operator"  # the chart's operator.image.repository
REDIS_IMAGE = "localhost/hikyo-redis:local"  # tools/build-node-images.sh


def node_images() -> dict[str, tuple[Path, str | None]]:
    """The images the node gets: the pause, application and Redis images (built now if
    missing, in seconds), and the operator image when tools/build-image.sh has written it."""
    directory = Path(os.environ.get("HIKYO_NODE_IMAGES") or REPO_ROOT / "var" / "node-images")
    archives = ("pause.oci.tar", "app.oci.tar", "redis.oci.tar")
    if not all((directory / archive).is_file() for archive in archives):
        result = subprocess.run(
            ["bash", str(NODE_IMAGES_SCRIPT)], capture_output=True, text=True, timeout=900
        )
        if result.returncode != 0:
            last = result.stderr.strip().splitlines()[-1:] or ["no output"]
            raise NodeFailed(f"{NODE_IMAGES_SCRIPT.name} failed: {last[0]}")
    images: dict[str, tuple[Path, str | None]] = {
        PAUSE_IMAGE: (directory / "pause.oci.tar", None),
        APP_IMAGE: (directory / "app.oci.tar", None),
        # the chart's bundled Redis names it by digest (operator.scaled.redis.image)
        REDIS_IMAGE: (directory / "redis.oci.tar", archive_digest(directory / "redis.oci.tar")),
    }
    operator = Path(
        os.environ.get("HIKYO_IMAGE_ARCHIVE") or REPO_ROOT / "var/image/hikyo-operator.oci.tar"
    )
    if operator.is_file() and archive_digest(operator):
        images[f"{OPERATOR_IMAGE}:{_project_version()}"] = (operator, archive_digest(operator))
    return images


def archive_digest(archive: Path) -> str | None:
    """The manifest digest beside an image archive (``<archive>.digest``), if written."""
    digest_file = Path(f"{archive}.digest")
    return digest_file.read_text().strip() if digest_file.is_file() else None


def _project_version() -> str:
    import tomllib

    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
