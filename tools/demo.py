"""The operator's main job on this machine, with nothing given: a local control plane, the
reference Hikyo server, and the embedded operator delivering a sample HikyoSecret.

    python tools/demo.py          # runs until Ctrl-C, printing each reconcile
    python tools/demo.py --once   # exits 0 once the sample Secret is delivered and Ready

With KUBECONFIG set it uses that cluster instead of starting one (and creates its sample
objects in the namespace ``hikyo-demo``).
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("HIKYO_OPERATOR_NAMESPACE", "hikyo-system")

import django  # noqa: E402 - after the path and settings above

from controlplane.boot import load_settings_or_exit  # noqa: E402

load_settings_or_exit()
django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from kubernetes import client, config  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from controlplane.observations.recording import BackgroundRecorder  # noqa: E402
from devserver import DevServer, new_id  # noqa: E402
from hikyo.clients import ClientCache  # noqa: E402
from k8s.crd_manifests import install_crds  # noqa: E402
from k8s.gateway import KubeCluster  # noqa: E402
from localcluster import LocalControlPlane, locate_binaries  # noqa: E402
from workers.leader.process import OperatorProcess  # noqa: E402
from workers.queue.memory import MemoryQueue  # noqa: E402
from workers.runtime import Runtime  # noqa: E402

NAMESPACE = "hikyo-demo"
TOKEN = "hik_demo_" + base64.b32encode(os.urandom(10)).decode().lower()


class _Phase:
    """Prints "<name>: <doing>..." when made and "<name>: <done> in 4.1 s" at its end.

    A demo's slow steps (a cold build is many minutes) must never look like a hang. Use it
    as a context manager (setting ``done``), or call ``end()`` where the step ends.
    """

    def __init__(self, name: str, doing: str) -> None:
        self.name, self.done = name, "ready"
        print(f"{name}: {doing}...", flush=True)
        self._started = time.monotonic()

    def end(self, done: str | None = None) -> None:
        took = time.monotonic() - self._started
        print(f"{self.name}: {done or self.done} in {took:.1f} s", flush=True)

    def __enter__(self) -> _Phase:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is None:
            self.end()
        else:
            took = time.monotonic() - self._started
            print(f"{self.name}: failed after {took:.1f} s", flush=True)


def _relay(line: str) -> None:
    print(f"  {line}", flush=True)  # the build script's progress, indented under its phase


def _ensure_namespace(core: client.CoreV1Api, name: str) -> None:
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except ApiException as error:
        if error.status != 409:
            raise


def _apply(create, *args) -> None:
    try:
        create(*args)
    except ApiException as error:
        if error.status != 409:
            raise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="exit once the Secret is Ready")
    options = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    for noisy in ("urllib3", "kubernetes", "devserver"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    with _Phase("database", "applying migrations"):
        call_command("migrate", verbosity=0)

    cluster = None
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        print(f"control plane: using KUBECONFIG={kubeconfig}", flush=True)
    else:
        with _Phase("control plane binaries", "locating (a first run builds them: many minutes)"):
            binaries = locate_binaries(progress=_relay)
        cluster = LocalControlPlane(binaries, Path(tempfile.mkdtemp(prefix="hikyo-")))
        with _Phase("control plane", "starting etcd, kube-apiserver, kube-controller-manager") as p:
            cluster.start()
            p.done = f"ready at {cluster.server}"
        kubeconfig = str(cluster.kubeconfig)
    api = config.new_client_from_config(config_file=kubeconfig)
    with _Phase("CRDs", "installing") as p:
        install_crds(api)
        p.done = "installed"
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    operator_namespace = settings.HIKYO_OPERATOR.operator_namespace
    _ensure_namespace(core, operator_namespace)
    _ensure_namespace(core, NAMESPACE)

    devserver = _Phase("devserver", "starting the reference Hikyo server")
    with DevServer() as hikyo:
        devserver.end(f"ready at {hikyo.url}")
        samples = _Phase("sample objects", "publishing values; creating HikyoInstance, HikyoSecret")
        org, project, environment = new_id("org"), new_id("prj"), new_id("env")
        hikyo.publish(
            org,
            project,
            environment,
            [
                {
                    "name": "DATABASE_URL",
                    "classification": "config",
                    "value": "postgres://demo@db/demo",
                },
                {"name": "LOG_LEVEL", "classification": "config", "value": "info"},
            ],
        )
        hikyo.add_credential(TOKEN, org, project, environment)
        instance = f"demo-{os.getpid()}"
        _apply(
            custom.create_cluster_custom_object,
            "hikyo.dev",
            "v1alpha1",
            "hikyoinstances",
            {
                "apiVersion": "hikyo.dev/v1alpha1",
                "kind": "HikyoInstance",
                "metadata": {"name": instance},
                "spec": {"url": hikyo.url, "caBundle": hikyo.ca_bundle_b64},
            },
        )
        try:  # a fresh token each run: replace an earlier run's credential
            core.delete_namespaced_secret("demo-credential", NAMESPACE)
        except ApiException as error:
            if error.status != 404:
                raise
        core.create_namespaced_secret(
            NAMESPACE,
            client.V1Secret(
                metadata=client.V1ObjectMeta(
                    name="demo-credential",
                    labels={"hikyo.dev/delivery": "true", "hikyo.dev/instance": instance},
                ),
                string_data={"hikyo-token": TOKEN + "\n"},
            ),
        )
        _apply(
            custom.create_namespaced_custom_object,
            "hikyo.dev",
            "v1alpha1",
            NAMESPACE,
            "hikyosecrets",
            {
                "apiVersion": "hikyo.dev/v1alpha1",
                "kind": "HikyoSecret",
                "metadata": {"name": "demo"},
                "spec": {
                    "instanceRef": {"name": instance},
                    "auth": {"secretRef": {"name": "demo-credential"}},
                    "scope": {"org": org, "project": project, "environment": environment},
                    "mapping": [{"key": "DATABASE_URL"}, {"key": "LOG_LEVEL"}],
                    "target": {"name": "demo-env"},
                    "resyncInterval": "30s",
                },
            },
        )
        custom.patch_namespaced_custom_object(
            "hikyo.dev",
            "v1alpha1",
            NAMESPACE,
            "hikyosecrets",
            "demo",
            {
                "spec": {
                    "instanceRef": {"name": instance},
                    "scope": {"org": org, "project": project, "environment": environment},
                }
            },
        )
        samples.end(f"created (HikyoInstance {instance}, HikyoSecret {NAMESPACE}/demo)")

        runtime = Runtime(
            settings=settings.HIKYO_OPERATOR,
            cluster=KubeCluster(api),
            queue=MemoryQueue(),
            clients=ClientCache(),
            record=BackgroundRecorder(),
        )
        operator = OperatorProcess(runtime, leader_election=settings.HIKYO_OPERATOR.leader_election)
        with _Phase("operator", "starting the embedded operator") as p:
            operator.start()
            p.done = f"running, watching HikyoSecret {NAMESPACE}/demo"
        ready = "Unknown"  # so a Ctrl-C before delivery still exits cleanly (non-zero)
        try:
            delivery = _Phase("delivery", f"waiting for HikyoSecret {NAMESPACE}/demo to be Ready")
            ready = _wait_ready(custom, timeout=120)
            if ready == "True":
                secret = core.read_namespaced_secret("demo-env", NAMESPACE)
                delivery.end(
                    f"delivered Secret {NAMESPACE}/demo-env (keys {sorted(secret.data)}; "
                    f"HikyoSecret Ready={ready})"
                )
            else:
                delivery.end(f"NOT delivered: HikyoSecret Ready={ready} after waiting")
            if cluster is not None and not options.once:  # --once stops it right away
                print(f"kubeconfig: {kubeconfig}  (kubectl get hksec -A)", flush=True)
            if not options.once:
                threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            with _Phase("operator", "stopping") as p:
                operator.stop()
                p.done = "stopped"
            if cluster is not None:
                with _Phase("control plane", "stopping") as p:
                    cluster.stop()
                    p.done = "stopped"
    return 0 if ready == "True" else 1


def _wait_ready(custom: client.CustomObjectsApi, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    status = "Unknown"
    while time.monotonic() < deadline:
        cr = custom.get_namespaced_custom_object(
            "hikyo.dev", "v1alpha1", NAMESPACE, "hikyosecrets", "demo"
        )
        for condition in (cr.get("status") or {}).get("conditions") or []:
            if condition["type"] == "Ready":
                status = condition["status"]
                if status == "True":
                    return status
        time.sleep(0.5)
    return status


if __name__ == "__main__":
    sys.exit(main())
