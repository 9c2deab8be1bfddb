"""``manage.py dev_cluster up|down|status``: a real local control plane for demos and debugging."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from kubernetes import config

from k8s.crd_manifests import install_crds
from k8s.localcluster import (
    BinariesUnavailable,
    ComponentFailed,
    LocalControlPlane,
    locate_binaries,
    read_state,
    stop_from_state,
)


class Command(BaseCommand):
    help = (
        "Start, stop or inspect a local etcd + kube-apiserver + kube-controller-manager. "
        "`up` prints the kubeconfig path; export KUBECONFIG=<it> to use the cluster."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["up", "down", "status"])
        parser.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help=f"where PKI, logs and kubeconfig live (default {settings.DEV_CLUSTER_DIR})",
        )
        parser.add_argument(
            "--port", type=int, default=None, help="kube-apiserver port (default: a free one)"
        )

    def handle(
        self, *args: Any, action: str, state_dir: Path | None, port: int | None, **options: Any
    ) -> None:
        state_dir = (state_dir or settings.DEV_CLUSTER_DIR).resolve()
        getattr(self, f"_{action}")(state_dir, port)

    def _up(self, state_dir: Path, port: int | None) -> None:
        state = read_state(state_dir)
        if state and all(c["running"] for c in state["components"]):
            self.stderr.write(f"already running at {state['server']}")
            self.stdout.write(state["kubeconfig"])
            return
        if state:
            stop_from_state(state_dir)  # a half-dead cluster: clear it before starting afresh
        # Progress goes to stderr: stdout is only the kubeconfig path, for KUBECONFIG=$(...).
        try:
            started = time.monotonic()
            self.stderr.write("control plane binaries: locating (a first run builds them)...")
            binaries = locate_binaries(progress=lambda line: self.stderr.write(f"  {line}"))
            self.stderr.write(f"control plane binaries: ready in {self._since(started)}")
            started = time.monotonic()
            self.stderr.write("control plane: starting etcd, kube-apiserver, controller-manager...")
            cluster = LocalControlPlane(binaries, state_dir, apiserver_port=port)
            cluster.start()
        except (BinariesUnavailable, ComponentFailed) as error:
            raise CommandError(str(error)) from error
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        try:
            install_crds(api)
        except BaseException:
            cluster.stop()
            raise
        finally:
            api.close()
        cluster.detach()
        self.stderr.write(
            f"control plane: ready at {cluster.server} in {self._since(started)}; "
            f"logs in {cluster.logs_dir}"
        )
        self.stdout.write(str(cluster.kubeconfig))

    @staticmethod
    def _since(started: float) -> str:
        return f"{time.monotonic() - started:.1f} s"

    def _down(self, state_dir: Path, port: int | None) -> None:
        stopped = stop_from_state(state_dir)
        self.stdout.write(f"stopped {', '.join(stopped)}" if stopped else "no cluster running")

    def _status(self, state_dir: Path, port: int | None) -> None:
        state = read_state(state_dir)
        if state is None:
            raise CommandError(f"no cluster in {state_dir}; run `manage.py dev_cluster up`")
        for component in state["components"]:
            running = "running" if component["running"] else "NOT RUNNING"
            self.stdout.write(
                f"{component['name']:<24} pid {component['pid']:<8} port {component['port']:<6}"
                f" {running}"
            )
        self.stdout.write(f"kubeconfig: {state['kubeconfig']}")
        if not all(c["running"] for c in state["components"]):
            raise CommandError("some components are not running; `dev_cluster down` then `up`")
