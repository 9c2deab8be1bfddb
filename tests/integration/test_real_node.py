"""Issue 50: the chart's pods on a real node (``python -m localcluster up --node``: containerd,
kubelet, kube-scheduler, kube-proxy), installed with helm as a user would, and a delivered value
reaching a running application through envFrom and a mounted file.

Opt-in (``pytest -m node``, run by CI's image lane once the operator image is built): it needs
root, containerd, runc, the CNI plugins, the node binaries (tools/build-node.sh) and the operator
image archive (HIKYO_IMAGE_ARCHIVE, tools/build-image.sh). A missing part fails the test with
what to do, unless HIKYO_SKIP_NODE=1 says to skip. The figures it measures are printed (the
publish-to-new-pod times), never asserted.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config

from devserver.server import DevServer
from localcluster import BinariesUnavailable, locate_binaries
from localcluster.binaries import locate_node_binaries
from localcluster.node import NodeFailed
from localcluster.node_cluster import NodeCluster, node_images
from localcluster.node_layout import NODE_IP
from tests.support.helm import CHART, helm, seed_values
from tests.support.world import canary

pytestmark = pytest.mark.node

NAMESPACE = "hikyo-system"
APPS = "payments"  # the seed's values watch this namespace
RELEASE = "hikyo"
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
APP_IMAGE = "localhost/hikyo-node-app:local"
ORG, PROJECT, ENVIRONMENT = (f"{kind}_{uuid.uuid4()}" for kind in ("org", "proj", "env"))
TOKEN = canary("nodetoken")


@dataclass
class Node:
    cluster: NodeCluster
    api: client.ApiClient
    devserver: DevServer
    tmp: Path

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def publish(self, value: str) -> None:
        key = {"name": "APP_VALUE", "classification": "config", "value": value}
        self.devserver.publish(ORG, PROJECT, ENVIRONMENT, [key])

    def logs(self, namespace: str, pod: str) -> str:
        try:
            return self.core.read_namespaced_pod_log(pod, namespace, _request_timeout=10)
        except client.ApiException:
            return ""  # not started yet

    def pods(self, namespace: str, app: str) -> list[client.V1Pod]:
        found = self.core.list_namespaced_pod(namespace, label_selector=f"app={app}")
        return [p for p in found.items if p.metadata.deletion_timestamp is None]


def _skip_or_fail(why: str) -> None:
    if os.environ.get("HIKYO_SKIP_NODE") == "1":
        pytest.skip(why)
    pytest.fail(f"{why} (HIKYO_SKIP_NODE=1 skips the real-node tests)")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    if os.geteuid() != 0:
        _skip_or_fail("a node runs containers and a bridge: run as root")
    archive = os.environ.get("HIKYO_IMAGE_ARCHIVE")
    if not archive or not Path(archive).is_file():
        _skip_or_fail("HIKYO_IMAGE_ARCHIVE must name the operator image (tools/build-image.sh)")
    tmp = tmp_path_factory.mktemp("node")
    try:
        cluster = NodeCluster(
            locate_binaries(), locate_node_binaries(), tmp / "cluster", node_images()
        )
        cluster.start()
    except (BinariesUnavailable, NodeFailed) as error:
        _skip_or_fail(f"the node could not start: {error}")
        raise
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    devserver = DevServer(host=NODE_IP).start()  # where the node's pods reach it
    try:
        yield Node(cluster, api, devserver, tmp)
    finally:
        devserver.stop()
        api.close()
        cluster.stop()


def _wait(what: str, check: Callable[[], object], timeout: float, every: float = 0.5) -> object:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def _namespace(node: Node, name: str) -> None:
    node.core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=RESTRICTED))
    )


def _image_digest() -> str:
    return Path(f"{os.environ['HIKYO_IMAGE_ARCHIVE']}.digest").read_text().strip()


def test_the_chart_runs_as_pods_under_restricted_pod_security(node: Node) -> None:
    """helm install with the seed's values and the local image's digest, into a namespace that
    enforces the restricted Pod Security level: the operator's pod becomes Ready through its
    own probes, as the chart's ServiceAccount, and leads."""
    _namespace(node, NAMESPACE)
    _namespace(node, APPS)
    values = seed_values()
    values["operator"]["image"] = {"digest": _image_digest()}
    installed = helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--wait", "--timeout", "100s",
        kubeconfig=node.cluster.kubeconfig, values=values, tmp=node.tmp,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-2000:]
    pods = node.core.list_namespaced_pod(NAMESPACE).items
    assert len(pods) == 1
    pod = pods[0]
    assert pod.status.phase == "Running"
    assert all(c.ready for c in pod.status.container_statuses)
    assert pod.spec.service_account_name == f"{RELEASE}-hikyo-operator"
    assert pod.spec.node_name == "hikyo-node"
    leases = client.CoordinationV1Api(node.api).list_namespaced_lease(NAMESPACE).items
    assert [lease.spec.holder_identity.startswith(pod.metadata.name) for lease in leases] == [True]


