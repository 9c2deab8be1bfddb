"""``python -m localcluster up|down|status``: a real local control plane for demos and debugging.

``up`` prints only the kubeconfig path on stdout (``export KUBECONFIG=$(python -m localcluster
up)``); progress and errors go to stderr, an error as one line with exit status 1. Run it from
the checkout: like the devserver, this package is for development and is not in the wheel.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from kubernetes import config

from k8s.crd_manifests import install_crds
from localcluster import (
    BinariesUnavailable,
    ComponentFailed,
    LocalControlPlane,
    locate_binaries,
    read_state,
    stop_from_state,
)
from localcluster.binaries import locate_coredns, locate_node_binaries
from localcluster.node import NodeFailed
from localcluster.node_cluster import NodeCluster, node_images, stop_node_cluster_from_state
from localcluster.node_layout import NODE_NAME


class CommandFailed(Exception):
    """An expected failure, reported as its one-line message and exit status 1."""


def default_state_dir() -> Path:
    """HIKYO_DEV_CLUSTER_DIR, else ``hikyo-dev/cluster`` in the user's cache directory."""
    given = os.environ.get("HIKYO_DEV_CLUSTER_DIR")
    if given:
        return Path(given)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "hikyo-dev" / "cluster"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m localcluster",
        description=(
            "Start, stop or inspect a local etcd + kube-apiserver + kube-controller-manager. "
            "`up` prints the kubeconfig path; export KUBECONFIG=<it> to use the cluster."
        ),
    )
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"where PKI, logs and kubeconfig live (default {default_state_dir()})",
    )
    parser.add_argument(
        "--port", type=int, default=None, help="kube-apiserver port (default: a free one)"
    )
    parser.add_argument(
        "--node",
        action="store_true",
        help="also run a node (containerd, kubelet, kube-scheduler, kube-proxy; root only), "
        "with the images of tools/build-node-images.sh and tools/build-image.sh imported",
    )
    return parser


def main(argv: list[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    args = _parser().parse_args(argv)
    state_dir = (args.state_dir or default_state_dir()).resolve()
    actions = {"up": _up, "down": _down, "status": _status}
    try:
        if args.action == "up" and args.node:
            _up_with_node(state_dir, args.port, out, err)
        else:
            actions[args.action](state_dir, args.port, out, err)
    except CommandFailed as failure:
        print(f"error: {failure}", file=err)
        return 1
    return 0


def _up(state_dir: Path, port: int | None, out: TextIO, err: TextIO) -> None:
    state = read_state(state_dir)
    if state and all(c["running"] for c in state["components"]):
        print(f"already running at {state['server']}", file=err)
        print(state["kubeconfig"], file=out)
        return
    if state:
        stop_from_state(state_dir)  # a half-dead cluster: clear it before starting afresh
    # Progress goes to stderr: stdout is only the kubeconfig path, for KUBECONFIG=$(...).
    try:
        started = time.monotonic()
        print("control plane binaries: locating (a first run builds them)...", file=err)
        binaries = locate_binaries(progress=lambda line: print(f"  {line}", file=err, flush=True))
        print(f"control plane binaries: ready in {_since(started)}", file=err)
        started = time.monotonic()
        print("control plane: starting etcd, kube-apiserver, controller-manager...", file=err)
        cluster = LocalControlPlane(binaries, state_dir, apiserver_port=port)
        cluster.start()
    except (BinariesUnavailable, ComponentFailed) as error:
        raise CommandFailed(str(error)) from error
    _serve(cluster, "control plane", started, out, err)


def _serve(cluster: LocalControlPlane, what: str, started: float, out: TextIO, err: TextIO) -> None:
    """The CRDs installed, the processes left running after this one exits, the kubeconfig
    path printed on stdout (the only line there)."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        install_crds(api)
    except BaseException:
        cluster.stop()
        raise
    finally:
        api.close()
    cluster.detach()
    print(f"{what}: ready at {cluster.server} in {_since(started)}; logs in {cluster.logs_dir}",
          file=err)  # fmt: skip
    print(cluster.kubeconfig, file=out)


def _since(started: float) -> str:
    return f"{time.monotonic() - started:.1f} s"


def _up_with_node(state_dir: Path, port: int | None, out: TextIO, err: TextIO) -> None:
    state = read_state(state_dir)
    if state:
        _down(state_dir, port, err, err)  # a node's leftovers go too
    try:
        started = time.monotonic()
        relay = lambda line: print(f"  {line}", file=err, flush=True)  # noqa: E731
        binaries, node_binaries = locate_binaries(progress=relay), locate_node_binaries(relay)
        coredns = locate_coredns(relay)
        print(f"binaries: ready in {_since(started)}", file=err)
        started = time.monotonic()
        print("control plane and node: starting...", file=err)
        cluster = NodeCluster(binaries, node_binaries, state_dir, node_images(), port, coredns)
        cluster.start()
    except (BinariesUnavailable, ComponentFailed, NodeFailed) as error:
        raise CommandFailed(str(error)) from error
    _serve(cluster, f"control plane and node {NODE_NAME} (Ready)", started, out, err)


def _down(state_dir: Path, port: int | None, out: TextIO, err: TextIO) -> None:
    if (state_dir / "node").is_dir():  # a node's containers, mounts and rules go too
        stopped = stop_node_cluster_from_state(state_dir, _kube_proxy())
    else:
        stopped = stop_from_state(state_dir)
    print(f"stopped {', '.join(stopped)}" if stopped else "no cluster running", file=out)


def _status(state_dir: Path, port: int | None, out: TextIO, err: TextIO) -> None:
    state = read_state(state_dir)
    if state is None:
        raise CommandFailed(f"no cluster in {state_dir}; run `python -m localcluster up`")
    for component in state["components"]:
        running = "running" if component["running"] else "NOT RUNNING"
        print(
            f"{component['name']:<24} pid {component['pid']:<8} port {component['port']:<6}"
            f" {running}",
            file=out,
        )
    print(f"kubeconfig: {state['kubeconfig']}", file=out)
    if not all(c["running"] for c in state["components"]):
        raise CommandFailed("some components are not running; `down` then `up`")


def _kube_proxy() -> Path | None:
    """kube-proxy, for its --cleanup of the node's rules, if it can be found without a build."""
    try:
        return locate_node_binaries(progress=None).kube_proxy
    except BinariesUnavailable:
        return None


if __name__ == "__main__":
    sys.exit(main())
