"""A real local control plane: etcd, kube-apiserver and kube-controller-manager on loopback.

Used by the integration tests (a session fixture) and by ``python -m localcluster``. Each
component runs in its own process group with its log in ``<state>/logs``; ``stop()`` ends the
groups and leaves nothing behind. The same ``state.json`` lets another process (``localcluster
down``) stop a cluster it did not start.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .binaries import Binaries
from .node_layout import NODE_IP
from .pki import Pki, create_pki
from .ports import free_port

START_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 10.0
_LOG_TAIL_LINES = 15
STATE_FILE = "state.json"

# The audit log records every request a ServiceAccount makes (tests run the operator as the
# Helm chart's ServiceAccount and list what it did, S8.2); the harness's own admin and
# controller-manager requests are left out, which keeps the log small.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}
AUDIT_LOG = "audit.log"

# S1/S4 need these in the harness: GC for owned Secrets, the workload controllers for rollouts,
# namespace and service-account controllers for realistic namespaces and TokenRequest.
CONTROLLERS = (
    "garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "daemonset-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
)


class ComponentFailed(RuntimeError):
    """A component did not start or become ready; the message names it and ends with its log."""

    def __init__(self, component: str, problem: str, log_path: Path | None = None) -> None:
        self.component = component
        tail = _tail(log_path) if log_path else ""
        message = f"{component}: {problem}"
        if tail:
            message += f"\n--- last lines of {log_path} ---\n{tail}"
        super().__init__(message)


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the Go servers do: connections in TIME_WAIT from a previous run are no clash.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class Component:
    name: str
    argv: list[str]
    log_path: Path
    port: int
    pid: int | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        if not _port_is_free(self.port):
            raise ComponentFailed(self.name, f"port {self.port} on 127.0.0.1 is already in use")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            # Own session = own process group, so stop() can end it and all its children.
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self.process.pid

    def exit_code(self) -> int | None:
        if self.process is not None:
            return self.process.poll()
        return None if self.pid is not None and _alive(self.pid) else -1

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """SIGTERM the process group, SIGKILL what is left after ``timeout``, reap the child."""
        if self.pid is None:
            return
        _signal_group(self.pid, signal.SIGTERM)
        if not self._wait_gone(timeout):
            _signal_group(self.pid, signal.SIGKILL)
            self._wait_gone(timeout)
        self.pid = None
        self.process = None

    def detach(self) -> None:
        """Lets the process outlive this object (``localcluster up``); stop() still works by pid."""
        with warnings.catch_warnings():
            # Popen warns when dropped while its child runs; here that is the point.
            warnings.simplefilter("ignore", ResourceWarning)
            self.process = None

    def _wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
        while _group_alive(self.pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        if self.process is None:
            # A detached child of this very process (tests) would stay a zombie otherwise.
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, os.WNOHANG)
        return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes: it only waits to be reaped.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def _group_alive(pgid: int) -> bool:
    return bool(_group_members(pgid))


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _wait_until(
    component: Component, probe: Callable[[], bool], timeout: float = START_TIMEOUT_SECONDS
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = component.exit_code()
        if code is not None:
            raise ComponentFailed(
                component.name, f"exited with code {code} before it was ready", component.log_path
            )
        if probe():
            return
        time.sleep(0.2)
    raise ComponentFailed(component.name, f"not ready after {timeout:.0f} s", component.log_path)


def _https_ok(url: str, context: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(
    path: Path, server: str, ca: Path, cert: Path, key: Path, user: str = "admin"
) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "hikyo-dev",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)},
            }
        ],
        "contexts": [{"name": "hikyo-dev", "context": {"cluster": "hikyo-dev", "user": user}}],
        "current-context": "hikyo-dev",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


class LocalControlPlane:
    """etcd + kube-apiserver + kube-controller-manager, started in that order on free ports."""

    # With a node (localcluster/node_cluster.py): pods reach the apiserver on the node's
    # address, kubelets are authorized as nodes, and Services get endpoints.
    serves_a_node = False

    def __init__(
        self, binaries: Binaries, state_dir: Path, apiserver_port: int | None = None
    ) -> None:
        self.binaries = binaries
        self.state_dir = state_dir.resolve()
        self.apiserver_port = apiserver_port or free_port()
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.components: list[Component] = []
        self.pki: Pki | None = None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def audit_log(self) -> Path:
        """JSON lines, one audit event per ServiceAccount request (AUDIT_POLICY)."""
        return self.logs_dir / AUDIT_LOG

    def start(self) -> None:
        """Starts all components and returns once each is ready; stops them all on failure."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.pki = create_pki(self.state_dir / "pki")
        try:
            etcd = self._etcd()
            self._launch(etcd)
            _wait_until(etcd, lambda: _http_ok(f"http://127.0.0.1:{etcd.port}/health"))

            apiserver = self._apiserver(etcd.port)
            self._launch(apiserver)
            client_tls = self.client_ssl_context()
            _wait_until(apiserver, lambda: _https_ok(f"{self.server}/readyz", client_tls))
            write_kubeconfig(
                self.kubeconfig,
                self.server,
                self.pki.serving_ca,
                self.pki.admin_cert,
                self.pki.admin_key,
            )

            controller_manager = self._controller_manager()
            self._launch(controller_manager)
            # KCM serves healthz with its own self-signed cert; loopback, our own process.
            insecure = ssl.create_default_context()
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE
            _wait_until(
                controller_manager,
                lambda: _https_ok(f"https://127.0.0.1:{controller_manager.port}/healthz", insecure),
            )
        except BaseException:
            self.stop()
            raise
        self._save_state()

    def restart_apiserver(self, down_seconds: float = 0.0) -> None:
        """Stops kube-apiserver, waits, and starts it again on the same port (fault tests)."""
        apiserver = next(c for c in self.components if c.name == "kube-apiserver")
        apiserver.stop()
        time.sleep(down_seconds)
        # A fresh log section; the same argv keeps port, etcd and PKI.
        restarted = Component(apiserver.name, apiserver.argv, apiserver.log_path, apiserver.port)
        self.components[self.components.index(apiserver)] = restarted
        restarted.start()
        client_tls = self.client_ssl_context()
        _wait_until(restarted, lambda: _https_ok(f"{self.server}/readyz", client_tls))
        self._save_state()

    def client_ssl_context(self) -> ssl.SSLContext:
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.serving_ca))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def stop(self) -> None:
        """Ends every component (reverse order), SIGKILL after a grace period."""
        for component in reversed(self.components):
            component.stop()
        self.components.clear()
        state = self.state_dir / STATE_FILE
        if state.exists():
            state.unlink()

    def detach(self) -> None:
        """Leaves the components running after this process exits; see ``stop_from_state``."""
        for component in self.components:
            component.detach()

    def pids(self) -> list[int]:
        return [c.pid for c in self.components if c.pid is not None]

    def _launch(self, component: Component) -> None:
        self.components.append(component)
        component.start()
        self._save_state()

    def _save_state(self) -> None:
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "audit_log": str(self.audit_log),
            "components": [
                {"name": c.name, "pid": c.pid, "port": c.port, "log": str(c.log_path)}
                for c in self.components
            ],
        }
        (self.state_dir / STATE_FILE).write_text(json.dumps(state, indent=2))

    def _etcd(self) -> Component:
        client, peer = free_port(), free_port()
        return Component(
            name="etcd",
            port=client,
            log_path=self.logs_dir / "etcd.log",
            argv=[
                str(self.binaries.etcd),
                "--name=default",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

    def _apiserver(self, etcd_port: int) -> Component:
        assert self.pki is not None
        pki = self.pki
        policy = self.state_dir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
        return Component(
            name="kube-apiserver",
            port=self.apiserver_port,
            log_path=self.logs_dir / "kube-apiserver.log",
            argv=[
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                *self._apiserver_address_args(),
                f"--secure-port={self.apiserver_port}",
                f"--cert-dir={pki.directory}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.client_ca}",
                *self._apiserver_node_args(),
                # TokenRequest (S2.3): issuer, verification key and signing key.
                f"--service-account-issuer={self.server}",
                f"--service-account-key-file={pki.service_account_public_key}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                # Written before the response is sent: a test reads every request it caused.
                "--audit-log-mode=blocking",
                "--audit-log-maxsize=200",
                "--audit-log-maxbackup=1",
                "--profiling=false",
                "--v=1",
            ],
        )

    node_controllers: tuple[str, ...] = ()

    def _apiserver_address_args(self) -> list[str]:
        if self.serves_a_node:
            return [
                "--bind-address=0.0.0.0",  # loopback for the tests, the node's address for pods
                f"--advertise-address={NODE_IP}",
                "--endpoint-reconciler-type=lease",
            ]
        return [
            "--bind-address=127.0.0.1",
            # Without it a machine with no default route makes the apiserver give up.
            "--advertise-address=127.0.0.1",
            # Nothing can answer for a loopback "kubernetes" endpoint; stop it retrying.
            "--endpoint-reconciler-type=none",
        ]

    def _apiserver_node_args(self) -> list[str]:
        if not self.serves_a_node:
            return ["--authorization-mode=RBAC"]
        assert self.pki is not None
        return [
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            # logs and exec reach the kubelet as the admin (its webhook authorizes it)
            f"--kubelet-client-certificate={self.pki.admin_cert}",
            f"--kubelet-client-key={self.pki.admin_key}",
            f"--kubelet-certificate-authority={self.pki.serving_ca}",
            "--kubelet-preferred-address-types=InternalIP",
        ]

    def _controller_manager(self) -> Component:
        assert self.pki is not None
        pki = self.pki
        kubeconfig = self.state_dir / "kcm.kubeconfig"
        write_kubeconfig(
            kubeconfig,
            self.server,
            pki.serving_ca,
            pki.controller_manager_cert,
            pki.controller_manager_key,
            user="system:kube-controller-manager",
        )
        port = free_port()
        return Component(
            name="kube-controller-manager",
            port=port,
            log_path=self.logs_dir / "kube-controller-manager.log",
            argv=[
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                f"--controllers={','.join(CONTROLLERS + self.node_controllers)}",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.serving_ca}",
                "--use-service-account-credentials=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.state_dir / 'kcm'}",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                "--v=1",
            ],
        )


def stop_from_state(state_dir: Path) -> list[str]:
    """Stops a cluster another process started, from its ``state.json``; returns what it ended."""
    state_path = state_dir / STATE_FILE
    if not state_path.exists():
        return []
    state = json.loads(state_path.read_text())
    stopped = []
    for entry in reversed(state["components"]):
        if entry["pid"] is None:
            continue
        Component(entry["name"], [], Path(entry["log"]), entry["port"], pid=entry["pid"]).stop()
        stopped.append(entry["name"])
    state_path.unlink()
    return stopped


def read_state(state_dir: Path) -> dict | None:
    state_path = state_dir / STATE_FILE
    if not state_path.exists():
        return None
    state = json.loads(state_path.read_text())
    for entry in state["components"]:
        entry["running"] = entry["pid"] is not None and _group_alive(entry["pid"])
    return state