def _deliver(node: Node, first: str) -> None:
    """The Hikyo side and the cluster side of one delivery into Secret app-env, with two
    applications reading it: ``app`` (opted in to restarts) and ``app-mounted`` (not)."""
    node.publish(first)
    node.devserver.add_credential(TOKEN, ORG, PROJECT, ENVIRONMENT)
    node.custom.create_cluster_custom_object(
        "hikyo.dev", "v1alpha1", "hikyoinstances",
        {"apiVersion": "hikyo.dev/v1alpha1", "kind": "HikyoInstance",
         "metadata": {"name": "primary"},
         "spec": {"url": node.devserver.url, "caBundle": node.devserver.ca_bundle_b64}},
    )  # fmt: skip
    node.core.create_namespaced_secret(
        APPS,
        client.V1Secret(
            metadata=client.V1ObjectMeta(
                name="hikyo-credential",
                labels={"hikyo.dev/delivery": "true", "hikyo.dev/instance": "primary"},
            ),
            data={"hikyo-token": base64.b64encode(TOKEN.encode()).decode()},
        ),
    )
    node.custom.create_namespaced_custom_object(
        "hikyo.dev", "v1alpha1", APPS, "hikyosecrets",
        {"apiVersion": "hikyo.dev/v1alpha1", "kind": "HikyoSecret", "metadata": {"name": "app"},
         "spec": {"instanceRef": {"name": "primary"},
                  "auth": {"secretRef": {"name": "hikyo-credential"}},
                  "scope": {"org": ORG, "project": PROJECT, "environment": ENVIRONMENT},
                  "mapping": [{"key": "APP_VALUE"}], "target": {"name": "app-env"},
                  "resyncInterval": "30s"}},
    )  # fmt: skip
    for name, opted_in in (("app", True), ("app-mounted", False)):
        node.apps.create_namespaced_deployment(APPS, _application(name, opted_in))


def _application(name: str, opted_in: bool) -> client.V1Deployment:
    annotations = {"hikyo.dev/secrets": "app-env"} if opted_in else {}
    container = client.V1Container(
        name="app",
        image=APP_IMAGE,
        image_pull_policy="Never",
        env_from=[client.V1EnvFromSource(secret_ref=client.V1SecretEnvSource(name="app-env"))],
        env=[client.V1EnvVar(name="APP_VALUE_FILE", value="/etc/app/APP_VALUE")],
        volume_mounts=[client.V1VolumeMount(name="value", mount_path="/etc/app", read_only=True)],
        security_context=client.V1SecurityContext(
            allow_privilege_escalation=False,
            capabilities=client.V1Capabilities(drop=["ALL"]),
        ),
    )
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": name}),
                spec=client.V1PodSpec(
                    containers=[container],
                    termination_grace_period_seconds=2,
                    security_context=client.V1PodSecurityContext(
                        run_as_non_root=True,
                        seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
                    ),
                    volumes=[
                        client.V1Volume(
                            name="value",
                            secret=client.V1SecretVolumeSource(secret_name="app-env"),
                        )
                    ],
                ),
            ),
        ),
    )


def _serving(node: Node, app: str, line: str) -> list[str]:
    """The pods of ``app`` whose output has ``line``."""
    pods = node.pods(APPS, app)
    return [p.metadata.name for p in pods if line in node.logs(APPS, p.metadata.name).splitlines()]


def _rolled_out(node: Node, app: str, line: str) -> bool:
    deployment = node.apps.read_namespaced_deployment_status(app, APPS)
    status, wanted = deployment.status, deployment.spec.replicas
    done = (
        (status.observed_generation or 0) >= deployment.metadata.generation
        and status.updated_replicas == wanted
        and status.available_replicas == wanted
        and (status.replicas or 0) == wanted
    )
    return done and len(_serving(node, app, line)) == len(node.pods(APPS, app)) == wanted


def _measure_change(node: Node, value: str, started: float) -> dict[str, float]:
    """Seconds from ``started`` to: the first restarted pod printing ``value`` from its
    environment, the whole rollout done, and the running unrestarted pod's file changing."""
    found: dict[str, float] = {}
    deadline = started + 240
    while len(found) < 3:
        assert time.monotonic() < deadline, f"not all of the change seen: {sorted(found)}"
        now = time.monotonic() - started
        if "first new pod" not in found and _serving(node, "app", f"env {value}"):
            found["first new pod"] = now
        if "rollout done" not in found and _rolled_out(node, "app", f"env {value}"):
            found["rollout done"] = now
        if "mounted file" not in found and _serving(node, "app-mounted", f"file {value}"):
            found["mounted file"] = now
        time.sleep(0.5)
    return found


def test_a_published_value_reaches_the_running_application(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    """Publish → the operator patches the stamp → Kubernetes rolls the opted-in Deployment →
    its new pod prints the new value from envFrom; the unrestarted pod reads it from its
    mounted file after the kubelet's sync. Then the same after a forced resync."""
    first, second, third = canary("nodefirst"), canary("nodesecond"), canary("nodethird")
    _deliver(node, first)
    _wait("app prints the first value", lambda: _rolled_out(node, "app", f"env {first}"), 180)
    mounted = _wait("app-mounted has the first value",
                    lambda: _serving(node, "app-mounted", f"file {first}"), 180)  # fmt: skip

    started = time.monotonic()
    node.publish(second)
    by_resync = _measure_change(node, second, started)
    assert _serving(node, "app-mounted", f"file {second}") == mounted  # the same pod, no restart

    started = time.monotonic()
    node.publish(third)
    node.custom.patch_namespaced_custom_object(
        "hikyo.dev", "v1alpha1", APPS, "hikyosecrets", "app",
        {"metadata": {"annotations": {"hikyo.dev/force-sync": "after-third"}}},
    )  # fmt: skip
    by_force = _measure_change(node, third, started)
    for how, figures in (("resyncInterval 30s", by_resync), ("forced resync", by_force)):
        shown = ", ".join(f"{what} {seconds:.1f} s" for what, seconds in figures.items())
        with capsys.disabled():  # the figures, in the lane's output
            print(f"\nreal node, publish → ({how}): {shown}")

    # No value in any pod's output but the applications' own lines the test reads.
    operator_pods = node.core.list_namespaced_pod(NAMESPACE).items
    operator_logs = "".join(node.logs(NAMESPACE, p.metadata.name) for p in operator_pods)
    assert operator_logs
    for value in (first, second, third, TOKEN):
        assert value not in operator_logs
    for pod in node.pods(APPS, "app") + node.pods(APPS, "app-mounted"):
        for line in node.logs(APPS, pod.metadata.name).splitlines():
            assert line.split(" ", 1)[0] in ("env", "file"), "the application prints nothing else"
